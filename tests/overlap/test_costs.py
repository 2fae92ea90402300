"""overlap.costs.CostCache: a GEMM re-priced on fewer SMs runs with that share of the chip's peak."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.hw.catalog import get_gpu
from c3kit.overlap.costs import CostCache


def _cache(gpu="H200-SXM", power="burst"):
    return CostCache(get_gpu(gpu), 128, 256, 1.0, power=power)


def test_fewer_sms_slow_a_compute_bound_gemm_about_in_proportion():
    c = _cache()
    assert c.speed(8192, 8192, 8192, "bf16", 1, 132) == 1.0
    half = c.speed(8192, 8192, 8192, "bf16", 1, 66)
    assert 0.45 <= half <= 0.55  # was 1.0: the whole chip's FLOP/s on 66 SMs


def test_a_memory_bound_gemm_loses_less_than_a_compute_bound_one():
    c = _cache()
    assert c.speed(128, 6656, 16384, "bf16", 1, 66) > c.speed(8192, 8192, 8192, "bf16", 1, 66)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 64), n=st.integers(1, 64), k=st.integers(1, 64), lo=st.integers(1, 131),
       gpu=st.sampled_from(["H200-SXM", "H100-SXM", "MI300X"]), power=st.sampled_from(["burst", "sustained"]))
def test_speed_is_at_most_one_and_grows_with_sms(m, n, k, lo, gpu, power):
    c = _cache(gpu, power)
    hi = min(lo + 16, c.gpu.sms)
    a = c.speed(128 * m, 128 * n, 128 * k, "bf16", 1, lo)
    b = c.speed(128 * m, 128 * n, 128 * k, "bf16", 1, hi)
    assert 0.0 < a <= 1.0 and 0.0 < b <= 1.0
    assert b >= a * (1 - 0.02)  # wave quantization may move a tile count across a wave edge by a little
