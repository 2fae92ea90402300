"""CLI: `c3kit scale`: the compute-vs-communication scaling study over future models and hardware."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from c3kit.cli.common import (JSON_OPT, POWER_OPT, console, emit_json, out_dir_option, progress_bar, rich_table,
                              with_power)

DEFAULT_OUT = "c3kit-out/scale"


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.command("scale")(scale)


def _ints(text: str | None, what: str) -> tuple[int, ...] | None:
    from c3kit.errors import StudyError

    if text is None:
        return None
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise StudyError(f"--{what} must be comma-separated whole numbers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals if what != "generations") or any(v < 0 for v in vals):
        raise StudyError(f"--{what} needs positive whole numbers, got {text!r}")
    return vals


def _names(text: str | None, what: str = "rules") -> tuple[str, ...] | None:
    from c3kit.errors import StudyError

    if text is None:
        return None
    names = tuple(x.strip() for x in text.split(","))
    if not all(names):
        raise StudyError(f"--{what} must be comma-separated names, got {text!r}")
    return names


def scale(
    hidden: str = typer.Option(None, "--hidden", help="Hidden sizes, comma-separated.",
                               show_default="4096,8192,12288,16384,25600,32768"),
    layers: str = typer.Option(None, "--layers", help="Layer counts.", show_default="32,64,128"),
    seq: str = typer.Option(None, "--seq", help="Sequence lengths.", show_default="2048,8192,32768"),
    batch: str = typer.Option(None, "--batch", help="Global batches in sequences.", show_default="512,2048"),
    hw: str = typer.Option(None, "--hw", help="Base GPU that the scaling rules project.", show_default="H100-SXM"),
    rules: str = typer.Option(None, "--rules", help="Scaling rules (see `c3kit hw rules`).",
                              show_default="historical,compute-heavy,balanced,comm-rich"),
    generations: str = typer.Option(None, "--generations", help="Hardware generations.", show_default="0,1,2,3"),
    tp: str = typer.Option(None, "--tp", help="TP sizes.", show_default="2,4,8"),
    pp: str = typer.Option(None, "--pp", help="PP sizes.", show_default="1,4,16"),
    dp: str = typer.Option(None, "--dp", help="DP sizes.", show_default="8,64"),
    paper: bool = typer.Option(True, "--paper/--no-paper", help="Also run the models-grow-with-hardware sweep."),
    grid: bool = typer.Option(True, "--grid/--no-grid", help="Run the grid sweep."),
    cost_model: str = typer.Option("efficiency", "--cost-model", help="roofline or efficiency."),
    overlap: bool = typer.Option(True, "--overlap/--no-overlap",
                                 help="Also exposed communication under --overlap none, simple, contended and auto "
                                      "(auto: the overlap engine per collective-GEMM pair, cached by pair shape)."),
    overlap_mode: str = typer.Option(None, "--overlap-mode",
                                     help="The main overlap mode (exposed, step time, shares; as analyze's --overlap).",
                                     show_default="contended"),
    power: str = POWER_OPT,
    out: Path = out_dir_option(DEFAULT_OUT, "Report folder (checked before the run)."),
    as_json: bool = JSON_OPT,
) -> None:
    """Sweep future models x hardware generations x parallelism: compute, comm, exposed and hidden comm."""
    from c3kit.errors import StudyError
    from c3kit.hw import get_gpu
    from c3kit.step.policy import policy_for
    from c3kit.studies.scaling import GridSpec, PaperSpec, run

    if cost_model not in ("roofline", "efficiency"):
        raise StudyError(f"--cost-model {cost_model!r}: the sweep supports roofline or efficiency")
    if not (grid or paper):
        raise StudyError("nothing to run: drop --no-grid or --no-paper")
    cm, _ = with_power(cost_model, power)
    if overlap_mode is not None:
        policy_for(overlap_mode)  # reject an unknown mode before any work
    changes = {k: v for k, v in {
        "hidden": _ints(hidden, "hidden"), "layers": _ints(layers, "layers"), "seq": _ints(seq, "seq"),
        "batch": _ints(batch, "batch"), "tp": _ints(tp, "tp"), "pp": _ints(pp, "pp"), "dp": _ints(dp, "dp"),
        "generations": _ints(generations, "generations"), "rules": _names(rules)}.items() if v is not None}
    if hw is not None:
        changes["base_gpu"] = get_gpu(hw).name
    gspec = replace(GridSpec(), **changes) if grid else None
    pspec = PaperSpec()
    if hw is not None:
        pspec = replace(pspec, base_gpu=changes["base_gpu"])
    if "rules" in changes:
        pspec = replace(pspec, rules=changes["rules"])
    with progress_bar("projecting scenarios", not as_json) as update:
        res = run(gspec, pspec if paper else None, cm, progress=update, overlap_modes=overlap,
                  overlap=overlap_mode)
    write_report(out, res)
    if as_json:
        emit_json({"headline": res.headline(), "overlap": res.overlap, "notes": res.notes,
                   "by_generation": res.by_generation,
                   "paper": res.paper, "out": str(out)})
        return
    _print(res, out)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _print(res, out: Path) -> None:
    h = res.headline()
    console.print(f"{h['scenarios']} memory-feasible scenarios projected under --overlap {res.overlap}, "
                  f"{h['excluded']} excluded (reasons in {out}/excluded.csv), {h['seconds']:.2f} s")
    bg = res.by_generation
    if len(bg):
        console.print(rich_table("Communication share by hardware generation (grid)",
                                 ["rule", "gen", "scenarios", "comm share median", "10%", "90%", "exposed share",
                                  "MFU"],
                                 [(r.rule, r.generation, r.scenarios, _pct(r.comm_share_median), _pct(r.comm_share_p10),
                                   _pct(r.comm_share_p90), _pct(r.exposed_share_median), _pct(r.mfu_median))
                                  for r in bg.itertuples(index=False)]))
        if "exposed_of_comm_auto" in bg.columns:
            console.print(rich_table("Exposed share of the communication by overlap mode (grid, median)",
                                     ["rule", "gen", "none", "simple", "contended", "auto"],
                                     [(r.rule, r.generation, _pct(r.exposed_of_comm_none),
                                       _pct(r.exposed_of_comm_simple), _pct(r.exposed_of_comm_contended),
                                       _pct(r.exposed_of_comm_auto))
                                      for r in bg.itertuples(index=False)]))
    p = res.paper
    if len(p):
        console.print(rich_table("Models growing with hardware (fastest fitting layout)",
                                 ["rule", "gen", "params", "hidden", "layers", "tp", "pp", "dp", "comm share",
                                  "exposed share", "MFU"],
                                 [(r.rule, r.generation, f"{r.params / 1e9:,.0f}B", r.hidden, r.layers, r.tp, r.pp, r.dp,
                                   _pct(r.comm_share), _pct(r.exposed_share), _pct(r.mfu))
                                  for r in p.itertuples(index=False)]))
    console.print(f"report: {out}/report.md")


def write_report(out: Path, res) -> None:
    """Write the study's CSV tables, PNG figures and report.md into out (all or nothing)."""
    from c3kit.report import Report
    from c3kit.studies.scaling import figures

    with Report(out, "c3kit scale: computation vs communication on future models and hardware") as rep:
        for n in res.notes:
            rep.text(n)
        for name, fig, caption in figures(res):
            rep.figure(name, fig, caption)
        if len(res.by_generation):
            rep.table("by_generation", res.by_generation, "Grid: communication share by rule and generation")
        if len(res.paper):
            rep.table("paper_sweep", res.paper, "Models growing with hardware: fastest fitting layout per generation")
            rep.table("paper_candidates", res.paper_candidates, "Every fitting layout of the paper sweep", show_rows=0)
        if len(res.scenarios):
            rep.table("scenarios", res.scenarios, "Every memory-feasible grid scenario (seconds per GPU per step)",
                      show_rows=10)
        rep.table("excluded", res.excluded if len(res.excluded) else _no_rows(), "Excluded scenarios with reasons",
                  show_rows=10)


def _no_rows():
    import pandas as pd

    return pd.DataFrame({"reason": []})
