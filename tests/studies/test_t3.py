"""The T3 study: hand-checked pipeline, ordering invariants, and bad input."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from c3kit.errors import StudyError
from c3kit.hw.catalog import get_gpu
from c3kit.studies.t3 import T3Params, pipeline_time, run, sublayer
from c3kit.workload.ops import Gemm


def test_pipeline_hand_checked():
    # 4 stages of 1 s; 3 sends of 2 s: send j waits for stage j and send j-1: 1+2, 3+2, 5+2 -> 7
    assert pipeline_time(4.0, 2.0, 4) == pytest.approx(7.0)
    # compute-bound: sends hide behind the GEMM, the last ends at 3 + 0.5 < 4
    assert pipeline_time(4.0, 0.5, 4) == pytest.approx(4.0)


@given(st.integers(64, 4096), st.sampled_from([8, 16, 32]), st.integers(1, 16))
def test_t3_never_beats_ideal_and_mca_protects_the_gemm(k, tp, tok_k):
    gpu = get_gpu("T3-SIM")
    h = 4096
    g = Gemm("g", tok_k * 1024, h, k)
    r = sublayer(g, g.m * h * 2, tp, gpu, T3Params())
    assert r["t3_s"] >= r["ideal_s"] * (1 - 1e-12)
    assert r["t3_mca_s"] >= r["ideal_s"] * (1 - 1e-12)
    assert 0 <= r["gemm_slowdown_mca"] <= r["gemm_slowdown_t3"] + 1e-12
    assert 1.0 <= r["speedup_ideal"] <= 2.0
    assert 0 < r["traffic_reduction"] < 0.5


def test_quick_study_rows_and_summary():
    r = run(quick=True)
    df = r.tables["t3_sublayers"]
    assert sorted(df.sublayer) == ["fc1.dgrad", "fc2", "proj", "qkv.dgrad"]
    assert (df.k[df.sublayer == "proj"] == 3072 // 8).all()
    assert set(r.summary.metric) >= {"ideal", "T3", "T3-MCA", "traffic_reduction", "e2e_train"}
    e2e = r.tables["t3_end_to_end"].iloc[0]
    assert 0 < e2e.train_sliced_share < 1 and e2e.train_speedup_t3_mca >= 1


def test_padded_heads_for_tnlg():
    r = run(models=("T-NLG-17B",), tp=(16,))
    assert (r.tables["t3_sublayers"].k[lambda s: s > 0] > 0).all()


def test_bad_input():
    with pytest.raises(StudyError):
        run(tp=(1,))
    with pytest.raises(StudyError):
        run(tokens=0)
    with pytest.raises(StudyError):
        run(models=("no-such-model",))
