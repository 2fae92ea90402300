"""CLI: `c3kit study c3|dma|t3|ficco|all`: run a communication study, print its table, write a report folder."""

from __future__ import annotations

from pathlib import Path

import typer

from c3kit.cli.common import JSON_OPT, finish_studies, out_dir_option, progress_bar
from c3kit.errors import StudyError

study_app = typer.Typer(help="Paper studies: C3/ConCCL, DMA-Latte, T3, FiCCO (ours beside published).",
                        no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.add_typer(study_app, name="study")


def _out_opt(name: str):
    return out_dir_option(f"c3kit-out/study-{name}", "Report folder (CSV, PNG, report.md).")


def _run_one(run, out: Path, as_json: bool, progress: str | None = None, **kwargs) -> None:
    """Run one study (with a progress bar over its scenarios when `progress` names it) and finish it."""
    from c3kit.studies.all_studies import timed

    with progress_bar(progress or "study", bool(progress) and not as_json) as update:
        if progress:
            kwargs["progress"] = update
        res = timed(run, **kwargs)
    finish_studies([res], out, res.title, as_json, single=True)


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
    from c3kit.studies.dma_latte import run

    lo, hi = _binary_size(min_size), _binary_size(max_size)
    if calib is not None and not calib.is_file():
        raise StudyError(f"--calib {calib}: no such file")
    _run_one(run, out, as_json, ranks=ranks, min_size=lo, max_size=hi, h200_overrides=_overrides(set_) or None,
             h200_calib=calib, quick=quick)


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
    from c3kit.studies.t3 import run

    if cost_model not in ("roofline", "efficiency", "table"):
        raise StudyError(f"--cost-model must be roofline, efficiency or table, got {cost_model!r}")
    _run_one(run, out, as_json, tp=_ints(tp, "--tp"), models=_names(models, "--models"), tokens=tokens,
             cost_model=cost_model, quick=quick)


@study_app.command("c3")
def c3(
    gpus: str = typer.Option("MI300X,H200-SXM", "--gpus", help="Comma-separated catalog GPUs."),
    quick: bool = typer.Option(False, "--quick", help="A small scenario set."),
    out: Path = _out_opt("c3"),
    as_json: bool = JSON_OPT,
) -> None:
    """C3 / ConCCL: GEMMs concurrent with collectives; fraction of ideal per strategy and class."""
    from c3kit.studies.c3 import run

    _run_one(run, out, as_json, gpus=_names(gpus), quick=quick)


@study_app.command("ficco")
def ficco(
    gpus: str = typer.Option("MI300X,H200-SXM", "--gpus", help="Comma-separated catalog GPUs (nodes of 8)."),
    quick: bool = typer.Option(False, "--quick", help="A small scenario set."),
    out: Path = _out_opt("ficco"),
    as_json: bool = JSON_OPT,
) -> None:
    """FiCCO: the overlap design space over model scenarios; losses, heuristic vs oracle, best speedup."""
    from c3kit.studies.ficco import run

    _run_one(run, out, as_json, "FiCCO scenarios", gpus=_names(gpus), quick=quick)


@study_app.command("e2e")
def e2e(
    quick: bool = typer.Option(False, "--quick", help="One model per study."),
    out: Path = _out_opt("e2e"),
    as_json: bool = JSON_OPT,
) -> None:
    """T3 and FiCCO end to end: whole training and prefill steps with the schedule inside the step."""
    from c3kit.studies.end_to_end import run

    _run_one(run, out, as_json, quick=quick)


@study_app.command("all")
def all_(
    quick: bool = typer.Option(False, "--quick", help="Every study on its small scenario set."),
    out: Path = _out_opt("all"),
    as_json: bool = JSON_OPT,
) -> None:
    """Every study, one report with all figures."""
    from c3kit.studies.all_studies import STUDIES, run_all

    with progress_bar("studies", not as_json) as update:
        update(0, len(STUDIES))
        results = run_all(progress=lambda name, i, n: update(i, n, f"study {name}"), quick=quick)
    table = "| study | seconds |\n|---|---|\n" + "\n".join(f"| {r.name} | {r.seconds:.2f} |" for r in results)
    finish_studies(results, out, "c3kit communication studies", as_json, notes=0, preface=table)
