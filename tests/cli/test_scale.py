"""`c3kit scale`: a small sweep end to end, JSON output, and bad input (exit 2, nothing written)."""

import json

import pytest

from c3kit.cli.main import main

SMALL = ["--hidden", "4096,8192", "--layers", "32", "--seq", "2048", "--batch", "512", "--tp", "4,8", "--pp", "1,4",
         "--dp", "8", "--rules", "historical", "--generations", "0,1"]


def test_small_sweep_writes_report(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["scale", *SMALL, "--out", str(out)]) == 0
    assert "memory-feasible scenarios" in capsys.readouterr().out
    for f in ("report.md", "scenarios.csv", "excluded.csv", "by_generation.csv", "paper_sweep.csv",
              "comm_share_vs_model_size.png", "comm_share_vs_generation.png", "paper_sweep.png"):
        assert (out / f).is_file(), f


def test_json(tmp_path, capsys):
    assert main(["scale", *SMALL, "--no-paper", "--out", str(tmp_path / "j"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["headline"]["scenarios"] + doc["headline"]["excluded"] == 2 * 4 * 2
    assert doc["paper"] == []


@pytest.mark.parametrize("args", [["--rules", "moore"], ["--hidden", "1000"], ["--hidden", "abc"],
                                  ["--generations", "-1"], ["--hw", "Z100"], ["--tp", "0"],
                                  ["--cost-model", "table"], ["--no-grid", "--no-paper"]])
def test_bad_input(tmp_path, capsys, args):
    out = tmp_path / "never"
    assert main(["scale", *SMALL[:-4], *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert not out.exists()
