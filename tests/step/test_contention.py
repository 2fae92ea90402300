"""--overlap contended: SlowdownOverlap with the alpha measured on the H200 (SM copy beside a cuBLAS GEMM)."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from c3kit.errors import C3kitError
from c3kit.step.policy import (CONTENTION_VARIANTS, SerialOverlap, SimpleOverlap, measured_contention_alpha,
                               policy_for)

ROOT = Path(__file__).resolve().parents[2]


def test_alpha_is_one_minus_the_measured_fraction_clipped():
    doc = json.loads((ROOT / "src/c3kit/cost/data/calib/h200-sxm-c3.json").read_text())
    i, j = doc["columns"].index("variant"), doc["columns"].index("fraction_of_ideal")
    f = [r[j] for r in doc["rows"] if r[i] in CONTENTION_VARIANTS]
    assert len(f) == 30
    # plain SM copies realized -0.81, -0.36 and +0.07 of the ideal speedup: worse than serial on average
    assert 1.0 - np.mean(f) == pytest.approx(1.367, abs=5e-4)
    assert measured_contention_alpha() == 1.0


def test_contended_pairs_hand_checked():
    pol = policy_for("contended")
    assert pol.name == "contended"
    assert pol.pair_time(2.0, 1.0, False) == pytest.approx(2.0 + 1.0 * 1.0)
    assert pol.pair_time(2.0, 1.0, True) == pytest.approx(3.0)


@settings(max_examples=50, deadline=None)
@given(c=st.floats(0, 10), m=st.floats(0, 10), dep=st.booleans())
def test_contended_lies_between_simple_and_serial(c, m, dep):
    t = policy_for("contended").pair_time(c, m, dep)
    assert SimpleOverlap().pair_time(c, m, dep) - 1e-12 <= t <= SerialOverlap().pair_time(c, m, dep) + 1e-12


def test_no_calibration_is_one_clear_error():
    with pytest.raises(C3kitError, match="C3"):
        measured_contention_alpha("A100-SXM-80G")


def test_derivation_script_prints_the_library_alpha(capsys):
    spec = importlib.util.spec_from_file_location("overlap_alpha", ROOT / "benchmarks" / "overlap_alpha.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.pair_alpha(1.0, 1.0, 2.0) == 1.0 and mod.pair_alpha(2.0, 1.0, 2.0) == 0.0
    mod.main()
    out = capsys.readouterr().out
    assert "measured_contention_alpha() = 1.000" in out and "gemm+gemm" in out
