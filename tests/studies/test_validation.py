"""Validation against published Megatron-LM runs: dataset integrity, conversions, the MAE target."""

import pytest

from c3kit.errors import StudyError
from c3kit.studies.validation import GEMM_PEAK_FRACTION, load_runs, narayanan_step_time, run_objects, validate


def test_dataset_has_sources_and_consistent_layouts():
    runs = load_runs()
    assert len(runs) >= 15
    assert runs["source"].str.contains("arXiv").all()
    assert {"korthikanti", "narayanan", "nemotron4"} <= set(runs["run"].str.split("-").str[0])
    for _, row in runs.iterrows():
        m, p = run_objects(row)
        assert p.gpus == row["gpus"] and row["global_batch"] % (row["dp"] * row["micro_batch"]) == 0
    assert (runs["measured_s"] > 0).all()


def test_narayanan_conversion():
    runs = load_runs()
    one_t = runs[runs["run"] == "narayanan-1t"]
    # 96 B s l h^2 (1 + s/6h + V/16lh) / (163 TFLOP/s x 3072 GPUs)
    b, s, l, h, v = 3072, 2048, 128, 25600, 51200
    f = 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    assert narayanan_step_time(one_t)[0] == pytest.approx(f / (163e12 * 3072))


def test_mean_absolute_error_within_target():
    res = validate()
    assert res.mae <= 0.10
    assert (res.table["predicted_s"] > 0).all()
    assert len(GEMM_PEAK_FRACTION) == 1  # one calibrated parameter
    for r in res.by_source().itertuples():
        assert r.mae <= 0.15, r.paper


def test_no_overlap_adds_hidden_dp_comm():
    runs = load_runs()
    row = runs[runs["run"] == "korthikanti-530b-dp8"].copy()
    a = validate(runs=row).table.iloc[0]
    row["dp_overlap"] = 1
    b = validate(runs=row).table.iloc[0]
    assert a["predicted_s"] > b["predicted_s"]


def test_bad_runs_file(tmp_path):
    bad = tmp_path / "runs.csv"
    bad.write_text("run,gpu\nx,A100\n")
    with pytest.raises(StudyError):
        load_runs(bad)
