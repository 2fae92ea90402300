"""`c3kit overlap validate`: the shipped dataset is well formed, scores are computed exactly, bad input exits 2."""

import json

import pytest

from c3kit.cli.main import main
from c3kit.errors import OverlapError
from c3kit.overlap import OverlapProblem, evaluate
from c3kit.overlap.schedules import SCHEDULES
from c3kit.overlap.validate import SPLITS, load, validate

HEAD = "case,split,hw,pattern,m,n,k,dtype,gpus,collective,comm_bytes,implementation,schedule,time_us,source,note\n"


def test_shipped_dataset_is_well_formed():
    df = load()
    assert set(df["split"]) == set(SPLITS)
    assert all(str(u).startswith("https://github.com/") for u in df["source"])
    assert all(s in SCHEDULES for s in df["schedule"] if s)
    assert set(df["hw"]) <= {"H100-SXM", "H200-SXM"} and set(df["gpus"]) == {8}
    for _, g in df.groupby("case"):
        assert (g["schedule"] == "serial").sum() == 1


def _one_case(tmp_path, scale_serial, scale_ring, split="held-out"):
    p = OverlapProblem("ag_gemm", 4096, 1024, 2048, gpus=8)
    sim = {r.schedule: r.time for r in evaluate(p, "H200-SXM", ["serial", "ring-dma"], power="sustained")}
    f = tmp_path / "d.csv"
    rows = [f"c1,{split},H200-SXM,ag_gemm,4096,1024,2048,bf16,8,,,nccl,serial,{sim['serial'] * scale_serial * 1e6},"
            "https://github.com/x/y/pull/1,",
            f"c1,{split},H200-SXM,ag_gemm,4096,1024,2048,bf16,8,,,async tp,ring-dma,{sim['ring-dma'] * scale_ring * 1e6},"
            "https://github.com/x/y/pull/1,"]
    f.write_text(HEAD + "\n".join(rows) + "\n")
    return f, sim


def test_scores_are_exact_on_a_hand_made_case(tmp_path):
    f, sim = _one_case(tmp_path, 1.25, 0.8)
    rep = validate(f)
    (case,) = rep.cases
    err = {r.schedule: r.error for r in case.rows}
    assert err["serial"] == pytest.approx(1 / 1.25 - 1)
    assert err["ring-dma"] == pytest.approx(1 / 0.8 - 1)
    sc = rep.scores["held-out"]
    assert sc["serial_median_abs_error"] == pytest.approx(0.2)
    assert sc["async_tp_median_abs_error"] == pytest.approx(0.25)
    # the sign of "ring-dma beats serial" is right exactly when measured and predicted orders agree
    meas_beats = sim["ring-dma"] * 0.8 < sim["serial"] * 1.25
    pred_beats = sim["ring-dma"] < sim["serial"]
    assert sc["sign_right_share"] == (1.0 if meas_beats == pred_beats else 0.0)
    assert rep.scores["fit"]["cases"] == 0 and rep.scores["fit"]["sign_right_share"] is None


def test_bad_datasets(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text(HEAD + "c1,train,H200-SXM,ag_gemm,4096,1024,2048,bf16,8,,,nccl,serial,10,u,\n")
    with pytest.raises(OverlapError, match="split"):
        load(f)
    f.write_text(HEAD + "c1,fit,H200-SXM,ag_gemm,4096,1024,2048,bf16,8,,,x,ring-dma,10,u,\n")
    with pytest.raises(OverlapError, match="serial"):
        load(f)
    f.write_text(HEAD + "c1,fit,H200-SXM,ag_gemm,4096,1024,2048,bf16,8,,,nccl,serial,-1,u,\n")
    with pytest.raises(OverlapError, match="positive"):
        load(f)
    with pytest.raises(OverlapError, match="no such"):
        load(tmp_path / "missing.csv")


def test_cli_json_and_errors(tmp_path, capsys):
    f, _ = _one_case(tmp_path, 1.0, 1.0, split="fit")
    assert main(["overlap", "validate", "--data", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["scores"]["fit"]["serial_median_abs_error"] == pytest.approx(0.0, abs=1e-12)
    assert doc["cases"][0]["chosen"] in ("serial", "ring-dma")
    assert main(["overlap", "validate", "--data", str(f)]) == 0
    assert "measured vs predicted" in capsys.readouterr().out
    assert main(["overlap", "validate", "--split", "train"]) == 2
    assert main(["overlap", "validate", "--data", str(tmp_path / "none.csv")]) == 2
    assert main(["overlap", "validate", "--data", str(f), "--power", "turbo"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 3 and "Traceback" not in err


def test_async_tp_breakdown_reads_the_engines_own_tasks(tmp_path):
    from c3kit.overlap.validate import async_tp_breakdown

    f, sim = _one_case(tmp_path, 1.0, 1.5)
    (row,) = async_tp_breakdown(f)
    assert row.steps == 8 and row.predicted == pytest.approx(sim["ring-dma"])
    assert row.measured == pytest.approx(1.5 * sim["ring-dma"])
    assert row.weight_read == pytest.approx(2048 * 1024 * 2 / 4.8e12)
    assert 0 < row.sub_gemm < row.predicted and row.copies > 0
    assert row.excess_per_step == pytest.approx(row.measured / 8 - row.sub_gemm)
    # an all-gather matmul on 8 GPUs: 26 host-issued operations at the measured eager launch
    from c3kit.cost.launch import eager_launch_s
    from c3kit.hw import get_gpu

    assert row.host_issue == pytest.approx(26 * eager_launch_s(get_gpu("H200-SXM")))
    assert row.to_dict()["host_issue"] == row.host_issue
    assert len(async_tp_breakdown()) == sum(load()["schedule"] == "ring-dma")
