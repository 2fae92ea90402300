"""Report folders: tables (CSV), figures (PNG) and a Markdown index, written all-or-nothing."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from c3kit.errors import C3kitError

MANIFEST = ".c3kit-report.json"  # marks a folder as a c3kit report and lists the files it wrote
_REPORT_SUFFIXES = (".csv", ".png", ".md", ".json")
NOISE = 1e-15  # no quantity in a report (seconds, bytes, FLOPs, ratios) is this small: below it, rounding noise


def repo_path(path: str | Path) -> str:
    """A file shipped in the c3kit package as its path in the repository (src/c3kit/...); other paths as given."""
    p = Path(path)
    pkg = Path(__file__).resolve().parent
    try:
        return str(Path("src", "c3kit", p.resolve().relative_to(pkg)))
    except ValueError:
        return str(path)


def _existing_ancestor(p: Path, flag: str = "--out", shown: Path | None = None) -> Path:
    """The nearest folder at or above p that exists (raises when a regular file is in the way)."""
    for a in (p, *p.parents):
        if a.exists():
            if not a.is_dir():
                raise C3kitError(f"{flag} {shown or p}: {a} is a file, not a folder: choose another {flag}")
            return a
    return Path(".")


def previous_report_files(out: Path) -> list[str] | None:
    """The files of a c3kit report already in out (None when out holds something else, [] when empty or new)."""
    if not out.exists():
        return []
    files = sorted(e.name for e in out.iterdir() if not e.is_dir())
    if not files:
        return []
    manifest = out / MANIFEST
    if manifest.is_file():
        try:
            listed = set(json.loads(manifest.read_text(encoding="utf-8")).get("files", []))
        except (ValueError, UnicodeDecodeError, AttributeError):
            return None
        listed.add(MANIFEST)
        return files if set(files) <= listed else None
    # a report written before the manifest existed: report.md plus tables, figures and JSON only
    if "report.md" in files and all(f.endswith(_REPORT_SUFFIXES) for f in files):
        return files
    return None


def check_out(out: str | Path | None, *, flag: str = "--out") -> Path | None:
    """Check a report folder before any work: writable, not a file, not a folder of other files (None passes)."""
    if out is None:
        return None
    if str(out).strip() == "":
        raise C3kitError(f"{flag} is empty: give a folder for the report, e.g. {flag} c3kit-out")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise C3kitError(f"{flag} {out} exists and is not a folder: choose a new or empty folder")
    if out.exists() and previous_report_files(out) is None:
        raise C3kitError(f"{flag} {out} holds files that are not a c3kit report: choose a new or empty folder "
                         "(a previous c3kit report there is replaced whole)")
    base = _existing_ancestor(out, flag)
    try:
        probe = tempfile.mkdtemp(prefix=".c3kit-probe-", dir=base)
    except OSError as e:
        raise C3kitError(f"{flag} {out}: cannot write in {base} ({e.strerror or e}): choose a writable folder") from None
    os.rmdir(probe)
    return out


def check_out_file(path: str | Path | None, *, flag: str = "--out") -> Path | None:
    """Check an output file path before any work: not empty, not a folder, its folder writable (None passes)."""
    if path is None:
        return None
    if str(path).strip() == "":
        raise C3kitError(f"{flag} is empty: give a file name")
    path = Path(path)
    if path.is_dir():
        raise C3kitError(f"{flag} {path} is a folder: give a file name")
    base = _existing_ancestor(path.parent, flag, path)
    try:
        probe = tempfile.mkdtemp(prefix=".c3kit-probe-", dir=base)
    except OSError as e:
        raise C3kitError(f"{flag} {path}: cannot write in {base} ({e.strerror or e}): choose a writable folder") from None
    os.rmdir(probe)
    return path


class Report:
    """Collects the files of one report in a scratch folder; `commit()` moves them into `out` at once.

    Used as a context manager: on an exception nothing reaches `out` and the scratch folder is removed,
    so a failed run never leaves a half-written report behind. A previous c3kit report in `out` is
    replaced whole (its files are removed); a folder holding other files is refused.
    """

    def __init__(self, out: str | Path, title: str):
        self.out = check_out(out)
        self.title = title
        # scratch beside out (same file system): the final moves are renames, and nothing lands in /tmp
        self._tmp = Path(tempfile.mkdtemp(prefix=".c3kit-", dir=_existing_ancestor(self.out.parent)))
        self._md: list[str] = [f"# {title}", ""]
        self.files: list[str] = []

    def __enter__(self) -> "Report":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def text(self, markdown: str) -> None:
        """Append a Markdown paragraph to the index."""
        self._md += [markdown, ""]

    def table(self, name: str, df: pd.DataFrame, caption: str = "", show_rows: int = 30) -> Path:
        """Write df as NAME.csv and show its first rows in the index (an empty df: a line saying so)."""
        path = self._tmp / f"{name}.csv"
        df.to_csv(path, index=False)
        self.files.append(path.name)
        if caption:
            self._md += [f"**{caption}** ([{path.name}]({path.name}))", ""]
        if len(df) == 0:
            self._md += ["_no rows_", ""]
            return path
        if show_rows <= 0:
            self._md += [f"_{len(df)} rows in {path.name}_", ""]
            return path
        self._md += [markdown_table(df.head(show_rows)), ""]
        if len(df) > show_rows:
            self._md += [f"_{len(df) - show_rows} more rows in {path.name}_", ""]
        return path

    def figure(self, name: str, fig, caption: str = "") -> Path:
        """Save a matplotlib figure as NAME.png and embed it in the index."""
        import matplotlib.pyplot as plt

        path = self._tmp / f"{name}.png"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        self.files.append(path.name)
        self._md += [f"![{caption or name}]({path.name})", ""]
        if caption:
            self._md += [f"_{caption}_", ""]
        return path

    def json(self, name: str, data: Any) -> Path:
        """Write a JSON document next to the tables."""
        path = self._tmp / f"{name}.json"
        path.write_text(json.dumps(data, indent=2, default=str))
        self.files.append(path.name)
        return path

    def commit(self) -> None:
        """Move every collected file and the index into `out`, replacing a previous c3kit report there."""
        (self._tmp / "report.md").write_text("\n".join(self._md))
        self.files.append("report.md")
        (self._tmp / MANIFEST).write_text(json.dumps({"title": self.title, "files": self.files}, indent=1))
        old = previous_report_files(self.out)
        if old is None:
            raise C3kitError(f"--out {self.out} now holds files that are not a c3kit report: nothing written")
        created = not self.out.exists()
        moved: list[Path] = []
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            for name in old:
                (self.out / name).unlink(missing_ok=True)
            for name in [*self.files, MANIFEST]:
                os.replace(self._tmp / name, self.out / name)
                moved.append(self.out / name)
        except OSError as e:
            for p in moved:
                p.unlink(missing_ok=True)
            if created:
                shutil.rmtree(self.out, ignore_errors=True)
            raise C3kitError(f"cannot write the report into {self.out} ({e.strerror or e}): nothing written") from None


def fmt_cell(v: Any) -> str:
    """A table cell: floats to 4 significant digits, float noise (|v| < 1e-15: below a femtosecond) as 0."""
    if isinstance(v, float):
        return "0" if abs(v) < NOISE else f"{v:.4g}"
    return str(v)


def markdown_table(df: pd.DataFrame) -> str:
    """A Markdown table of df with fmt_cell's cells."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(fmt_cell(v) for v in row) + " |")
    return "\n".join(lines)
