"""CLI: `c3kit study c3|dma|t3|ficco|all`: run a communication study, print its table, write a report folder."""

from __future__ import annotations

from pathlib import Path

import typer

from c3kit.cli.common import JSON_OPT, console, df_table, emit_json, out_dir_option, progress_bar
from c3kit.errors import StudyError

study_app = typer.Typer(help="Paper studies: C3/ConCCL, DMA-Latte, T3, FiCCO (ours beside published).",
                        no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.add_typer(study_app, name="study")


def _out_opt(name: str):
    return out_dir_option(f"c3kit-out/study-{name}", "Report folder (CSV, PNG, report.md).")


def _finish(result, out: Path, as_json: bool) -> None:
    from c3kit.report import Report
    from c3kit.studies.all_studies import write_report

    with Report(out, result.title) as rep:
        write_report(result, rep)
    if as_json:
        emit_json({**result.to_dict(), "out": str(out)})
        return
    _out_console().print(df_table(result.title, _rounded(result.summary)))
    console.print(_basis_line(result))
    for note in result.notes[:2]:
        console.print(note)
    console.print(f"[dim]{result.seconds:.2f} s; report: {out}/report.md[/dim]")


def _rounded(df):
    # basis_detail (why a row has its basis) is in the report, the CSV and --json; the console keeps basis
    return df.drop(columns=[c for c in ("basis_detail",) if c in df.columns]).round(4)


def _basis_line(result) -> str:
    from c3kit.studies.all_studies import basis_counts

    counts = basis_counts(result)
    return "basis of ours beside published: " + (", ".join(f"{n} {b}" for b, n in counts.items()) or "none given")


def _out_console():
    # the comparison tables have 7-9 columns: when stdout is not a terminal (pipes, logs) rich would wrap
    # them at 80 characters, so print them at 150 there
    if console.is_terminal:
        return console
    from rich.console import Console

    return Console(width=150)


def _ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise StudyError(f"{what} must be comma-separated integers, got {text!r}") from None
    if any(v <= 0 for v in vals):
        raise StudyError(f"{what} needs positive integers, got {text!r}")
    return vals


def _names(text: str | None, what: str = "--gpus") -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(x.strip() for x in text.split(","))
    if not all(names):
        raise StudyError(f"{what} must be comma-separated names, got {text!r}")
    return names


def _overrides(pairs: list[str] | None) -> dict:
    out = {}
    for p in pairs or []:
        if "=" not in p:
            raise StudyError(f"--set takes NAME=VALUE (e.g. launch=3e-6), got {p!r}")
        k, v = p.split("=", 1)
        try:
            out[k.strip()] = float(v)
        except ValueError:
            raise StudyError(f"--set {k}: value {v!r} is not a number (SI units: s, B/s)") from None
    return out


@study_app.command("dma")
def dma(
    ranks: int = typer.Option(8, "--ranks", help="GPUs in the collective."),
    min_size: str = typer.Option("1KB", "--min-size", help="Smallest size (binary KB: 1KB = 1024 B here)."),
    max_size: str = typer.Option("1GB", "--max-size", help="Largest size."),
    set_: list[str] = typer.Option(None, "--set", help="H200 DMA parameter NAME=VALUE (SI), repeatable."),
    calib: Path = typer.Option(None, "--calib", help="H200 DMA calibration file (kind dma, columns param, value)."),
    quick: bool = typer.Option(False, "--quick", help="Every fourth size only."),
    out: Path = _out_opt("dma"),
    as_json: bool = JSON_OPT,
) -> None:
    """DMA-Latte: DMA-engine collectives 1 KB..1 GB on MI300X and H200, beside the published figures."""
    from c3kit.studies.all_studies import timed
    from c3kit.studies.dma_latte import run

    lo, hi = _binary_size(min_size), _binary_size(max_size)
    if calib is not None and not calib.is_file():
        raise StudyError(f"--calib {calib}: no such file")
    res = timed(run, ranks=ranks, min_size=lo, max_size=hi, h200_overrides=_overrides(set_) or None,
                h200_calib=calib, quick=quick)
    _finish(res, out, as_json)


def _binary_size(text: str) -> float:
    from c3kit.errors import C3kitError
    from c3kit.units import parse_bytes

    t = text.strip().upper()
    # the paper's sizes are powers of two: read KB/MB/GB as KiB/MiB/GiB
    for dec, binary in (("KB", "KIB"), ("MB", "MIB"), ("GB", "GIB")):
        if t.endswith(dec) and not t.endswith(binary):
            t = t[: -len(dec)] + binary
    try:
        return parse_bytes(t)
    except C3kitError as e:
        raise StudyError(str(e)) from None


@study_app.command("t3")
def t3(
    models: str = typer.Option(None, "--models", help="Comma-separated model presets (default: the paper's five)."),
    tp: str = typer.Option(None, "--tp", help="Comma-separated TP degrees for every model (default: the paper's)."),
    tokens: int = typer.Option(8192, "--tokens", help="Tokens per GPU per sublayer (assumed; not in the paper)."),
    cost_model: str = typer.Option("efficiency", "--cost-model", help="c3kit.cost model: roofline or efficiency."),
    quick: bool = typer.Option(False, "--quick", help="Mega-GPT-2 at TP 8 only."),
    out: Path = _out_opt("t3"),
    as_json: bool = JSON_OPT,
) -> None:
    """T3: GEMM + reduce-scatter sublayers: sequential, ideal, T3, T3-MCA, DRAM traffic, end to end."""
    from c3kit.studies.all_studies import timed
    from c3kit.studies.t3 import run

    if cost_model not in ("roofline", "efficiency", "table"):
        raise StudyError(f"--cost-model must be roofline, efficiency or table, got {cost_model!r}")
    res = timed(run, tp=_ints(tp, "--tp"), models=_names(models, "--models"), tokens=tokens, cost_model=cost_model, quick=quick)
    _finish(res, out, as_json)


@study_app.command("c3")
def c3(
    gpus: str = typer.Option("MI300X,H200-SXM", "--gpus", help="Comma-separated catalog GPUs."),
    quick: bool = typer.Option(False, "--quick", help="A small scenario set."),
    out: Path = _out_opt("c3"),
    as_json: bool = JSON_OPT,
) -> None:
    """C3 / ConCCL: GEMMs concurrent with collectives; fraction of ideal per strategy and class."""
    from c3kit.studies.all_studies import timed
    from c3kit.studies.c3 import run

    res = timed(run, gpus=_names(gpus), quick=quick)
    _finish(res, out, as_json)


@study_app.command("ficco")
def ficco(
    gpus: str = typer.Option("MI300X,H200-SXM", "--gpus", help="Comma-separated catalog GPUs (nodes of 8)."),
    quick: bool = typer.Option(False, "--quick", help="A small scenario set."),
    out: Path = _out_opt("ficco"),
    as_json: bool = JSON_OPT,
) -> None:
    """FiCCO: the overlap design space over model scenarios; losses, heuristic vs oracle, best speedup."""
    from c3kit.studies.all_studies import timed
    from c3kit.studies.ficco import run

    with progress_bar("FiCCO scenarios", not as_json) as update:
        res = timed(run, gpus=_names(gpus), quick=quick, progress=update)
    _finish(res, out, as_json)


@study_app.command("e2e")
def e2e(
    quick: bool = typer.Option(False, "--quick", help="One model per study."),
    out: Path = _out_opt("e2e"),
    as_json: bool = JSON_OPT,
) -> None:
    """T3 and FiCCO end to end: whole training and prefill steps with the schedule inside the step."""
    from c3kit.studies.all_studies import timed
    from c3kit.studies.end_to_end import run

    res = timed(run, quick=quick)
    _finish(res, out, as_json)


@study_app.command("all")
def all_(
    quick: bool = typer.Option(False, "--quick", help="Every study on its small scenario set."),
    out: Path = _out_opt("all"),
    as_json: bool = JSON_OPT,
) -> None:
    """Every study, one report with all figures."""
    from c3kit.report import Report
    from c3kit.studies.all_studies import STUDIES, run_all, write_report

    with progress_bar("studies", not as_json) as update:
        update(0, len(STUDIES))
        results = run_all(progress=lambda name, i, n: update(i, n, f"study {name}"), quick=quick)
    with Report(out, "c3kit communication studies") as rep:
        rep.text("| study | seconds |\n|---|---|\n" + "\n".join(f"| {r.name} | {r.seconds:.2f} |" for r in results))
        for r in results:
            write_report(r, rep)
    if as_json:
        emit_json({"studies": [r.to_dict() for r in results], "out": str(out)})
        return
    for r in results:
        _out_console().print(df_table(f"{r.title} ({r.seconds:.2f} s)", _rounded(r.summary)))
        console.print(_basis_line(r))
    console.print(f"[dim]report: {out}/report.md[/dim]")
