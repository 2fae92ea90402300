"""ContentionParams: defaults, validation, and the calibration-file round trip."""

import json

import pytest

from c3kit.errors import SimError
from c3kit.sim import ContentionParams


def test_defaults_when_no_calibration_is_shipped():
    assert ContentionParams.from_calibration("no-such-gpu") == ContentionParams()


def test_calibration_round_trip(tmp_path):
    p = ContentionParams(comm_sms=24, gemm_interference=0.4, sm_launch=3e-6)
    doc = p.to_calibration({"machine": "test", "gpu": "H200-SXM"})
    assert doc["kind"] == "contention" and doc["columns"] == ["parameter", "value"]
    f = tmp_path / "h200-sxm-contention.json"
    f.write_text(json.dumps(doc))
    q = ContentionParams.from_calibration("H200-SXM", f)
    assert q == p
    assert q.to_dict()["comm_sms"] == 24


def test_partial_calibration_keeps_other_defaults(tmp_path):
    f = tmp_path / "x.json"
    f.write_text(json.dumps({"meta": {}, "kind": "contention", "columns": ["parameter", "value"],
                             "rows": [["noprio_comm_sm_share", 0.3]]}))
    q = ContentionParams.from_calibration("x", f)
    assert q.noprio_comm_sm_share == 0.3 and q.comm_sm_frac == ContentionParams().comm_sm_frac


@pytest.mark.parametrize("doc, msg", [
    ({"kind": "gemm", "columns": [], "rows": []}, "not a contention"),
    ({"kind": "contention", "columns": ["parameter", "value"], "rows": [["bogus", 1]]}, "unknown contention"),
    ({"kind": "contention", "columns": ["parameter", "value"], "rows": [["sm_launch", -1]]}, "non-negative"),
    ({"kind": "contention", "columns": ["parameter"], "rows": []}, "columns"),
])
def test_bad_calibration(tmp_path, doc, msg):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(SimError, match=msg):
        ContentionParams.from_calibration("x", f)


def test_resolved_values():
    p = ContentionParams()
    assert p.resolve_comm_sms(132) == 16
    assert p.resolve_partition_sms(132) == 16
    assert p.resolve_sm_comm_bw(100, 1e11) == pytest.approx(1e10)
    assert ContentionParams(comm_sms=40).resolve_comm_sms(132) == 40
    with pytest.raises(SimError):
        ContentionParams(noprio_comm_sm_share=0.0)


def test_aliases_find_the_same_calibration_file():
    from c3kit.sim import calibration_path

    assert calibration_path("h200") == calibration_path("H200-SXM")
    assert calibration_path("not-a-gpu") is None


def test_partition_speed_defaults_follow_the_c3_paper():
    # C3 paper (MI300X, 304 CUs): a compute-bound GEMM loses 17% with 32 CUs removed, 27% with 64
    p = ContentionParams()
    assert 1 / p.partition_speed(1.0, 272, 304) - 1 == pytest.approx(0.17, abs=0.005)
    assert 1 / p.partition_speed(1.0, 240, 304) - 1 == pytest.approx(0.27, abs=0.005)
    # memory-bound GEMMs tolerate losing CUs; a GEMM whose tiles fit in the partition loses nothing
    assert p.partition_speed(0.0, 240, 304) == 1.0
    assert p.partition_speed(1.0, 240, 304, tiles=200) == 1.0
    assert p.partition_speed(1.0, 240, 304, tiles=10_000) < p.partition_speed(1.0, 272, 304, tiles=10_000) < 1.0


def test_partition_speed_h200_calibration_follows_green_context_measurements():
    # docs/measurements.md run 2: 8192^3 bf16 alone in green contexts (slowdown vs 132 SMs)
    p = ContentionParams.from_calibration("H200-SXM")
    for sms, slow in ((128, 0.265), (120, 0.299), (112, 0.354), (96, 0.514), (64, 1.12), (32, 2.71)):
        assert 1 / p.partition_speed(1.0, sms, 132) == pytest.approx(1 + slow, rel=0.025)


def test_eager_launch_defaults_to_measured_is_zero_when_ideal_and_rejects_negatives():
    assert ContentionParams().eager_launch is None  # the GPU's measured eager launch (cost.launch)
    assert ContentionParams.ideal().eager_launch == 0.0  # no host issue time, as in a CUDA graph
    assert ContentionParams(eager_launch=5e-6).eager_launch == 5e-6
    with pytest.raises(SimError):
        ContentionParams(eager_launch=-1e-6)
