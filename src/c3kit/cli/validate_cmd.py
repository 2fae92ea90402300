"""CLI: `c3kit validate`: projected step times against published measured step times of real runs."""

from __future__ import annotations

from pathlib import Path

import typer

from c3kit.cli.common import JSON_OPT, console, emit_json, rich_table
from c3kit.units import fmt_time

DEFAULT_OUT = "c3kit-out/validate"
MODELS = ("calibrated", "efficiency", "roofline")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.command("validate")(validate)


def validate(
    cost_model: str = typer.Option("calibrated", "--cost-model",
                                   help="calibrated (efficiency + the one calibrated A100 GEMM fraction), "
                                        "efficiency (uncalibrated defaults) or roofline."),
    runs: Path = typer.Option(None, "--runs", help="A CSV of runs with the shipped file's columns."),
    out: Path = typer.Option(Path(DEFAULT_OUT), "--out", help="Report folder (CSV, PNG, report.md)."),
    as_json: bool = JSON_OPT,
) -> None:
    """Print measured, predicted and error per published run, and the mean absolute error."""
    from c3kit.errors import StudyError
    from c3kit.studies import validation as v

    if cost_model not in MODELS:
        raise StudyError(f"--cost-model {cost_model!r}: use one of {', '.join(MODELS)}")
    if runs is not None and not runs.is_file():
        raise StudyError(f"--runs {runs}: no such file")
    table = v.load_runs(runs)
    res = v.validate(cost_model, table)
    write_report(out, res, table)
    if as_json:
        emit_json({"cost_model": cost_model, "mae": res.mae, "by_source": res.by_source(), "runs": res.table,
                   "notes": res.notes, "out": str(out)})
        return
    rows = [(r.run, r.layout, r.gpus, fmt_time(r.measured_s), fmt_time(r.predicted_s), f"{100 * r.error:+.1f}%")
            for r in res.table.itertuples(index=False)]
    console.print(rich_table("Measured vs predicted step time", ["run", "layout", "GPUs", "measured", "predicted",
                                                                 "error"], rows))
    for r in res.by_source().itertuples(index=False):
        console.print(f"{r.paper}: {r.runs} runs, mean absolute error {100 * r.mae:.1f}%")
    console.print(f"mean absolute error: {100 * res.mae:.1f}% over {len(res.table)} runs (target <= 10%)")
    for n in res.notes:
        console.print(f"[dim]{n}[/dim]")
    console.print(f"report: {out}/report.md")


def write_report(out: Path, res, runs) -> None:
    """validation.csv, runs.csv (sources), a predicted-vs-measured figure and report.md (all or nothing)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from c3kit.report import Report

    t = res.table
    with Report(out, "c3kit validate: projected vs measured training steps") as rep:
        rep.text(f"Mean absolute error {100 * res.mae:.1f}% over {len(t)} runs.")
        for n in res.notes:
            rep.text(n)
        fig, ax = plt.subplots(figsize=(6, 6))
        for paper, part in t.groupby("paper"):
            ax.scatter(part["measured_s"], part["predicted_s"], label=paper, zorder=3)
        lo, hi = t["measured_s"].min() * 0.7, t["measured_s"].max() * 1.4
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, zorder=2)
        # the band is drawn under the points and the line (zorder), never over them
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="0.9", label="+-10%", zorder=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured step time (s)")
        ax.set_ylabel("predicted step time (s)")
        ax.legend(fontsize=8)
        rep.figure("predicted_vs_measured", fig, "Predicted against measured step time")
        rep.table("validation", t, "Per run (seconds per step)")
        rep.table("by_source", res.by_source(), "Mean absolute error per paper")
        rep.table("runs", runs, "The runs with their configurations and sources", show_rows=0)
