"""CLI: `c3kit validate`: projected step times scored against published, measured training runs."""

from __future__ import annotations

from pathlib import Path

import typer

from c3kit.cli.common import (JSON_OPT, POWER_OPT, console, emit_json, out_dir_option, progress_bar, rich_table,
                              with_power)
from c3kit.step.policy import DEFAULT_MODE
from c3kit.units import fmt_time

DEFAULT_OUT = "c3kit-out/validate"
GROUP_TITLES = {"gpu": "GPU", "op_basis": "op basis", "framework_family": "framework", "dtype": "dtype", "kind": "dense/MoE",
                "source_short": "source"}


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.command("validate")(validate)


def validate(
    cost_model: str = typer.Option("efficiency", "--cost-model",
                                   help="roofline, efficiency or table (c3kit.cost), as in `c3kit analyze`."),
    power: str = POWER_OPT,
    runs: Path = typer.Option(None, "--runs", help="A CSV of runs with the shipped file's columns."),
    overlap: str = typer.Option(DEFAULT_MODE, "--overlap",
                                help="Overlap mode of `c3kit analyze`: contended (independent pairs at the contention "
                                     "measured on the H200: step.policy.measured_contention), simple (they fully "
                                     "overlap), none, auto, a family or a schedule."),
    out: Path = out_dir_option(DEFAULT_OUT, "Report folder (CSV, PNG, report.md)."),
    as_json: bool = JSON_OPT,
) -> None:
    """Score projected step times against published measured runs: per run, per group and overall."""
    from c3kit.errors import StudyError
    from c3kit.studies import validation as v

    from c3kit.step.policy import policy_for

    cm, label = with_power(cost_model, power)  # the same construction as `c3kit analyze`
    policy = policy_for(overlap, getattr(cm, "power", "burst"))
    if runs is not None and not runs.is_file():
        raise StudyError(f"--runs {runs}: no such file")
    table = v.load_runs(runs)
    with progress_bar("pricing runs", not as_json) as update:
        res = v.validate(cm, table, policy=policy, progress=update)
    write_report(out, res, table, label)
    if as_json:
        emit_json({"cost_model": label, "overlap": overlap, "overall": res.overall(), "targets": v.TARGETS,
                   "by_group": res.by_group(), "runs": res.table, "not_modelled": res.skipped[["run", "status"]],
                   "notes": res.notes, "op_basis": op_basis_by_gpu(res.table["gpu"]), "out": str(out)})
        return
    _print(res, v.TARGETS, label, out)


def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:+.1f}%"


def _abs_pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f}%"


def _print(res, targets: dict, label: str, out: Path) -> None:
    t = res.scored
    rows = [(r.run, r.gpu, r.framework_family, r.dtype, r.layout, fmt_time(r.measured_s), fmt_time(r.predicted_s),
             _pct(r.error)) for r in t.itertuples(index=False)]
    console.print(rich_table("Measured vs predicted seconds per step (scored runs)",
                             ["run", "GPU", "framework", "dtype", "layout", "measured", "predicted", "error"], rows))
    if len(res.skipped):
        console.print(rich_table("Not scored (the model lacks a feature the run needs)", ["run", "status"],
                                 [(r.run, r.status) for r in res.skipped.itertuples(index=False)]))
    header, rows = breakdown_rows(res)
    tbl = rich_table("Where the predicted step goes (% of the predicted step; measured / predicted at the end)",
                     header, rows)
    tbl.columns[0].no_wrap = True  # run names are what a reader looks up
    tbl.columns[0].min_width = max((len(r[0]) for r in rows), default=3)
    console.print(tbl)
    g = res.by_group()
    console.print(rich_table("Error by group (error = predicted / measured - 1)",
                             ["group", "value", "runs", "MAE", "median |e|", "worst", "bias"],
                             [(GROUP_TITLES.get(r.group, r.group), str(r.value), r.runs, _abs_pct(r.mae),
                               _abs_pct(r.median), _pct(r.worst), _pct(r.bias)) for r in g.itertuples(index=False)]))
    o = res.overall()
    console.print(f"overall over {o['runs']} scored runs ({len(res.skipped)} not modelled): MAE {_abs_pct(o['mae'])} "
                  f"(target <= {100 * targets['mae']:.0f}%), median |e| {_abs_pct(o['median'])}, worst "
                  f"{_pct(o['worst'])} (target within {100 * targets['worst']:.0f}%), bias {_pct(o['bias'])} "
                  f"(target within {100 * targets['bias']:.0f}%); cost model {label}")
    basis = op_basis_by_gpu(res.table["gpu"])
    classes = list(next(iter(basis.values()))["basis"]) if basis else []
    console.print(rich_table("Op basis per GPU and op class (cost/basis.py; sources: --json 'op_basis')",
                             ["GPU", *classes], [(g, *(_short_basis(b["basis"][c]) for c in classes))
                                                 for g, b in basis.items()]))
    backends = list(next(iter(basis.values()))["attention_backends"]) if basis else []
    console.print(rich_table("Attention basis per GPU and backend (cost/attention.py; the runs' backends: "
                             "studies/data/attention_backends.csv)",
                             ["GPU", *backends], [(g, *(_short_basis(b["attention_backends"][k]) for k in backends))
                                                  for g, b in basis.items()]))
    for n in res.notes:
        console.print(f"[dim]{n}[/dim]")
    console.print(f"report: {out}/report.md")


def op_basis_by_gpu(gpus) -> dict:
    """GPU -> {"basis": op class -> label, "sources": op class -> source, "attention_backends": attention backend ->
    label} for each GPU of the runs (cost/basis.py, cost/attention.py)."""
    from c3kit.cost.attention import attention_basis
    from c3kit.cost.basis import basis, basis_sources

    return {g: {"basis": basis(g), "sources": basis_sources(g), "attention_backends": attention_basis(g)}
            for g in sorted(set(map(str, gpus)))}


