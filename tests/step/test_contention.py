"""--overlap contended: independent pairs at the compute / comm contention measured on the H200 (SM copy stand-in
beside cuBLAS GEMMs, device call 31)."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from c3kit.errors import C3kitError
from c3kit.step.policy import (CONTENTION_BLOCKS, Contention, ContendedOverlap, SerialOverlap, SimpleOverlap,
                               contention_rows, measured_contention, policy_for)

ROOT = Path(__file__).resolve().parents[2]
CALL31 = ROOT / "benchmarks" / "ops_h200" / "h200-sxm-ops-gemm_under_comm.json"


def test_measured_contention_is_the_median_of_the_stand_in_rows():
    doc = json.loads(CALL31.read_text())
    rows = [dict(zip(doc["columns"], r)) for r in doc["rows"]]
    keep = [r for r in rows if r["comm"] == "sm_copy" and r["duty"] == 1.0 and r["blocks"] in CONTENTION_BLOCKS]
    assert len(keep) == 18 == len(contention_rows())  # 6 GEMM shapes x 8, 16, 32 blocks
    c = measured_contention()
    assert c.comm_rate == pytest.approx(np.median([r["copy_under_Bps"] / r["copy_alone_Bps"] for r in keep]))
    # the measurement: the copy moves at under a fifth of its rate beside a GEMM; the GEMM barely slows
    assert 0.15 < c.comm_rate < 0.25 and abs(c.gemm_slowdown) < 0.05 and c.rows == 18


def test_contended_pairs_hand_checked():
    pol = ContendedOverlap(Contention(comm_rate=0.2, gemm_slowdown=0.1, rows=1))
    # c' = 2.2; the comm moves 0.44 of its 1.0 meanwhile, 0.56 left alone
    assert pol.pair_time(2.0, 1.0, False) == pytest.approx(2.2 + 0.56)
    assert pol.pair_time(2.0, 0.3, False) == pytest.approx(2.2)  # hidden, compute slowed
    assert pol.pair_time(2.0, 1.0, True) == pytest.approx(3.0)
    assert ContendedOverlap(Contention(1.0, 0.0, 1)).pair_time(2.0, 1.0, False) == pytest.approx(2.0)  # = simple
    # a measured negative slowdown is not a speedup
    assert ContendedOverlap(Contention(0.5, -0.05, 1)).pair_time(2.0, 0.5, False) == pytest.approx(2.0)
    assert policy_for("contended").name == "contended"


@settings(max_examples=50, deadline=None)
@given(c=st.floats(0, 10), m=st.floats(0, 10), dep=st.booleans(), rate=st.floats(0.01, 1.0),
       slow=st.floats(-0.1, 0.3))
def test_contended_lies_between_simple_and_serial(c, m, dep, rate, slow):
    t = ContendedOverlap(Contention(rate, slow, 1)).pair_time(c, m, dep)
    assert SimpleOverlap().pair_time(c, m, dep) - 1e-9 <= t <= SerialOverlap().pair_time(c, m, dep) + 1e-9


def test_vectorized_like_scalar():
    pol = policy_for("contended")
    c, m = np.array([1.0, 2.0, 0.0]), np.array([0.5, 3.0, 1.0])
    assert np.allclose(pol.pair_time(c, m, False), [pol.pair_time(float(a), float(b), False) for a, b in zip(c, m)])


def test_bad_rate_and_missing_calibration_are_clear_errors():
    with pytest.raises(C3kitError, match="comm_rate"):
        ContendedOverlap(Contention(0.0, 0.0, 1))
    with pytest.raises(C3kitError, match="contention"):
        measured_contention("A100-SXM-80G")


def test_derivation_script_prints_the_library_values(capsys, load_benchmark):
    mod = load_benchmark("overlap_contention")
    mod.main()
    out = capsys.readouterr().out
    c = measured_contention()
    assert f"comm_rate {c.comm_rate:.3f}" in out and "NCCL stand-in" in out and "ce_d2d" in out
