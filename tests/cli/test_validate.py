"""`c3kit validate`: the shipped runs, groups, JSON, and bad input (exit 2, nothing written)."""

import json

import pytest

from c3kit.cli.main import main


def test_runs_and_reports(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["validate", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "overall over" in text and "MAE" in text and "bias" in text and "not modelled" in text
    for f in ("report.md", "validation.csv", "by_group.csv", "runs.csv", "signed_error.png"):
        assert (out / f).is_file()


def test_json(tmp_path, capsys):
    assert main(["validate", "--cost-model", "efficiency", "--out", str(tmp_path / "j"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cost_model"].startswith("efficiency") and doc["overall"]["mae"] > 0 and len(doc["runs"]) >= 40
    assert {g["group"] for g in doc["by_group"]} >= {"gpu", "framework_family", "dtype", "kind"}
    assert all(r["status"].startswith("not modelled") for r in doc["not_modelled"])


@pytest.mark.parametrize("make", ["model", "power", "missing", "columns", "garbage"])
def test_bad_input(tmp_path, capsys, make):
    out = tmp_path / "never"
    args = ["validate", "--out", str(out)]
    if make == "model":
        args += ["--cost-model", "calibrated"]
    elif make == "power":
        args += ["--power", "turbo"]
    elif make == "missing":
        args += ["--runs", str(tmp_path / "nope.csv")]
    else:
        f = tmp_path / "runs.csv"
        f.write_bytes(b"run,gpu\nx,A100\n" if make == "columns" else b"\xff\xfe\x00garbage\x00")
        args += ["--runs", str(f)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert not out.exists()
