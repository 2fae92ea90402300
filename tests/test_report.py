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
    assert sorted(p.name for p in out.iterdir()) == [".c3kit-report.json", "f.png", "report.md", "t.csv"]
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


def test_previous_report_is_replaced_whole_not_mixed(tmp_path):
    out = tmp_path / "r"
    with Report(out, "first") as rep:
        rep.table("old_only", pd.DataFrame({"a": [1]}))
        rep.table("both", pd.DataFrame({"a": [1]}))
    with Report(out, "second") as rep:
        rep.table("both", pd.DataFrame({"a": [2]}))
    assert sorted(p.name for p in out.iterdir()) == [".c3kit-report.json", "both.csv", "report.md"]
    assert pd.read_csv(out / "both.csv")["a"].tolist() == [2]
    assert "# second" in (out / "report.md").read_text()


def test_folder_of_other_files_is_refused_and_kept(tmp_path):
    from c3kit.errors import C3kitError

    (tmp_path / "mine.txt").write_text("keep")
    with pytest.raises(C3kitError, match="not a c3kit report"):
        Report(tmp_path, "T")
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]


def test_report_written_before_the_manifest_is_recognized(tmp_path):
    from c3kit.report import previous_report_files

    (tmp_path / "report.md").write_text("# old")
    (tmp_path / "t.csv").write_text("a\n1\n")
    assert previous_report_files(tmp_path) == ["report.md", "t.csv"]
    (tmp_path / "notes.txt").write_text("x")
    assert previous_report_files(tmp_path) is None


def test_empty_table_is_a_line_not_an_empty_table(tmp_path):
    out = tmp_path / "r"
    with Report(out, "T") as rep:
        rep.table("none", pd.DataFrame({"reason": []}), caption="Excluded")
    md = (out / "report.md").read_text()
    assert "| reason |" not in md and "_no rows_" in md


def test_float_noise_prints_as_zero():
    from c3kit.report import fmt_cell, markdown_table
    from c3kit.units import fmt_time

    assert fmt_cell(1.39e-17) == "0" and fmt_cell(-2e-16) == "0" and fmt_cell(0.25) == "0.25"
    assert fmt_cell(3.2e-9) == "3.2e-09"  # nanoseconds are real values
    assert fmt_time(1.39e-17) == "0 s" and fmt_time(2.5e-9) == "2.5 ns"
    assert markdown_table(pd.DataFrame({"x": [1e-17, 2.0]})).splitlines()[2:] == ["| 0 |", "| 2 |"]


def test_repo_path_of_a_shipped_file():
    from pathlib import Path

    import c3kit
    from c3kit.report import repo_path

    shipped = Path(c3kit.__file__).parent / "cost" / "data" / "calib" / "h200-sxm-c3.json"
    assert repo_path(shipped) == "src/c3kit/cost/data/calib/h200-sxm-c3.json"
    assert repo_path("/tmp/x.json") == "/tmp/x.json"