def _short_basis(label: str) -> str:
    """'transferred from H200-SXM' -> 'transferred', 'published microbenchmark' -> 'published', 'measured flash2 x
    published flash1/flash2 rate ratio of A100-SXM-80G' -> 'measured x ratio'."""
    if label.startswith("batched GEMMs: "):  # unfused attention: priced by its kernels' classes
        return "by kernel"
    return label.split(" ")[0] + (" x ratio" if " rate ratio of " in label else "")


PARTS = {"compute_s": "compute", "exposed_s": "exposed comm", "bubble_s": "pipeline bubble"}


def _parts(b) -> dict[str, str]:
    """Column -> label of the breakdown parts that are non-zero on some run (named overheads by their name)."""
    from c3kit.studies.validation import OVERHEAD_PREFIX

    named = {c: c.removeprefix(OVERHEAD_PREFIX).replace("_", " ") for c in b.columns
             if c.startswith(OVERHEAD_PREFIX) and (b[c] > 0).any()}
    return {**PARTS, **named}


def breakdown_rows(res) -> tuple[list[str], list[tuple]]:
    """(header, rows) of the per-run breakdown: each part as a share of the predicted step."""
    b = res.breakdown()
    parts = _parts(b)
    header = ["run", "predicted", *parts.values(), "measured / predicted"]
    rows = [(r["run"], fmt_time(r["predicted_s"]), *(_abs_pct(r[c] / r["predicted_s"]) for c in parts),
             f"{r['measured_s'] / r['predicted_s']:.2f}x") for _, r in b.iterrows()]
    return header, rows


def breakdown_figure(res):
    """Stacked bars per scored run: compute, exposed comm, bubble and each named overhead, in units of the
    measured step (a bar ending left of 1 is a run the model finds too fast)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = res.breakdown().sort_values(["source_short", "gpu", "run"], kind="stable").reset_index(drop=True)
    parts = _parts(b)
    fig, ax = plt.subplots(figsize=(10, max(5.0, 0.13 * len(b) + 2)))
    y = list(range(len(b)))
    left = [0.0] * len(b)
    for i, (col, label) in enumerate(parts.items()):
        w = (b[col] / b["measured_s"]).to_list()
        ax.barh(y, w, left=left, color=f"C{i}", label=label, height=0.8)
        left = [a + c for a, c in zip(left, w)]
    ax.axvline(1.0, color="k", lw=1.0, label="measured step")
    ax.set_yticks(y, b["run"], fontsize=5)
    ax.set_xlim(0, max(1.05, 1.02 * max(left, default=1.0)))
    ax.set_ylim(len(b) - 0.5, -0.5)
    ax.set_xlabel("predicted seconds per step / measured seconds per step")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig


def error_figure(res):
    """Signed error per scored run, grouped by source, the +-10% band drawn under the points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = res.scored.sort_values(["source_short", "gpu", "run"], kind="stable").reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(max(8.0, 0.14 * len(t) + 3), 5))
    x = range(len(t))
    ax.axhspan(-10, 10, color="0.88", zorder=0, label="+-10%")
    ax.axhline(0, color="k", lw=0.8, zorder=1)
    colors = {g: f"C{i}" for i, g in enumerate(sorted(t["gpu"].unique()))}
    markers = {"bf16": "o", "fp8": "^"}
    for (gpu, dt), part in t.groupby(["gpu", "dtype"], sort=True):
        ax.scatter(part.index, 100 * part["error"], color=colors[gpu], marker=markers.get(dt, "s"), zorder=3,
                   s=22, label=f"{gpu} {dt}")
    edges = t.groupby("source_short", sort=False).indices
    for name, idx in edges.items():
        lo, hi = min(idx), max(idx)
        ax.axvline(hi + 0.5, color="0.6", lw=0.5, zorder=1)
        ax.text((lo + hi) / 2, 1.01, name, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                fontsize=7, rotation=20)
    ax.set_xticks(list(x), t["run"], rotation=90, fontsize=5)
    ax.set_ylabel("signed error: predicted / measured - 1 (%)")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def write_report(out: Path, res, runs, label: str) -> None:
    """validation.csv, by_group.csv, runs.csv (sources), the signed-error figure and report.md (all or nothing)."""
    from c3kit.report import Report

    o = res.overall()
    with Report(out, "c3kit validate: projected vs measured training steps") as rep:
        rep.text(f"Cost model {label}. Scored runs: {o['runs']}; not modelled: {len(res.skipped)}. "
                 f"MAE {_abs_pct(o['mae'])}, median |error| {_abs_pct(o['median'])}, worst {_pct(o['worst'])}, "
                 f"bias {_pct(o['bias'])} (error = predicted / measured - 1; every prediction is out of sample).")
        for n in res.notes:
            rep.text(n)
        rep.figure("signed_error", error_figure(res), "Signed error per run, grouped by source")
        rep.figure("breakdown", breakdown_figure(res), "Where the predicted step goes, per run, in units of the "
                   "measured step: compute, exposed communication, pipeline bubble and each named overhead")
        rep.table("by_group", res.by_group(), "MAE, median |error|, worst and bias per group")
        rep.table("breakdown", res.breakdown(), "Per run: compute, exposed comm, bubble and each named overhead "
                  "(seconds per step; they sum to predicted_s)", show_rows=len(res.scored))
        rep.table("validation", res.table, "Per run (seconds per step), with the runs not modelled")
        rep.table("runs", runs, "The runs with their layouts, sources, assumptions and formulas", show_rows=0)
