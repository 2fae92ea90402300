"""Op-class models beyond GEMMs: the fits recover known parameters, the shapes are hand-checked."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.cost.opclass import (FeatureCost, attention_features, attention_flops, decode_features, fit_attention,
                                fit_floor, fit_memory, fit_nonneg, memory_features)
from c3kit.errors import CostError, WorkloadError
from c3kit.workload.memops import memop_traffic


def test_fit_nonneg_one_feature_recovers_exact_line():
    x = np.array([1e3, 1e6, 1e8, 1e9])
    t = 4e-6 + x / 3.0e12
    a, s = fit_nonneg(x[:, None], t)
    assert a == pytest.approx(4e-6, rel=1e-9)
    assert 1 / s == pytest.approx(3.0e12, rel=1e-9)


def test_fit_nonneg_one_feature_never_negative_fixed_cost():
    x = np.array([1.0, 2.0, 3.0])
    t = np.array([0.5, 2.0, 3.5])  # the line through them has a negative intercept (-1)
    a, s = fit_nonneg(x[:, None], t)
    assert a == 0.0 and s > 0


def test_fit_nonneg_one_feature_rejects_bad_rows():
    with pytest.raises(CostError):
        fit_nonneg(np.array([[1.0]]), np.array([1.0]))
    with pytest.raises(CostError):
        fit_nonneg(np.array([[1.0], [2.0]]), np.array([1.0, 0.0]))


def test_attention_flops_hand_checked():
    # 4 * b * h * q * kv * d = 4 * 2 * 8 * 1024 * 1024 * 128 = 8589934592; causal halves; bwd x2.5
    assert attention_flops(2, 8, 1024, 1024, 128, False, False) == pytest.approx(8589934592)
    assert attention_flops(2, 8, 1024, 1024, 128, True, False) == pytest.approx(4294967296)
    assert attention_flops(2, 8, 1024, 1024, 128, True, True) == pytest.approx(4294967296 * 2.5)
    f = attention_features(2, 8, 2, 1024, 1024, 128, True, False)
    assert list(f) == [4294967296, 2 * 8 * 1024 * 128, 2 * 2 * 1024 * 128]
    # [KV bytes, query heads, bytes from HBM (no shape: 0), split (1000 > 512 KV rows), KV rows x head_dim]
    assert list(decode_features(4, 32, 8, 1000, 128)) == [2 * 4 * 8 * 1000 * 128 * 2, 4 * 32, 0.0, 1.0, 1000 * 128,
                                                          0.0]
    # unsplit (KV 256): 64 x 8 = 512 CTAs on 132 SMs, one each: 4 waves, 3 past the first; split (KV 1000): none
    assert decode_features(64, 32, 8, 256, 128, sms=132)[5] == 3.0
    assert decode_features(64, 32, 8, 1000, 128, sms=132)[5] == 0.0


def test_decode_features_with_a_shape_by_hand():
    from c3kit.cost.opclass import DecodeShape, L2Edge

    shape = DecodeShape(512.0, L2Edge(0.5, 0.1))
    # 1 sequence x 8 KV heads x 256 KV rows, d128: 1 MiB of KV, unsplit; the chain 256 x 128 x 512 B = 16 MiB is larger
    f = decode_features(1, 32, 8, 256, 128, shape=shape, l2_bytes=60e6)
    kv = 2 * 8 * 256 * 128 * 2
    assert f[0] == 256 * 128 * 512 and f[1] == 32 and f[3] == 0.0 and f[4] == 256 * 128 and f[5] == 0.0
    assert f[2] == pytest.approx(kv / (1 + (30e6 / kv) ** (1 / 0.1)), rel=1e-9)  # far below the edge: ~0
    # 64 sequences x 8 x 1024 KV rows: split (no chain), 268 MB of KV, nearly all from HBM past a 30 MB edge
    g = decode_features(64, 32, 8, 1024, 128, shape=shape, l2_bytes=60e6)
    big = 2 * 64 * 8 * 1024 * 128 * 2
    assert g[0] == big and g[3] == 1.0 and g[2] == pytest.approx(big, rel=1e-6)
    with pytest.raises(CostError):
        decode_features(1, 32, 8, 256, 128, shape=shape)
    # on a GPU of half the bandwidth the byte columns double; the chain (latency) does not
    h = decode_features(64, 32, 8, 1024, 128, shape=shape, l2_bytes=60e6, bw_ratio=0.5)
    assert h[0] == 2 * big and h[2] == pytest.approx(2 * g[2], rel=1e-12) and list(h[3:]) == list(g[3:])
    assert decode_features(1, 32, 8, 256, 128, shape=shape, l2_bytes=60e6, bw_ratio=0.5)[0] == f[0]


def test_memory_scaling_by_hand():
    from c3kit.cost.opclass import memory_scaling

    assert list(memory_scaling("gelu", 0.5)) == [2.0, 1.0, 2.0]
    # a norm's rows and re-read bytes scale like its bytes; the weight-gradient waves do not
    assert list(memory_scaling("rmsnorm", 0.5)) == [2.0, 1.0, 2.0, 2.0, 2.0]
    assert list(memory_scaling("layernorm.bwd", 0.5)) == [2.0, 1.0, 2.0, 1.0, 2.0, 2.0]
    assert list(memory_scaling("softmax", 0.5, 5)) == [2.0, 1.0, 2.0, 2.0, 2.0]  # priced by rmsnorm's model
    assert list(memory_scaling("softmax.bwd", 0.5)) == [2.0, 1.0, 2.0, 1.0, 2.0, 2.0]  # rmsnorm.bwd's columns
    assert list(memory_scaling("rmsnorm", 0.5, 3)) == [2.0, 1.0, 2.0]  # a model without the norm columns


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 256), st.integers(1, 8), st.integers(1, 1 << 17), st.integers(1, 1 << 17))
def test_shipped_decode_attention_grows_with_the_batch_and_past_the_split(b, hk, kv1, kv2):
    from c3kit.cost.opclass import DECODE_UNSPLIT_MAX_KV, calibration_for
    from c3kit.hw.catalog import get_gpu

    cal = calibration_for(get_gpu("H200-SXM"), "attention")
    t = lambda bb, kv: float(cal.attention_time(bb, 4 * hk, hk, 1, kv, 128, False, False))  # noqa: E731
    assert t(b + 1, kv1) >= t(b, kv1)
    lo, hi = sorted((kv1, kv2))
    if lo > DECODE_UNSPLIT_MAX_KV or hi <= DECODE_UNSPLIT_MAX_KV:  # on one side of the split: monotone in the KV
        assert t(b, hi) >= t(b, lo)


def test_attention_flops_match_the_op():
    from c3kit.workload.ops import Attention

    a = Attention("a", 3, 16, 4, 2048, 2048, 64, causal=True, backward=True)
    assert attention_flops(3, 16, 2048, 2048, 64, True, True) == pytest.approx(a.flops)


def test_memop_traffic_and_unknown_kind():
    assert memop_traffic("rmsnorm", 1000, 2) == (4000.0, 4000.0)
    assert memop_traffic("swiglu.bwd", 10, 2)[0] == 100.0
    with pytest.raises(WorkloadError):
        memop_traffic("softmaxx", 1, 2)


def _mem_rows(kind_a, kind_s, widths=(2048, 4096, 5120)):
    rows = []
    for T in (1, 64, 4096, 32768):
        for W in widths:
            nbytes = memop_traffic("rmsnorm", T * W, 2)[0]
            rows.append({"op": "rmsnorm", "pass": "fwd", "tokens": T, "width": W, "bytes": nbytes,
                         "time_s": kind_a + nbytes * kind_s + (1.0 if W == 5120 else 0.0)})
    return rows


def test_fit_memory_holds_out_width_5120():
    # rows of width 5120 carry a 1 s poison: a fit that used them would be far off
    fit = fit_memory(_mem_rows(3e-6, 1 / 3.5e12), l2_bytes=1e15)
    m = fit["rmsnorm"]
    assert m.fixed_s == pytest.approx(3e-6, rel=1e-6)
    assert m.rate == pytest.approx(3.5e12, rel=1e-6)
    assert m.n_rows == 8


def test_memory_features_hand_checked():
    f = memory_features("residual_add", 1000 * 4096, 4096, l2_bytes=20e6)
    assert list(f) == [3 * 2 * 1000 * 4096, 4096, 3 * 2 * 1000 * 4096 - 20e6]


@settings(max_examples=30, deadline=None)
@given(st.floats(1e-7, 1e-4), st.floats(1e11, 5e12))
def test_linear_cost_monotone_in_size(a, bw):
    c = FeatureCost(a, (1 / bw,))
    sizes = np.array([0, 1e3, 1e6, 1e9])
    t = c(sizes[:, None])
    assert np.all(np.diff(t) > 0) and t[0] == pytest.approx(a)


def test_fit_attention_separates_passes_and_decode():
    rows = []
    for s in (512, 1024, 2048, 8192, 32768, 65536):
        for hd in (64, 128):
            for ps, rate in (("fwd", 5e14), ("bwd", 4e14)):
                w = attention_flops(1, 8, s, s, hd, True, ps == "bwd")
                rows.append({"backend": "default", "pass": ps, "batch": 1, "heads": 8, "kv_heads": 8, "q_len": s,
                             "kv_len": s, "head_dim": hd, "causal": 1, "time_s": 1e-5 + w / rate})
    for kv, b in ((1024, 1), (8192, 4), (65536, 16), (131072, 2), (4096, 64)):
        by = 2.0 * b * 8 * kv * 128 * 2
        rows.append({"backend": "default", "pass": "decode", "batch": b, "heads": 32, "kv_heads": 8, "q_len": 1,
                     "kv_len": kv, "head_dim": 128, "causal": 0, "time_s": 6e-6 + by / 4e12 + b * 32 * 1e-9})
    att, dec = fit_attention(rows, hold_out=False)
    assert att[("cudnn", "fwd", 128)].rate == pytest.approx(5e14, rel=1e-6)
    assert att[("cudnn", "bwd", 64)].rate == pytest.approx(4e14, rel=1e-6)
    assert dec.fixed_s == pytest.approx(6e-6, rel=1e-6) and dec.rate == pytest.approx(4e12, rel=1e-6)
    assert dec.coefs[1] == pytest.approx(1e-9, rel=1e-6)


def test_fit_floor_is_the_marginal_kernel():
    rows = [{"case": "tiny_add", "mode": m, "kernels": n, "time_s": base + n * per}
            for m, base, per in (("graph", 3e-6, 2e-6), ("eager", 1e-5, 6e-6)) for n in (1, 10, 100)]
    g, e = fit_floor(rows)
    assert g == pytest.approx(2e-6) and e == pytest.approx(6e-6)


def test_parts_are_priced_kernel_by_kernel():
    from c3kit.cost.opclass import FeatureCost, OpCalibration, ScaledCalibration

    add = FeatureCost(1e-6, (1 / 4e12, 0.0, 0.0))
    norm = FeatureCost(2e-6, (1 / 3e12, 1e-9, 0.0))
    cal = ScaledCalibration(OpCalibration("X", {"residual_add": add, "rmsnorm": norm}, {}, None, 1e-6, 7e-6, {}, 1e18),
                            1.0, 1.0, 1e18)
    elements, w = 4096 * 8192, 8192
    t = cal.parts_time((("residual_add", elements, w), ("rmsnorm", elements, w)))
    want = 1e-6 + 3 * elements * 2 / 4e12 + 2e-6 + 2 * elements * 2 / 3e12 + w * 1e-9
    assert t == pytest.approx(want)
    assert cal.parts_time((("residual_add", elements, w), ("gelu", elements, w))) is None
    # half the bandwidth doubles the bandwidth terms only
    slow = ScaledCalibration(cal.cal, 1.0, 0.5, 1e18).parts_time((("rmsnorm", elements, w),))
    assert slow == pytest.approx(2e-6 + 2 * 2 * elements * 2 / 3e12 + w * 1e-9)


def test_decode_kernel_rows_map_to_memory_kinds():
    from c3kit.cost.opclass import decode_kernel_rows

    rows = [{"kind": "kv_write", "batch": 4, "heads": 8, "kv_len": 4096, "width": 128, "dtype": "bf16",
             "bytes": 16384.0, "time_s": 2.3e-6},
            {"kind": "argmax", "batch": 16, "heads": 1, "kv_len": 0, "width": 128256, "dtype": "bf16",
             "bytes": 4104192.0, "time_s": 2.7e-5},
            {"kind": "argmax", "batch": 16, "heads": 1, "kv_len": 0, "width": 128256, "dtype": "fp32",
             "bytes": 8208384.0, "time_s": 2.7e-5},
            {"kind": "seq_mix", "batch": 1, "heads": 1, "kv_len": 0, "width": 2048, "dtype": "bf16",
             "bytes": 0.0, "time_s": 2.6e-6}]
    got = decode_kernel_rows(rows)
    assert [(r["op"], r["tokens"], r["width"]) for r in got] == [("index_copy", 4, 1024), ("argmax", 16, 128256)]
    # the kind's own byte accounting reproduces the benchmark's bytes column
    assert memop_traffic("index_copy", 4 * 1024, 2)[0] == 16384.0
    assert memop_traffic("argmax", 16 * 128256, 2)[0] == 4104192.0


def test_argmax_launch_shape_follows_reduce_config_by_hand():
    from c3kit.cost.opclass import argmax_shape

    # one row of 128256: a 512-thread block reads ceil(128256 / 512) = 251 values a thread, under 256: one block
    assert [float(v) for v in argmax_shape(1, 128256, 132)] == [251.0, 0.0, 251.0]
    # 152064: 297 values a thread >= 256, grid 1 <= 132 x 4: split over max(min(528, ceil(297 / 16)), 2) = 19 blocks,
    # ceil(297 / 19) = 16 values a thread, reduced through global memory
    assert [float(v) for v in argmax_shape(1, 152064, 132)] == [16.0, 1.0, 16.0]
    # 256 rows of 256000: blocks of 32 x 16 threads; 500 values a thread >= 256; grid 256 <= 528: ctas
    # max(min(ceil(528 / 256) = 3, 32), 2) = 3; 768 blocks = ceil(5.8) = 6 a SM, ceil(500 / 3) = 167 values a thread
    assert [float(v) for v in argmax_shape(256, 256000, 132)] == [167.0, 1.0, 6.0 * 167.0]
    # on 66 SMs the target grid is 264: 2 blocks a row of ceil(500 / 2) = 250 values, 512 blocks = 8 a SM
    assert [float(v) for v in argmax_shape(256, 256000, 66)] == [250.0, 1.0, 8.0 * 250.0]


def test_index_copy_and_embedding_launch_shapes_by_hand():
    from c3kit.cost.opclass import embedding_small_index_loop, index_copy_shape, kv_cache_span

    # 128 threads a block, up to 4 elements each in turn
    assert [float(index_copy_shape(e)[0]) for e in (64, 128, 256, 512, 4096)] == [1.0, 1.0, 2.0, 4.0, 4.0]
    # a 64 x 8 x 32768 x 128 bf16 cache spans 4 GiB: past 2^31 - 1, split in two launches; 256 x 8 x 4096 x 128
    # spans 2 GiB less one position's slab: one launch
    big, fits = kv_cache_span(64, 8, 32768, 128), kv_cache_span(256, 8, 4096, 128)
    assert fits == 2 ** 31 - 4096 * 128 * 2 + 2 * 128 - 1
    assert float(index_copy_shape(1024, big)[1]) == 1.0 and float(index_copy_shape(1024, fits)[1]) == 0.0
    assert float(index_copy_shape(1024, 4 * big)[1]) == 7.0  # 16 GiB: eight launches
    assert [float(embedding_small_index_loop(n)) for n in (1, 16, 17, 256)] == [1.0, 16.0, 0.0, 0.0]


def test_decode_kernel_classes_recover_their_launch_costs():
    from c3kit.cost.opclass import OpCalibration, ScaledCalibration, argmax_shape

    rows = []
    for V in (32000, 128256, 152064, 256000):
        for b in (1, 4, 16, 64, 256):
            vpt, split, work = (float(v) for v in argmax_shape(b, V, 132))
            rows.append({"op": "argmax", "pass": "fwd", "tokens": b, "width": V,
                         "time_s": 3e-6 + 0.08e-6 * vpt + 4e-6 * split + 0.02e-6 * work})
    fit = fit_memory(rows, l2_bytes=1e18, sms=132)
    cal = ScaledCalibration(OpCalibration("X", fit, {}, None, 1e-6, 7e-6, {}, 1e18, sms=132), 1.0, 1.0, 1e18)
    assert cal.parts_time((("argmax", 128256, 128256),)) == pytest.approx(3e-6 + (0.08e-6 + 0.02e-6) * 251, rel=1e-6)
    assert cal.parts_time((("argmax", 152064, 152064),)) == pytest.approx(3e-6 + 4e-6 + 0.1e-6 * 16, rel=1e-6)
    with pytest.raises(CostError, match="SM count"):
        memory_features("argmax", 1000, 1000, 1e18)


def test_shipped_h200_prices_the_decode_kernels_by_their_launch_shape():
    from c3kit.cost.opclass import calibration_for, kv_cache_span
    from c3kit.hw.catalog import get_gpu

    cal = calibration_for(get_gpu("H200-SXM"), "memory")
    # measured (call 21): V = 128256 26.6 us, V = 152064 8.6 us at batch 1: the larger vocabulary is the faster
    slow, fast = cal.kind_time("argmax", 128256, 128256), cal.kind_time("argmax", 152064, 152064)
    assert 22e-6 < slow < 31e-6 and 7e-6 < fast < 10e-6
    # embedding of 16 tokens (small-index loop) measured 7.5 us against 1.8 us for one token and for 256
    one, sixteen = cal.kind_time("embedding", 4096, 4096), cal.kind_time("embedding", 16 * 4096, 4096)
    assert sixteen > 3 * one
    # one token's K (8 heads x 128, batch 64) into a 4 GiB cache: two launches, about twice one (4.96 us measured)
    small = cal.kind_time("index_copy", 64 * 1024, 1024)
    split = cal.kind_time("index_copy", 64 * 1024, 1024, cache_bytes=kv_cache_span(64, 8, 32768, 128))
    assert 1.8e-6 < small < 3.0e-6 and split == pytest.approx(2 * small, rel=0.1)
    # a layer's parts may carry the cache's span as a fourth item
    span = kv_cache_span(64, 8, 32768, 128)
    assert cal.parts_time((("index_copy", 64 * 1024, 1024, span),)) == split
    assert cal.parts_time((("index_copy", 64 * 1024, 1024),)) == small


def test_decode_attention_is_fitted_per_head_dim_and_priced_at_the_nearest():
    from c3kit.cost.opclass import OpCalibration, fit_decode_by_head_dim

    rows = [{"backend": "default", "pass": "decode", "batch": b, "heads": 32, "kv_heads": 8, "q_len": 1,
             "kv_len": kv, "head_dim": hd, "causal": 0, "time_s": fixed + 2.0 * b * 8 * kv * hd * 2 / bw}
            for hd, fixed, bw in ((128, 5e-6, 3e12), (256, 9e-6, 2e12)) for b in (1, 4, 16, 64)
            for kv in (1024, 4096, 16384, 65536)]
    fits = fit_decode_by_head_dim(rows, hold_out=False)
    assert set(fits) == {128, 256}
    f = decode_features(4, 32, 8, 4096, 256)
    assert fits[256](f) == pytest.approx(9e-6 + 2.0 * 4 * 8 * 4096 * 256 * 2 / 2e12, rel=1e-6)
    cal = OpCalibration("X", {}, {}, None, 1e-6, 7e-6, {}, 1e18, {}, fits)
    assert cal.decode_model(200) is fits[256] and cal.decode_model(96) is fits[128]
    assert OpCalibration("X", {}, {}, fits[128], 1e-6, 7e-6, {}, 1e18).decode_model(256) is fits[128]  # pooled
    # a head dim with fewer rows than DECODE_MIN_ROWS gets no model of its own
    assert set(fit_decode_by_head_dim(rows[:20], hold_out=False)) == {128}


def test_shipped_h200_decode_attention_has_each_measured_head_dim():
    from c3kit.cost.opclass import op_calibration

    assert set(op_calibration("H200-SXM").decode_by_hd) == {64, 128, 256}


def test_chunked_swiglu_is_never_priced_below_the_contiguous_kernel():
    from c3kit.cost.opclass import OpCalibration, ScaledCalibration

    contiguous = FeatureCost(3e-6, (1 / 3e12, 0.0, 0.0))
    chunked = FeatureCost(0.0, (1 / 1.4e12, 0.0, 0.0))  # no fixed cost: below ~12k elements it would undercut
    cal = ScaledCalibration(OpCalibration("X", {"swiglu": contiguous, "swiglu_chunked": chunked}, {}, None, 1e-6, 7e-6,
                                          {}, 1e18), 1.0, 1.0, 1e18)
    small, big = 1024, 1 << 24
    assert cal.kind_time("swiglu_chunked", small, 256) == pytest.approx(cal.kind_time("swiglu", small, 256))
    assert cal.kind_time("swiglu_chunked", big, 4096) == pytest.approx(3 * big * 2 / 1.4e12)
    assert cal.kind_time("swiglu_chunked", big, 4096) > 1.9 * cal.kind_time("swiglu", big, 4096)


def test_shipped_h200_chunked_swiglu_costs_about_twice_the_contiguous_one():
    from c3kit.cost.opclass import calibration_for
    from c3kit.hw.catalog import get_gpu

    cal = calibration_for(get_gpu("H200-SXM"), "memory")
    el = 8192 * 7168  # measured: 308 us strided, 142 us contiguous (call 23)
    ratio = cal.kind_time("swiglu_chunked", el, 7168) / cal.kind_time("swiglu", el, 7168)
    assert 1.8 < ratio < 2.6


def test_norm_backward_weight_gradient_waves_by_hand():
    from c3kit.cost.opclass import dgamma_wave_rows

    # ceil(N / 32) blocks of one column strip each: 4096 -> 128 blocks, one wave on 132 SMs; 5120 -> 160, two waves;
    # 2048 -> 64, one; 8192 -> 256, two
    assert [float(dgamma_wave_rows(8192, w, 132)) for w in (2048, 4096, 5120, 8192)] == [8192.0, 8192.0, 16384.0,
                                                                                          16384.0]
    # above 64 Ki rows with fewer than SMs / 2 blocks the kernel splits the rows over blocks: no wave term
    assert float(dgamma_wave_rows(2 ** 17, 2048, 132)) == 0.0
    assert float(dgamma_wave_rows(2 ** 17, 4096, 132)) == 2.0 ** 17  # 128 blocks >= 66: not split
    f = memory_features("layernorm.bwd", 1024 * 5120, 5120, np.inf, sms=132)
    # then the norms' rows (1024) and re-read bytes past L1 (0: no row edge given)
    assert f.shape == (6,) and list(map(float, f[3:])) == [2048.0, 1024.0, 0.0]
    assert memory_features("rmsnorm.bwd", 1024 * 5120, 5120, np.inf, sms=132).shape == (6,)  # the same kernel
    with pytest.raises(CostError):
        memory_features("layernorm.bwd", 1024 * 5120, 5120, np.inf)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, (1 << 16) - 1), st.integers(1, 16384), st.integers(1, 16384))
def test_norm_backward_waves_monotone_in_rows_and_width(rows, w1, w2):  # up to the split-M switch (64 Ki rows)
    from c3kit.cost.opclass import dgamma_wave_rows

    lo, hi = sorted((w1, w2))
    assert dgamma_wave_rows(rows, lo, 132) <= dgamma_wave_rows(rows, hi, 132)
    assert dgamma_wave_rows(rows, lo, 132) <= dgamma_wave_rows(rows + 1, lo, 132)


def test_shipped_h200_prices_width_5120_norm_backward_as_two_weight_gradient_waves():
    from c3kit.cost.opclass import OpCalibration, RowEdge, ScaledCalibration, calibration_for
    from c3kit.hw.catalog import get_gpu

    cal = calibration_for(get_gpu("H200-SXM"), "memory")
    m = cal.cal.memory["layernorm.bwd"]
    assert len(m.coefs) == 6 and m.coefs[3] > 0  # bytes, width, HBM bytes, waves, rows, re-read bytes
    # same bytes per row, one more wave: 5120 costs more per element than 4096 at equal rows
    t4, t5 = (float(cal.kind_time("layernorm.bwd", 16384 * w, w)) for w in (4096, 5120))
    assert t5 / 5120 > t4 / 4096
    # a kind priced by another's model with a launch-shape column (a proxy) runs none of that column's work
    proxy = OpCalibration("x", {"layernorm.bwd": FeatureCost(1e-6, (1e-12, 0.0, 0.0, 1e-9))}, {}, None, 0.0, 0.0, {},
                          1e9, sms=132)
    sc = ScaledCalibration(proxy, 1.0, 1.0, 1e9, 132)
    assert sc._fitted("dropout.bwd", proxy.memory["layernorm.bwd"], 1e6, 1000, 2.0) == pytest.approx(
        1e-6 + 5e6 * 1e-12, rel=1e-12)  # dropout.bwd moves 2.5 x 2 B an element
    # a row-wise proxy of a norm (softmax.bwd -> rmsnorm.bwd) takes the norm's rows and re-read columns
    norm = FeatureCost(1e-6, (1e-12, 0.0, 0.0, 1e-7, 1e-9, 1e-13))  # its weight-gradient waves: not the proxy's
    edge = RowEdge(8192.0, 0.1)
    sc = ScaledCalibration(OpCalibration("x", {"rmsnorm.bwd": norm}, {}, None, 0.0, 0.0, {}, 1e9, sms=132,
                                         row_edge=edge), 1.0, 1.0, 1e9, 132)
    reread = 2 * 1e6 * 2.0 * float(edge.past_l1(2 * 1000 * 2.0))
    assert sc.kind_time("softmax.bwd", 1e6, 1000) == pytest.approx(1e-6 + 6e6 * 1e-12 + 1000 * 1e-9 + reread * 1e-13,
                                                                   rel=1e-12)


def test_forward_makespan_by_hand():
    from c3kit.cost.opclass import _makespan_steps, forward_makespan_flops

    # 4 query tiles of 128 on 132 slots: each its own slot, the last (4 KV tiles) the longest
    assert _makespan_steps(1, 512, 512, True, 132) == 4.0
    # two heads of 3 tiles (work 1, 2, 3) on 2 slots in launch order: A1 B2 | A+3=4 | B+1=3 | B+2=5 | A+3=7
    assert _makespan_steps(2, 384, 384, True, 2) == 7.0
    assert _makespan_steps(2, 256, 256, True, 1) == 6.0  # one slot runs everything: 1 + 2 + 1 + 2
    assert _makespan_steps(1, 256, 1024, False, 132) == 8.0  # not causal: every tile sees all 8 KV tiles
    # a chunk of 128 queries at the end of 1024 keys (causal, bottom-right): it sees all 8 KV tiles
    assert _makespan_steps(1, 128, 1024, True, 132) == 8.0
    # 132 heads of one 128-row tile on 132 SMs: one step a slot, 4 x 128 x 128 x d FLOPs a step
    assert float(forward_makespan_flops(1, 132, 128, 128, 64, True, 132)) == 132 * 4.0 * 128 * 128 * 64


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 64), st.sampled_from([128, 512, 1000, 2048, 4096]), st.sampled_from([32, 66, 132]))
def test_forward_makespan_bounds_and_more_heads_never_finish_sooner(bh, seq, slots):
    from c3kit.cost.opclass import ATTN_TILE, _makespan_steps

    nq = -(-seq // ATTN_TILE)
    work = [-(-min(seq, (i + 1) * ATTN_TILE) // ATTN_TILE) for i in range(nq)]
    t = _makespan_steps(bh, seq, seq, True, slots)
    assert max(bh * sum(work) / slots, max(work)) <= t <= bh * sum(work) / slots + max(work)
    assert _makespan_steps(bh + 1, seq, seq, True, slots) >= t  # tasks appended at the end of the launch order


def test_makespan_feature_only_for_flash2_forwards():
    from c3kit.cost.opclass import attention_flops, makespan_sms

    assert makespan_sms("flash2", 132) == 132 and makespan_sms("cudnn", 132) is None
    few = attention_features(1, 8, 8, 4096, 4096, 128, True, False, 132)
    flat = attention_features(1, 8, 8, 4096, 4096, 128, True, False)
    # 8 heads x 32 tiles = 256 CTAs on 132 slots: idle slots make the makespan cost more than the causal FLOPs
    assert float(flat[0]) == float(attention_flops(1, 8, 4096, 4096, 128, True, False)) < float(few[0])
    # the backward keeps its FLOPs
    assert np.array_equal(attention_features(1, 8, 8, 4096, 4096, 128, True, True, 132),
                          attention_features(1, 8, 8, 4096, 4096, 128, True, True))


def test_a_feature_constant_over_the_fitted_rows_gets_no_coefficient():
    # copy rows all of width 1 (the copy ladder): 2 us + bytes / 4 TB/s; the width column equals the intercept's
    # column, so a least-squares split would put part of the 2 us on each unit of width
    rows = [{"op": "copy", "pass": "fwd", "tokens": n, "width": 1, "time_s": 2e-6 + 4.0 * n / 4e12}
            for n in (1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 28)]
    m = fit_memory(rows, l2_bytes=1e15, held_out_width=None)["copy"]
    assert m.fixed_s == pytest.approx(2e-6, rel=1e-9)
    assert m.coefs[1] == 0.0
    assert m.rate == pytest.approx(4e12, rel=1e-9)
    el = 65536 * 2048  # the same elements in rows of 2048 cost what they cost in rows of 1: 2 us + 536.9 MB / 4 TB/s
    assert m(memory_features("copy", el, 2048, 1e15)) == pytest.approx(2e-6 + 4.0 * el / 4e12, rel=1e-9)
    assert m(memory_features("copy", el, 2048, 1e15)) == m(memory_features("copy", el, 1, 1e15))


def test_constant_columns_by_hand():
    from c3kit.cost.opclass import constant_columns

    X = np.array([[1.0, 1.0, 0.0, 3.0], [2.0, 1.0, 0.0, 4.0]])
    assert constant_columns(X).tolist() == [False, True, True, False]
    assert constant_columns(np.array([[5.0, 2.0]])).tolist() == [False, True]  # the bytes column is always fitted


def test_shipped_h200_copy_price_does_not_grow_with_row_width():
    from c3kit.cost.opclass import calibration_for
    from c3kit.hw.catalog import get_gpu

    cal = calibration_for(get_gpu("H200-SXM"), "memory")
    el = 65536 * 2048
    narrow, wide = (float(cal.parts_time((("copy", el, w),))) for w in (1, 2048))
    assert wide == pytest.approx(narrow, rel=1e-12)
    assert float(cal.parts_time((("copy", 2 * el, 1),))) > narrow  # monotone in size
    assert 0.10e-3 < narrow < 0.30e-3  # 537 MB at 3.2-4.8 TB/s (the copy ladder streams ~4 TB/s)


def _graph_row(ps, b, s, t, hd=128):
    return {"pass": ps, "mode": "graph", "batch": b, "seq": s, "heads": 32, "kv_heads": 8, "head_dim": hd,
            "causal": 1, "time_s": t}


def test_graph_attention_rows_and_their_held_out_split_by_hand():
    from c3kit.cost.opclass import graph_attention_rows, is_held_out_attention

    rows = graph_attention_rows([_graph_row("fwd", 16, 1024, 5e-4), _graph_row("bwd", 4, 4096, 5e-3),
                                 {**_graph_row("fwd", 1, 16384, 6e-3), "mode": "events"}])
    assert len(rows) == 2  # an events fallback is not a graph timing
    assert rows[0] == {"backend": "flash", "mode": "graph", "pass": "fwd", "batch": 16, "heads": 32, "kv_heads": 8,
                       "q_len": 1024, "kv_len": 1024, "head_dim": 128, "causal": 1, "time_s": 5e-4}
    assert [is_held_out_attention(r) for r in rows] == [False, True]  # 4096 and 16384 tokens a sequence held out


def test_gpu_time_rows_drop_host_bound_eager_rows_only_of_a_graphed_backend():
    from c3kit.cost.opclass import gpu_time_rows

    def eager(backend, ps, q):
        return {"backend": backend, "pass": ps, "q_len": q}

    rows = [eager("flash", "bwd", 1024), eager("flash", "fwd", 512), eager("flash", "bwd", 2048),
            eager("flash", "decode", 1), eager("default", "bwd", 512)]
    assert gpu_time_rows(rows) == rows  # no graph rows: nothing to replace them with
    g = {"backend": "flash", "mode": "graph", "pass": "bwd", "q_len": 1024}
    assert gpu_time_rows(rows + [g]) == [rows[2], rows[3], rows[4], g]


def test_shipped_h200_flash2_is_priced_at_its_graph_kernel_times():
    from c3kit.cost.opclass import calibration_for
    from c3kit.hw.catalog import get_gpu

    cal = calibration_for(get_gpu("H200-SXM"), "attention")
    t = [float(cal.attention_time(b, 32, 8, s, s, 128, True, True, backend="flash2"))
         for b, s in ((1, 1024), (16, 1024), (4, 4096))]
    assert t[1] == pytest.approx(2.133e-3, rel=0.15)  # graph row 16 x 1024: 2133 us (fitted)
    assert t[2] == pytest.approx(5.368e-3, rel=0.10)  # graph row 4 x 4096: 5368 us (held out)
    assert t[0] < t[1] < t[2]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 5), st.integers(1, 4), st.sampled_from([8, 32]), st.sampled_from([64, 128]),
       st.booleans())
def test_shipped_h200_flash2_never_cheaper_for_longer_sequences_or_more_of_them(p, b, heads, hd, bwd):
    from c3kit.cost.opclass import calibration_for
    from c3kit.hw.catalog import get_gpu

    cal = calibration_for(get_gpu("H200-SXM"), "attention")
    s = 1024 << p

    def t(bb, ss):
        return float(cal.attention_time(bb, heads, 8, ss, ss, hd, True, bwd, backend="flash2"))

    assert t(b, 2 * s) >= t(b, s) > 0
    assert t(b + 1, s) >= t(b, s)


def test_each_graph_family_names_its_backend():
    from c3kit.cost.opclass import ATTENTION_FAMILIES, GRAPH_ATTENTION_FAMILIES, family_rows

    assert GRAPH_ATTENTION_FAMILIES == {"attn_graph": "flash", "attn_graph_cudnn": "cudnn",
                                       "attn_graph_efficient": "efficient"}
    assert set(GRAPH_ATTENTION_FAMILIES) <= set(ATTENTION_FAMILIES)
    doc = {"columns": list(_graph_row("fwd", 1, 1024, 1e-4)), "rows": [list(_graph_row("fwd", 1, 1024, 1e-4).values())]}
    assert [r["backend"] for r in family_rows("attn_graph_cudnn", doc)] == ["cudnn"]
    assert family_rows("attention", doc)[0]["seq"] == 1024  # other families' rows pass through as they are


def test_shipped_h200_cudnn_is_priced_near_its_graph_kernel_times():
    from c3kit.cost.opclass import calibration_for
    from c3kit.hw.catalog import get_gpu

    cal = calibration_for(get_gpu("H200-SXM"), "attention")
    fwd = float(cal.attention_time(4, 32, 8, 4096, 4096, 128, True, False, backend="cudnn"))
    bwd = float(cal.attention_time(4, 32, 8, 4096, 4096, 128, True, True, backend="cudnn"))
    assert fwd == pytest.approx(921.8e-6, rel=0.10)  # graph row 4 x 4096 forward: 922 us (held out)
    assert bwd == pytest.approx(2953e-6, rel=0.10)  # graph row 4 x 4096 backward: 2953 us (held out)


# --- the L2 edge of the elementwise kinds and the CUDA-graph memory rows (memory_graph) ---

def test_l2_edge_fraction_hand_checked():
    from c3kit.cost.opclass import L2Edge

    e = L2Edge(0.5, 0.2)
    # at center x L2 half the bytes come from HBM; one width above it 1 / (1 + e^-1)
    assert e.hbm_fraction(30e6, 60e6) == pytest.approx(0.5, rel=1e-12)
    assert e.hbm_fraction(30e6 * np.exp(0.2), 60e6) == pytest.approx(1 / (1 + np.exp(-1)), rel=1e-12)
    assert e.hbm_fraction(0.0, 60e6) == 0.0 and e.hbm_fraction(1e6, np.inf) == 0.0


def test_memory_features_with_edge_hand_checked():
    from c3kit.cost.opclass import L2Edge

    e = L2Edge(0.5, 0.2)
    nbytes = 2 * 2 * 15_000_000  # gelu: a read and a write of 15M bf16 elements = 60 MB, 2 x center x L2
    f = memory_features("gelu", 15_000_000, 4000, 60e6, edge=e)
    assert f[0] == nbytes and f[1] == 4000
    # z = ln(2) / 0.2, e^-z = 2^-5: 32 / 33 of the bytes from HBM
    assert f[2] == pytest.approx(nbytes * 32 / 33, rel=1e-12)
    # kinds outside L2_EDGE_KINDS keep the hinge at the catalog L2: the copy class
    assert list(memory_features("copy", 1e8, 1, 60e6, edge=e)) == [4e8, 1, 4e8 - 60e6]
    # residual_add (3 x 2 B per element, 60 MB): 2 x center x L2 as for gelu above
    assert memory_features("residual_add", 1e7, 4000, 60e6, edge=e)[2] == pytest.approx(6e7 * 32 / 33, rel=1e-12)


def _edge_rows(edge, l2, fixed=2e-6, l2_bw=8e12, hbm_extra=1 / 4.5e12 - 1 / 8e12, graph_tokens=None):
    """Synthetic memory_graph rows of gelu priced by a known edge: fixed + bytes / l2_bw + HBM bytes x extra."""
    from c3kit.cost.opclass import l2_column

    rows = []
    for T in graph_tokens or (256, 512, 768, 1024, 1280, 1536, 2048, 2560, 3072, 4096, 8192, 32768):
        for W in (4096, 8192):
            nbytes = memop_traffic("gelu", T * W, 2)[0]
            t = fixed + nbytes / l2_bw + float(l2_column("gelu", nbytes, l2, edge)) * hbm_extra
            rows.append({"op": "gelu", "pass": "fwd", "mode": "graph", "tokens": T, "width": W,
                         "bytes": nbytes, "time_s": t})
    return rows


def test_fit_l2_edge_recovers_a_known_edge():
    from c3kit.cost.opclass import L2_EDGE_CENTERS, L2Edge, fit_l2_edge

    true = L2Edge(L2_EDGE_CENTERS[12], 0.2)
    rows = _edge_rows(true, 60e6)
    assert fit_l2_edge(rows, l2_bytes=60e6) == true
    m = fit_memory(rows, l2_bytes=60e6, edge=true)["gelu"]
    assert m.fixed_s == pytest.approx(2e-6, rel=1e-6) and m.rate == pytest.approx(8e12, rel=1e-6)
    assert m.coefs[2] == pytest.approx(1 / 4.5e12 - 1 / 8e12, rel=1e-6)
    # 1536 and 6144 / 16384 tokens are declared held out: 1536 is in the rows and left out of the fit
    assert m.n_rows == len(rows) - 2


def test_fit_l2_edge_none_without_graph_rows():
    from c3kit.cost.opclass import fit_l2_edge

    rows = [dict(r, mode="eager") for r in _edge_rows(None, 60e6)]
    assert fit_l2_edge(rows, l2_bytes=60e6) is None


def test_l2_transition_hand_made_case():
    # a hand-made edge: below it the kernel runs at L2 speed (8 TB/s), far above at HBM speed (4.5 TB/s)
    from c3kit.cost.opclass import L2Edge

    e = L2Edge(0.5, 0.1)
    m = FeatureCost(0.0, (1 / 8e12, 0.0, 1 / 4.5e12 - 1 / 8e12))
    def rate(nbytes):
        return nbytes / m(memory_features("gelu", nbytes / 4, 4096, 60e6, edge=e))
    assert rate(3e6) == pytest.approx(8e12, rel=1e-6)  # 10% of the center: e^-23 of the bytes from HBM
    assert rate(30e6) == pytest.approx(1 / (0.5 / 8e12 + 0.5 / 4.5e12), rel=1e-12)  # the center: half and half
    assert rate(600e6) == pytest.approx(4.5e12, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.2, 2.0), st.floats(0.05, 0.6), st.floats(0.0, 1e-5), st.floats(1e-14, 1e-12),
       st.floats(0.0, 1e-12))
def test_edge_price_never_drops_when_bytes_grow(center, width, fixed, per_byte, per_hbm_byte):
    from c3kit.cost.opclass import L2Edge

    m = FeatureCost(fixed, (per_byte, 0.0, per_hbm_byte))
    el = np.geomspace(1e3, 1e10, 400)
    t = m(memory_features("gelu", el, 4096, 60e6, edge=L2Edge(center, width)))
    assert np.all(np.diff(t) >= 0)


def test_graph_rows_replace_host_bound_eager_backward_rows():
    from c3kit.cost.opclass import BWD_MIN_ELEMENTS, EAGER_BWD_HOST_BOUND, gpu_time_memory_rows

    def row(op, ps, T, W, mode=None):
        r = {"op": op, "pass": ps, "tokens": T, "width": W, "bytes": 1.0, "time_s": 1e-5}
        return r if mode is None else dict(r, mode=mode)
    small, mid, big = (BWD_MIN_ELEMENTS // 4096 // 2, 4096), (BWD_MIN_ELEMENTS // 4096, 4096), \
        (EAGER_BWD_HOST_BOUND // 4096, 4096)
    rows = [row("gelu", "bwd", *small), row("gelu", "bwd", *mid), row("gelu", "bwd", *big),
            row("gelu", "bwd", *small, mode="graph"), row("gelu", "fwd", *small),
            row("rope", "bwd", *small), row("rope", "bwd", *mid)]
    kept = gpu_time_memory_rows(rows)
    # gelu.bwd has graph rows: its eager rows below EAGER_BWD_HOST_BOUND go; rope.bwd has none: BWD_MIN_ELEMENTS
    assert kept == [rows[2], rows[3], rows[4], rows[6]]


def test_shipped_calibration_reads_memory_graph_and_fits_an_edge():
    from c3kit.cost.opclass import L2_EDGE_CENTERS, L2_EDGE_WIDTHS, op_calibration

    cal = op_calibration("H200-SXM")
    assert "memory_graph" in cal.origin
    e = cal.l2_edge
    assert e.center in L2_EDGE_CENTERS and e.width in L2_EDGE_WIDTHS
    assert 25e6 < e.center * cal.l2_bytes < 50e6  # where the rows step from L2 to HBM speed


def test_shipped_elementwise_prices_never_drop_when_tokens_grow():
    from c3kit.cost.opclass import L2_EDGE_KINDS, calibration_for
    from c3kit.hw.catalog import get_gpu

    cal = calibration_for(get_gpu("H200-SXM"), "memory")
    tokens = np.unique(np.geomspace(1, 65536, 300).round())
    for kind in L2_EDGE_KINDS:
        for width in (2048, 4096, 5120, 8192):
            t = cal.kind_time(kind, tokens * width, width)
            assert np.all(np.diff(t) >= 0), (kind, width)


def test_norm_reread_and_rows_by_hand():
    from c3kit.cost.opclass import REREAD_ALL, RowEdge

    e = RowEdge(16384.0, 0.1)
    assert float(e.past_l1(16384.0)) == pytest.approx(0.5)  # at the centre: half the re-read misses L1
    assert float(e.past_l1(8192.0)) == pytest.approx(1 / (1 + 2 ** 10), rel=1e-12)  # ln 2 / 0.1 below: e^-6.93
    # RMSNorm forward, 4096 rows of 8192 (bf16): re-reads X, 16 KiB a row, at the centre
    f = memory_features("rmsnorm", 4096 * 8192, 8192, np.inf, row_edge=e)
    el = 4096 * 8192
    assert list(f[:2]) == [4.0 * el, 8192.0] and f[2] == 0.0  # bytes (read + write 2 B), width; no L2 term at inf
    assert f[3] == 4096.0 and f[4] == pytest.approx(el * 2.0 * 0.5, rel=1e-12)  # rows, half the X re-read
    # the backward re-reads X and dY: twice the bytes a row, so it crosses the same edge at half the width
    b = memory_features("rmsnorm.bwd", 4096 * 4096, 4096, np.inf, sms=132, row_edge=e)
    assert b[3] == 4096.0 and b[4] == 4096.0  # one weight-gradient wave (128 blocks on 132 SMs) x 4096 rows
    assert b[5] == pytest.approx(4096 * 4096 * 2.0 * 2 * 0.5, rel=1e-12)
    assert memory_features("rmsnorm", el, 8192, np.inf, row_edge=REREAD_ALL)[4] == el * 2.0  # the fit's raw column
    assert memory_features("rmsnorm", el, 8192, np.inf)[4] == 0.0  # no edge: no re-read priced
    with pytest.raises(CostError):
        memory_features("rmsnorm", el, 8192, np.inf, row_edge="some")


def test_norm_width_held_out_rule_is_fixed():
    from c3kit.cost.opclass import (NORM_WIDTH_HELD_OUT_TOKENS, NORM_WIDTH_HELD_OUT_WIDTHS, is_held_out_norm_width,
                                    norm_width_rows)

    assert NORM_WIDTH_HELD_OUT_WIDTHS == (5120, 6144, 12288) and NORM_WIDTH_HELD_OUT_TOKENS == (16384,)
    row = {"op": "rmsnorm", "pass": "fwd", "mode": "graph", "tokens": 8192, "width": 8192, "bytes": 1.0, "time_s": 1.0}
    rows = norm_width_rows([row, {**row, "mode": "eager"}, {**row, "width": 6144}, {**row, "tokens": 16384}])
    assert len(rows) == 3 and all(r["family"] == "norm_width" for r in rows)  # the eager row time the host: left out
    assert [is_held_out_norm_width(r) for r in rows] == [False, True, True]
    assert not is_held_out_norm_width({**row, "width": 6144})  # a row of another family: its own rules


def _norm_rows(edge, widths=(2048, 3072, 4096, 7168, 8192, 16384), tokens=(4096, 8192, 32768)):
    """CUDA-graph norm_width rows of RMSNorm forward and backward made from known costs and a known row edge."""
    from c3kit.workload.memops import memop_traffic

    rows = []
    for kind, op, ps in (("rmsnorm", "rmsnorm", "fwd"), ("rmsnorm.bwd", "rmsnorm", "bwd")):
        for T in tokens:
            for w in widths:
                el = float(T * w)
                nbytes = memop_traffic(kind, el, 2.0)[0]
                reread = float(memory_features(kind, el, w, np.inf, sms=132, row_edge=edge)[-1])
                t = 3e-6 + nbytes / 4e12 + T * 2e-10 + reread / 5e12
                rows.append({"op": op, "pass": ps, "mode": "graph", "tokens": T, "width": w, "bytes": nbytes,
                             "time_s": t, "family": "norm_width"})
    return rows


def test_fit_row_edge_recovers_a_known_edge():
    from c3kit.cost.opclass import ROW_EDGE_CENTERS, RowEdge, fit_row_edge

    true = RowEdge(ROW_EDGE_CENTERS[16], 0.15)
    rows = _norm_rows(true)
    assert fit_row_edge(rows, l2_bytes=np.inf, sms=132) == true
    m = fit_memory(rows, l2_bytes=np.inf, sms=132, row_edge=true)["rmsnorm"]
    assert m.rate == pytest.approx(4e12, rel=1e-6) and m.coefs[3] == pytest.approx(2e-10, rel=1e-6)
    assert m.coefs[4] == pytest.approx(1 / 5e12, rel=1e-6)
    assert fit_row_edge(_norm_rows(true, widths=(2048, 4096, 8192)), l2_bytes=np.inf, sms=132) is None  # 3 widths


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["rmsnorm", "rmsnorm.bwd", "layernorm", "layernorm.bwd"]), st.integers(1, 1 << 16),
       st.integers(1, 1 << 16), st.sampled_from([1024, 2048, 3072, 4096, 5120, 6144, 8192, 12288, 16384]))
def test_shipped_norms_grow_with_the_tokens(kind, t1, t2, width):
    from c3kit.cost.opclass import calibration_for
    from c3kit.hw.catalog import get_gpu

    cal = calibration_for(get_gpu("H200-SXM"), "memory")
    lo, hi = sorted((t1, t2))
    assert float(cal.kind_time(kind, hi * width, width)) >= float(cal.kind_time(kind, lo * width, width))


def test_shipped_h200_norms_have_a_row_edge_and_wide_rows_stream_slower():
    from c3kit.cost.opclass import calibration_for
    from c3kit.hw.catalog import get_gpu

    cal = calibration_for(get_gpu("H200-SXM"), "memory")
    assert cal.cal.row_edge is not None and len(cal.cal.memory["rmsnorm"].coefs) == 5
    # per element at 32k tokens: width 12288 costs more than 4096 (the re-read past L1), as the rows show
    t4, t12 = (float(cal.kind_time("rmsnorm", 32768 * w, w)) / w for w in (4096, 12288))
    assert t12 > 1.2 * t4


def test_graph_decode_rows_leave_the_eager_training_rows_of_their_backend():
    from c3kit.cost.opclass import gpu_time_rows, is_held_out_attention

    train = {"backend": "default", "pass": "fwd", "batch": 1, "heads": 8, "kv_heads": 8, "q_len": 512,
             "kv_len": 512, "head_dim": 128, "causal": 1, "time_s": 1e-5}
    dec = {**train, "pass": "decode", "mode": "graph", "q_len": 1, "causal": 0}
    assert gpu_time_rows([train, dec]) == [train, dec]  # graph decode rows do not mark the training rows host-bound
    # graph decode rows are held out by the sizes' hash like the eager ones (q_len 1 would never meet the seq rule)
    assert is_held_out_attention(dec) == is_held_out_attention({**dec, "mode": "eager"})
