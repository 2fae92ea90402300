"""The C3 / ConCCL study: metric arithmetic, scenario classes, calibration pick-up, and bad input."""

import json

import pytest

from c3kit.errors import StudyError
from c3kit.hw.catalog import get_gpu
from c3kit.studies.c3 import PUBLISHED, _comm_bytes_for, contention_params, gemm_cases, run


@pytest.fixture(scope="module")
def quick():
    return run(gpus=("MI300X",), quick=True)


def test_summary_has_every_strategy_beside_published(quick):
    s = quick.summary
    assert list(s.strategy) == list(PUBLISHED)
    assert (s.published_average == s.strategy.map(PUBLISHED)).all()
    assert ((s.gap_points - (s.average - s.published_average) * 100).abs() < 1e-9).all()


def test_fraction_of_ideal_is_the_common_metric(quick):
    df = quick.tables["c3_scenarios"]
    want = (df.speedup - 1) / (df.speedup_ideal - 1)
    assert ((df.fraction_of_ideal - want).abs() < 1e-9).all()
    assert set(df.scenario) == {"G-long", "GC-equal", "C-long"}


def test_partition_takes_the_best_cu_reservation(quick):
    from c3kit.overlap import OverlapProblem, evaluate
    from c3kit.studies.c3 import RESERVATIONS_MI300X, contention_params

    gpu = get_gpu("MI300X")
    params, _ = contention_params(gpu.name)
    df = quick.tables["c3_scenarios"]
    part = df[df.strategy == "partition"]
    checked = 0
    for r in part.iloc[:: max(1, len(part) // 4)].itertuples():
        prob = OverlapProblem("bulk", r.m, r.n, r.k, gpus=8, collective=r.collective, comm_bytes=r.comm_bytes)
        t = {k: evaluate(prob, gpu, ["bulk-sm-part"], params.with_(comm_sms=k, partition_sms=k))[0].time
             for k in RESERVATIONS_MI300X}  # MI300X: the reservations are the paper's CU counts unscaled
        best = min(t, key=t.get)
        assert r.time_s == pytest.approx(t[best], rel=1e-12) and r.detail == f"{best} SMs"
        checked += max(t.values()) > 1.01 * t[best]  # a case where picking the worst would show
    assert checked >= 1


def test_contention_shapes_the_strategies(quick):
    # without contention every strategy would realize its whole ideal; with it plain concurrency loses most
    # and priority (the collective's first claim on SMs and HBM) recovers much of it
    s = quick.summary.set_index("strategy")
    df = quick.tables["c3_scenarios"]
    plain = df[df.strategy == "plain"]
    assert (plain.contention_comp > 0).any() or (plain.contention_comm > 0).any()
    assert s.average["plain"] < 0.8
    assert s.average["prio"] > s.average["plain"] + 0.1
    assert (df.fraction_of_ideal < 1 - 1e-9).mean() > 0.5


def test_collective_size_hits_the_target_ratio():
    from c3kit.overlap import OverlapProblem, baseline
    from c3kit.sim import ContentionParams

    gpu, p = get_gpu("MI300X"), ContentionParams()
    case = gemm_cases(quick=True)[0]
    s = _comm_bytes_for(case, "all_gather", 1.0, gpu, p)
    b = baseline(OverlapProblem("bulk", case.m, case.n, case.k, gpus=8, collective="all_gather", comm_bytes=s), gpu, p)
    assert b.t_comm / b.t_comp == pytest.approx(1.0, rel=0.02)


def test_calibration_file_is_used_and_said(tmp_path):
    params, note = contention_params("H200-SXM", tmp_path)
    assert note.startswith("defaults")
    (tmp_path / "h200-sxm-contention.json").write_text(json.dumps(
        {"meta": {}, "kind": "contention", "columns": ["parameter", "value"], "rows": [["gemm_interference", 0.7]]}))
    params, note = contention_params("H200-SXM", tmp_path)
    assert note.startswith("calibrated") and params.gemm_interference == 0.7
    (tmp_path / "h200-sxm-contention.json").unlink()
    (tmp_path / "h200-sxm-c3.json").write_text(json.dumps({"kind": "contention", "columns": [], "rows": []}))
    _, note = contention_params("H200-SXM", tmp_path)
    assert "unusable" in note


def test_bad_gpu():
    with pytest.raises(StudyError, match="unknown hardware"):
        run(gpus=("no-such-gpu",), quick=True)


def test_measured_c3_table_is_read_and_kept_out_of_the_params(tmp_path):
    from c3kit.studies.c3 import measured_c3

    cols = ["variant", "class", "fraction_of_ideal", "s_real"]
    rows = [["sm-copy-k32", "G-long", 0.2, 1.1], ["sm-copy-k32", "C-long", 0.4, 1.2],
            ["sm-copy-k32-prio", "G-long", 0.5, 1.3], ["ce-d2d", "GC-equal", 0.7, 1.5],
            ["ce-d2d-gemm120sm", "GC-equal", 0.8, 1.6], ["sm-copy-k16-gemm112sm", "C-long", 0.45, 1.3]]
    (tmp_path / "h200-sxm-c3.json").write_text(json.dumps(
        {"meta": {"machine": "test", "date": "today"}, "kind": "c3", "columns": cols, "rows": rows}))
    tab, note = measured_c3("H200-SXM", tmp_path)
    got = dict(zip(tab.strategy, tab.average))
    assert got == pytest.approx({"plain": 0.3, "prio": 0.5, "dma": 0.7, "dma+trim": 0.8, "partition": 0.45})
    assert note.startswith("measured")
    params, pnote = contention_params("H200-SXM", tmp_path)
    assert pnote.startswith("defaults")
