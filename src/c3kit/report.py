"""Report folders: tables (CSV), figures (PNG) and a Markdown index, written all-or-nothing."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from c3kit.errors import C3kitError


class Report:
    """Collects the files of one report in a scratch folder; `commit()` moves them into `out` at once.

    Used as a context manager: on an exception nothing reaches `out`, so a failed run never leaves a
    half-written report behind.
    """

    def __init__(self, out: str | Path, title: str):
        self.out = Path(out)
        if self.out.exists() and not self.out.is_dir():
            raise C3kitError(f"--out {self.out} exists and is not a folder")
        self.title = title
        self._tmp = Path(tempfile.mkdtemp(prefix=".c3kit-"))
        self._md: list[str] = [f"# {title}", ""]
        self.files: list[str] = []

    def __enter__(self) -> "Report":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def text(self, markdown: str) -> None:
        """Append a Markdown paragraph to the index."""
        self._md += [markdown, ""]

    def table(self, name: str, df: pd.DataFrame, caption: str = "", show_rows: int = 30) -> Path:
        """Write df as NAME.csv and show its first rows in the index."""
        path = self._tmp / f"{name}.csv"
        df.to_csv(path, index=False)
        self.files.append(path.name)
        if caption:
            self._md += [f"**{caption}** ([{path.name}]({path.name}))", ""]
        shown = df.head(show_rows)
        self._md += [_markdown_table(shown), ""]
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
        """Move every collected file and the index into `out`."""
        (self._tmp / "report.md").write_text("\n".join(self._md))
        self.files.append("report.md")
        self.out.mkdir(parents=True, exist_ok=True)
        for name in self.files:
            shutil.move(str(self._tmp / name), str(self.out / name))


def _markdown_table(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        cells = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
