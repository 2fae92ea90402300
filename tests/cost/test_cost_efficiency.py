"""The GEMM efficiency curve: hand-checked terms, scalar == vector, bounds, fitting, speed."""

import time as _time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from c3kit import cost
from c3kit.cost.efficiency import DEFAULT_CURVE, EfficiencyCurve, curve_times, fit_efficiency, relative_errors
from c3kit.cost.table import GemmTable
from c3kit.errors import CostError
from c3kit.hw import get_gpu
from c3kit.workload.ops import Gemm

H200 = get_gpu("H200-SXM")


def test_hand_checked_large_gemm():
    # one tile shape, sharp waves, no K or M/N penalty, no overhead, max-blend: pure wave quantization
    c = EfficiencyCurve(peak_frac={"bf16": 1.0}, tiles=((128, 128),), tile_cost=0, k_half=0, mn_half=0,
                        overhead=0, blend=200)
    # 1024 x 1024 -> 64 tiles on 132 SMs: one wave, 64/132 of the SMs busy; split-K 2 fills 128 of 132
    t = c.gemm_time(1024, 1024, 8192, "bf16", H200)
    assert t == pytest.approx(2 * 1024 * 1024 * 8192 / 989.4e12 / (128 / 132), rel=1e-6)
    # 8192 x 8192 -> 4096 tiles -> 32 waves of 132 (4224 tile slots)
    t = c.gemm_time(8192, 8192, 8192, "bf16", H200)
    assert t == pytest.approx(2 * 8192**3 / 989.4e12 / (4096 / 4224), rel=1e-6)


def test_k_saturation_term():
    c = EfficiencyCurve(peak_frac={"bf16": 1.0}, tiles=((128, 128),), tile_cost=0, k_half=256, mn_half=0,
                        overhead=0, blend=200, max_split_k=1, mem_frac=1.5)
    t = c.gemm_time(128 * 132, 128 * 8, 256, "bf16", H200)  # exactly 8 full waves, K = k_half
    assert t == pytest.approx(2 * 128 * 132 * 128 * 8 * 256 / 989.4e12 * 2, rel=1e-6)


def test_default_curve_is_slower_than_roofline_and_plausible():
    g = Gemm("g", 8192, 8192, 8192)
    eff = g.flops / 989.4e12 / cost.time(g, H200, "efficiency")
    assert 0.6 < eff < 0.85


@given(st.integers(1, 1 << 15), st.integers(1, 1 << 15), st.integers(1, 1 << 15), st.integers(1, 8),
       st.sampled_from(["bf16", "fp8", "fp32"]))
def test_scalar_matches_vectorized(m, n, k, b, dt):
    t = DEFAULT_CURVE.gemm_time(m, n, k, dt, H200, b)
    v = curve_times(DEFAULT_CURVE, H200, [m], [n], [k], [dt], [b])[0]
    assert t == pytest.approx(v, rel=1e-12)


@given(st.integers(1, 1 << 15), st.integers(1, 1 << 15), st.integers(1, 1 << 15))
def test_efficiency_never_beats_roofline(m, n, k):
    g = Gemm("g", m, n, k)
    assert cost.time(g, H200, "efficiency") >= cost.time(g, H200)


def test_bad_curve_parameters():
    with pytest.raises(CostError):
        EfficiencyCurve(peak_frac={"bf16": 0.0})
    with pytest.raises(CostError):
        EfficiencyCurve(tiles=())
    with pytest.raises(CostError):
        EfficiencyCurve(blend=0.5)
    with pytest.raises(CostError):
        DEFAULT_CURVE.gemm_time(0, 8, 8, "bf16", H200)


def test_curve_dict_round_trip():
    c = DEFAULT_CURVE.with_(k_half=123.0)
    assert EfficiencyCurve.from_dict(c.to_dict()) == c
    with pytest.raises(CostError):
        EfficiencyCurve.from_dict({"nope": 1})


def _synthetic(n_rows, seed, truth, noise=0.0):
    rng = np.random.default_rng(seed)
    m = np.round(2 ** rng.uniform(4, 15, n_rows))
    n = np.round(2 ** rng.uniform(8, 15, n_rows))
    k = np.round(2 ** rng.uniform(7, 15, n_rows))
    dt = rng.choice(["bf16", "fp8"], n_rows).tolist()
    t = curve_times(truth, H200, m, n, k, dt) * np.exp(rng.normal(0, noise, n_rows))
    return GemmTable(m, n, k, dt, t)


TRUTH = EfficiencyCurve(peak_frac={"bf16": 0.72, "fp8": 0.6}, tile_cost=6, wave_weight=0.6, k_half=200,
                        mn_half=40, mn_exp=1.5, mem_frac=0.9, overhead=5e-6, blend=3)


def test_fit_recovers_a_known_curve():
    train, test = _synthetic(300, 1, TRUTH), _synthetic(200, 2, TRUTH)
    r = fit_efficiency(train, H200)
    assert r.median_error < 1e-3
    assert np.median(relative_errors(r.curve, test, H200)) < 1e-3
    assert r.curve.frac("bf16") == pytest.approx(0.72, rel=0.02)


def test_fit_on_noisy_measurements_meets_5_percent_held_out():
    train, test = _synthetic(400, 3, TRUTH, noise=0.03), _synthetic(200, 4, TRUTH, noise=0.03)
    assert np.median(relative_errors(DEFAULT_CURVE, test, H200)) > 0.1  # the default is not already right
    r = fit_efficiency(train, H200)
    assert np.median(relative_errors(r.curve, test, H200)) <= 0.05


def test_fit_needs_rows_and_known_parameters():
    with pytest.raises(CostError):
        fit_efficiency(GemmTable([1, 2], [1, 2], [1, 2], ["bf16"] * 2, [1e-5, 2e-5]), H200)
    with pytest.raises(CostError):
        fit_efficiency(_synthetic(10, 0, TRUTH), H200, fit=("peak",))
    with pytest.raises(CostError):
        fit_efficiency([1, 2, 3], H200)
