"""`c3kit validate`: the shipped runs, groups, JSON, and bad input (exit 2, nothing written)."""

import json

import pytest

from c3kit.cli.main import main


def test_runs_and_reports(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["validate", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "overall over" in text and "MAE" in text and "bias" in text and "not modelled" in text
    assert "Op basis per GPU and op class" in text  # per GPU of the runs and op class, its basis
    assert "Attention basis per GPU and backend" in text
    for f in ("report.md", "validation.csv", "by_group.csv", "runs.csv", "signed_error.png"):
        assert (out / f).is_file()


def test_json(tmp_path, capsys):
    assert main(["validate", "--cost-model", "efficiency", "--out", str(tmp_path / "j"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cost_model"].startswith("efficiency") and doc["overall"]["mae"] > 0 and len(doc["runs"]) >= 40
    assert {g["group"] for g in doc["by_group"]} >= {"gpu", "framework_family", "dtype", "kind"}
    assert all(r["status"].startswith("not modelled") for r in doc["not_modelled"])
    # per GPU of the runs and op class: the basis label and what it rests on
    assert set(doc["op_basis"]) == {r["gpu"] for r in doc["runs"]}
    b200 = doc["op_basis"]["B200"]
    assert b200["basis"]["attention"] == "published microbenchmark" and b200["basis"]["memory"] == "published microbenchmark" and b200["basis"]["floor"] == "datasheet"
    assert b200["sources"]["attention"].startswith("NVIDIA/cudnn-frontend ")
    assert doc["op_basis"]["A100-SXM-80G"]["basis"]["collective"] == "published microbenchmark"
    # per attention backend: llm-foundry's flash1 on H100 from FlashAttention (v1)'s published H100 bars
    h100 = doc["op_basis"]["H100-SXM"]["attention_backends"]
    assert h100["flash1"] == "published microbenchmark" and h100["flash2"] == "transferred from H200-SXM"


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


def test_breakdown_sums_to_the_predicted_step(tmp_path, capsys):
    # issue 13: per run, compute + exposed comm + bubble + every named overhead = the predicted step
    from c3kit.studies.validation import OVERHEAD_PREFIX, validate

    b = validate().breakdown()
    named = [c for c in b.columns if c.startswith(OVERHEAD_PREFIX)]
    assert {"overhead.launch_gaps", "overhead.grad_clip"} <= set(named)
    total = b[["compute_s", "exposed_s", "bubble_s", *named]].sum(axis=1)
    assert ((total - b["predicted_s"]).abs() <= 1e-9 * b["predicted_s"]).all()
    assert (b[["compute_s", "exposed_s", "bubble_s", *named]] >= 0).all().all()
    # a pipeline run has a bubble, a run without pipeline none
    by_run = b.set_index("run")
    assert by_run.loc["korthikanti-175b", "bubble_s"] > 0 and by_run.loc["korthikanti-22b", "bubble_s"] == 0


def test_report_has_the_breakdown(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["validate", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    flat = " ".join(text.split())
    assert "Where the predicted step goes" in flat or "Where the" in text, text[:2000]
    md = (out / "report.md").read_text()
    assert "breakdown.png" in md and "breakdown.csv" in md
    assert (out / "breakdown.png").stat().st_size > 10_000


def test_validate_bad_overlap_exits_2(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["validate", "--overlap", "bogus", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "contended" in err
    assert not out.exists()
