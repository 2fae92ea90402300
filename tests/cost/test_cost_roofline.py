"""Roofline times on hand-checked cases, and the entry point's dispatch."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from c3kit import cost
from c3kit.errors import CostError, WorkloadError
from c3kit.hw import get_gpu
from c3kit.workload.ops import Attention, Gemm, MemOp

H200 = get_gpu("H200-SXM")


def test_gemm_8192_cubed_bf16_on_h200():
    g = Gemm("g", 8192, 8192, 8192, "bf16")
    assert cost.time(g, H200) == 2 * 8192**3 / 989.4e12
    assert cost.time(g, H200, "roofline") == 2 * 8192**3 / 989.4e12
    assert cost.time(g, H200, cost.CostModel()) == 2 * 8192**3 / 989.4e12


def test_fp8_uses_fp8_peak():
    g = Gemm("g", 8192, 8192, 8192, "fp8")
    assert cost.time(g, H200) == pytest.approx(2 * 8192**3 / 1978.9e12)


def test_memory_bound_gemv():
    g = Gemm("g", 1, 8192, 8192, "bf16")
    assert cost.time(g, H200) == pytest.approx((8192 + 8192 * 8192 + 8192) * 2 / 4.8e12)


def test_memop_is_bandwidth_bound():
    assert cost.time(MemOp("norm", bytes=4.8e9), H200) == pytest.approx(1e-3)
    # vector (fp32) FLOP/s, not tensor-core peak, bound element-wise arithmetic
    assert cost.time(MemOp("x", bytes=0, flops=67e12), H200) == pytest.approx(1.0)


def test_attention_roofline():
    a = Attention("a", batch=1, heads=64, kv_heads=8, q_len=4096, kv_len=4096, head_dim=128)
    assert cost.time(a, H200) == pytest.approx(a.flops / 989.4e12)


def test_attention_and_memop_efficiency_factors():
    # on a GPU whose attention and memory-bound ops are priced from its datasheet (no measured class, no
    # published STREAM or attention rows: cost/data/published_ops/mi325x.toml has GEMM rows only) the factors apply
    from c3kit.hw.catalog import get_gpu

    mi = get_gpu("MI325X")
    a = Attention("a", batch=1, heads=64, kv_heads=8, q_len=4096, kv_len=4096, head_dim=128)
    m = cost.CostModel(kind="efficiency", attn_eff=0.5, mem_eff=0.5)
    assert cost.time(a, mi, m) == pytest.approx(max(2 * a.flops / mi.peak_flops("bf16"), 2 * a.bytes / mi.hbm_bw))
    assert cost.time(MemOp("n", bytes=mi.hbm_bw), mi, m) == pytest.approx(2.0)


def test_h200_attention_is_priced_from_its_measurement():
    # measured on the lent H200 (benchmarks/ops_h200): b=1, 32 query / 8 KV heads, 32k causal, d=128: 14.854 ms
    a = Attention("a", batch=1, heads=32, kv_heads=8, q_len=32768, kv_len=32768, head_dim=128)
    m = cost.CostModel(kind="efficiency")
    assert cost.time(a, H200, m) == pytest.approx(14.854e-3, rel=0.05)
    assert cost.time(a, H200) == pytest.approx(a.flops / 989.4e12)  # the roofline model stays the roofline


def test_negative_sizes_are_rejected():
    with pytest.raises(WorkloadError):
        Gemm("g", -1, 8, 8)
    with pytest.raises(WorkloadError):
        MemOp("m", bytes=-1)


def test_not_an_op():
    with pytest.raises(CostError):
        cost.time("gemm", H200)


def test_unknown_model_name():
    with pytest.raises(CostError, match="roofline"):
        cost.time(Gemm("g", 8, 8, 8), H200, "magic")


dims = st.integers(1, 1 << 15)


@given(dims, dims, dims, st.floats(1.01, 10))
def test_more_flops_never_slower(m, n, k, f):
    g = Gemm("g", m, n, k)
    fast = H200.with_(flops={d: v * f for d, v in H200.flops.items()})
    for model in ("roofline", "efficiency"):
        t0, t1 = cost.time(g, H200, model), cost.time(g, fast, model)
        assert 0 < t1 <= t0


@given(dims, dims, dims, st.floats(1.01, 10))
def test_more_hbm_bandwidth_never_slower(m, n, k, f):
    g = Gemm("g", m, n, k)
    fast = H200.with_(hbm_bw=H200.hbm_bw * f)
    for model in ("roofline", "efficiency"):
        assert 0 < cost.time(g, fast, model) <= cost.time(g, H200, model)
