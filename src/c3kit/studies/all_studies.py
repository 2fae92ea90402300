"""The shape every communication study returns, report writing, and `run_all` over every study."""

from __future__ import annotations

import math
import time as _time
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from c3kit.errors import C3kitError, StudyError
from c3kit.hw.model import GPU


JSON_MAX_ROWS = 2000  # larger tables go to CSV only, so --json stays a readable document

# The basis of a figure shown beside a published one: how our number relates to the published point.
MEASURED = "measured"  # ours is a measurement on a real GPU
PREDICTED = "predicted independently"  # no parameter was fitted to the published point it stands beside
FITTED = "fitted to these points"  # model parameters were fitted to the very published points shown
BASES = (MEASURED, PREDICTED, FITTED)


@dataclass
class StudyResult:
    """Tidy tables, figure builders and Markdown notes of one study; `summary` is the table to print."""

    name: str
    title: str
    summary: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: list[tuple[str, Callable[[], object], str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    headline: dict = field(default_factory=dict)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        # every table that shows a published figure says, row by row, what our figure beside it rests on
        for name, df in {f"{self.name} summary": self.summary, **self.tables}.items():
            if not any(str(c).startswith("published") for c in df.columns):
                continue
            if "basis" not in df.columns:
                raise StudyError(f"{name}: a table beside published figures needs a 'basis' column "
                                 f"({', '.join(BASES)})")
            bad = sorted(set(df["basis"]) - set(BASES))
            if bad:
                raise StudyError(f"{name}: basis {bad} is not one of {', '.join(BASES)}")

    def to_dict(self, max_rows: int = JSON_MAX_ROWS) -> dict:
        """JSON-ready view: headline, notes, summary; tables as records (larger ones only by size and CSV name)."""
        return {
            "study": self.name, "title": self.title, "seconds": round(self.seconds, 3), "headline": self.headline,
            "notes": self.notes, "basis": basis_counts(self), "summary": _records(self.summary),
            "tables": {k: (_records(v) if len(v) <= max_rows else {"rows": len(v), "csv": f"{k}.csv"})
                       for k, v in self.tables.items()},
        }


def basis_counts(result: StudyResult) -> dict[str, int]:
    """How many summary rows rest on each basis (measured, predicted independently, fitted to these points)."""
    col = result.summary["basis"] if "basis" in result.summary.columns else pd.Series([], dtype=str)
    return {b: int((col == b).sum()) for b in BASES if (col == b).any()}


def _records(df: pd.DataFrame) -> list[dict]:
    out = []
    for rec in df.to_dict(orient="records"):
        out.append({k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in rec.items()})
    return out


def write_report(result: StudyResult, report) -> None:
    """Add a study's notes, tables (CSV) and figures (PNG) to an open c3kit.report.Report."""
    report.text(f"## {result.title}")
    report.table(f"{result.name}_summary", result.summary, caption=f"{result.name}: ours beside published")
    for note in result.notes:
        report.text(note)
    for name, df in result.tables.items():
        report.table(name, df, caption=name, show_rows=12)
    for name, build, caption in result.figures:
        report.figure(name, build(), caption=caption)


def gpu_or(name: str, fallback: Callable[[], GPU]) -> GPU:
    """The catalog GPU of that name, or a study-local stand-in when the catalog lacks it."""
    from c3kit.hw.catalog import get_gpu

    try:
        return get_gpu(name)
    except C3kitError:
        return fallback()


def timed(fn: Callable[..., StudyResult], *args, **kwargs) -> StudyResult:
    """Run a study function and record its wall time on the result."""
    t0 = _time.perf_counter()
    res = fn(*args, **kwargs)
    res.seconds = _time.perf_counter() - t0
    return res


def gap(ours: float, published: float) -> float:
    """Relative gap ours / published - 1 (NaN when the published value is zero or missing)."""
    if published is None or not math.isfinite(published) or published == 0:
        return float("nan")
    return ours / published - 1.0


STUDIES = ("dma", "t3", "c3", "ficco")


def study_function(name: str) -> Callable[..., StudyResult]:
    """The `run` function of a study by its CLI name."""
    if name not in STUDIES:
        raise StudyError(f"unknown study {name!r}: use one of {', '.join(STUDIES)}")
    import importlib

    module = {"dma": "dma_latte", "t3": "t3", "c3": "c3", "ficco": "ficco"}[name]
    return importlib.import_module(f"c3kit.studies.{module}").run


def run_all(progress: Callable[[str, int, int], None] | None = None, quick: bool = False) -> list[StudyResult]:
    """Every study on its default scenario set (or the small one when quick); progress(name, i, n) is called."""
    out = []
    for i, name in enumerate(STUDIES):
        if progress:
            progress(name, i, len(STUDIES))
        out.append(timed(study_function(name), quick=quick))
    if progress:
        progress("done", len(STUDIES), len(STUDIES))
    return out
