"""Helpers shared by every CLI command: JSON output, rich tables, option parsing."""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable

import typer
from rich.console import Console
from rich.table import Table

# Piped output (not a terminal) would otherwise be cut to 80 columns and truncate schedule names.
_WIDTH = None if sys.stdout.isatty() else 160
console = Console(width=_WIDTH)
err_console = Console(stderr=True)

JSON_OPT = typer.Option(False, "--json", help="Print one JSON document to stdout instead of tables.")
POWER_OPT = typer.Option("sustained", "--power", help="GEMM clocks: sustained (power-capped, as a step runs GEMMs "
                         "back to back; factor 1 for GPUs without a steady-state calibration) or burst (as timed "
                         "briefly); docs/cost.md.")


def with_power(cost_model: str, power: str):
    """(CostModel, label) for --cost-model and --power; roofline stays the ideal (no clock factor)."""
    from c3kit.cost.model import as_model

    cm = as_model(cost_model).with_(power=power)  # an unknown mode is a one-line CostError
    if power == "burst" or cm.kind == "roofline":
        return cm.with_(power="burst"), cost_model
    return cm, f"{cost_model} ({power} clocks)"


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


def rich_table(title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> Table:
    """A rich Table with right-aligned columns after the first."""
    t = Table(title=title, show_lines=False)
    for i, c in enumerate(columns):
        t.add_column(str(c), justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*[f"{v:.4g}" if isinstance(v, float) else str(v) for v in r])
    return t


def df_table(title: str, df, max_rows: int = 60) -> Table:
    """A rich Table from a pandas DataFrame (first max_rows rows)."""
    return rich_table(title, df.columns, df.head(max_rows).itertuples(index=False))
