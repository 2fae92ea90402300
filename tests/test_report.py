"""Report folders are written all-or-nothing."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from c3kit.report import Report


def test_report_writes_tables_figures_and_index(tmp_path):
    out = tmp_path / "r"
    with Report(out, "T") as rep:
        rep.text("hello")
        rep.table("t", pd.DataFrame({"a": [1, 2], "b": [0.5, 0.25]}), caption="cap")
        fig, ax = plt.subplots()
        ax.plot([0, 1])
        rep.figure("f", fig, caption="a line")
    assert sorted(p.name for p in out.iterdir()) == ["f.png", "report.md", "t.csv"]
    md = (out / "report.md").read_text()
    assert "# T" in md and "| a | b |" in md and "![a line](f.png)" in md
    assert pd.read_csv(out / "t.csv")["b"].tolist() == [0.5, 0.25]


def test_failed_report_leaves_nothing(tmp_path):
    out = tmp_path / "r"
    with pytest.raises(RuntimeError):
        with Report(out, "T") as rep:
            rep.table("t", pd.DataFrame({"a": [1]}))
            raise RuntimeError("boom")
    assert not out.exists()


def test_out_must_be_a_folder(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError):
        Report(f, "T")
