"""Helpers shared by every CLI command: JSON output, rich tables, option parsing."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

import typer
from rich.console import Console
from rich.table import Table

# Piped output (not a terminal) would otherwise be cut to 80 columns and truncate schedule names.
_WIDTH = None if sys.stdout.isatty() else 160
console = Console(width=_WIDTH)
err_console = Console(stderr=True)

JSON_OPT = typer.Option(False, "--json", help="Print one JSON document to stdout instead of tables.")
POWER_HELP = ("GEMM clocks: sustained (power-capped, as a step runs GEMMs back to back; factor 1 for GPUs without a "
              "steady-state calibration) or burst (as timed briefly); docs/cost.md.")
POWER_OPT = typer.Option("sustained", "--power", help=POWER_HELP)


@contextmanager
def progress_bar(what: str, enabled: bool = True) -> Iterator[Callable[..., None]]:
    """A rich progress bar on stderr for a long step; yields update(done, total=None, label=None).

    Shown only when enabled (commands pass `not as_json`) and stderr is a terminal, so pipes, logs
    and --json output stay clean.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    show = enabled and err_console.is_terminal
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=True, disable=not show) as bar:
        task = bar.add_task(what, total=None)

        def update(done: int, total: int | None = None, label: str | None = None) -> None:
            bar.update(task, completed=done, total=total, description=label or what)

        yield update


def wide_console() -> Console:
    """The stdout console for wide comparison tables: 150 columns when stdout is not a terminal (pipes, logs)."""
    # rich would wrap 7-9 column tables at 80 characters off a terminal
    return console if console.is_terminal else Console(width=150)


def finish_studies(results: list, out, title: str, as_json: bool, *, single: bool = False, notes: int = 2,
                   preface: str | None = None) -> None:
    """Write study results into one report folder under `out`, then print one JSON document or their tables.

    single: the JSON document is the one study's own (`c3kit study <name> --json`), else {"studies": [...]}.
    Console: per study its summary table (basis_detail left to the report), the basis line and its first
    `notes` notes; then where the report is.
    """
    from c3kit.report import Report
    from c3kit.studies.all_studies import basis_counts, write_report

    with Report(out, title) as rep:
        if preface:
            rep.text(preface)
        for r in results:
            write_report(r, rep)
    if as_json:
        if single and len(results) == 1:
            emit_json({**results[0].to_dict(), "out": str(out)})
        else:
            emit_json({"studies": [r.to_dict() for r in results], "out": str(out)})
        return
    wide = wide_console()
    for r in results:
        summary = r.summary.drop(columns=[c for c in ("basis_detail",) if c in r.summary.columns]).round(4)
        wide.print(df_table(f"{r.title} ({r.seconds:.2f} s)", summary))
        counts = basis_counts(r)
        console.print("basis of ours beside published: " + (", ".join(f"{n} {b}" for b, n in counts.items())
                                                            or "none given"))
        for note in r.notes[:notes]:
            console.print(note)
    console.print(f"[dim]report: {out}/report.md[/dim]")


def _checked_dir(value):
    from c3kit.report import check_out

    return check_out(value)


def _checked_file(ctx, param, value):
    from c3kit.report import check_out_file

    return check_out_file(value, flag=param.opts[0])


def out_dir_option(default: str | None, help: str):
    """--out for a report folder, checked before any work: not empty, writable, no files other than a c3kit report."""
    # parser=str keeps '' as '' (a Path would turn it into '.', the current folder)
    return typer.Option(default, "--out", help=help, parser=str, callback=_checked_dir, metavar="FOLDER")


def out_file_option(default: str | None, help: str, flag: str = "--out", show_default: bool | str = True):
    """An output-file option, checked before any work: not empty, not a folder, its folder writable."""
    return typer.Option(default, flag, help=help, parser=str, callback=_checked_file, metavar="FILE",
                        show_default=show_default)


def with_power(cost_model: str, power: str):
    """(CostModel, label) for --cost-model and --power (c3kit.api.with_power)."""
    from c3kit.api import with_power as wp

    return wp(cost_model, power)


def emit_json(data: Any) -> None:
    """Print one JSON document to stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=_default) + "\n")


def _default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict(orient="records") if "orient" in o.to_dict.__code__.co_varnames else o.to_dict()
    if hasattr(o, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(o)
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def fmt_cell(v: Any) -> str:
    """A table cell as the reports write it (floats to 4 significant digits, rounding noise as 0)."""
    from c3kit.report import fmt_cell as cell

    return cell(v)


def rich_table(title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Table:
    """A rich Table with right-aligned columns after the first."""
    t = Table(title=title, show_lines=False)
    for i, c in enumerate(columns):
        t.add_column(str(c), justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*[fmt_cell(v) for v in r])
    return t


def df_table(title: str, df, max_rows: int = 60) -> Table:
    """A rich Table from a pandas DataFrame (first max_rows rows)."""
    return rich_table(title, df.columns, df.head(max_rows).itertuples(index=False))
