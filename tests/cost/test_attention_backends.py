"""Attention priced per backend (cost/attention.py): unfused as the sum of its kernels, the measured classes per
backend, the default per GPU, and the workload feature that carries the backend."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.cost import explain, time
from c3kit.cost.attention import (attention_basis, default_backend, resolve_backend, unfused_breakdown)
from c3kit.cost.model import as_model
from c3kit.errors import C3kitError, WorkloadError
from c3kit.hw import get_gpu
from c3kit.workload.attention import BACKENDS, unfused_parts
from c3kit.workload.ops import Attention

EFF = as_model("efficiency")


def _att(backend, s=4096, backward=False, dropout=False, batch=1, heads=32, kv_heads=8, hd=128):
    return Attention("a", batch, heads, kv_heads, s, s, hd, "bf16", True, backward, False, backend, dropout)


def test_unfused_forward_is_the_sum_of_its_kernels_by_hand():
    """A100 roofline: two batched GEMMs (max of FLOPs at peak and bytes at HBM bandwidth), softmax and dropout
    (bytes at HBM bandwidth), over the full 1024 x 1024 score matrix of 2 heads, head dim 64."""
    hw, roof = get_gpu("A100-SXM-80G"), as_model("roofline")
    peak, bw = hw.peak_flops("bf16"), hw.hbm_bw
    gemm_flops = 2 * 2 * 1024 * 1024 * 64  # per GEMM: 2 heads x 1024 x 1024 x 64 multiply-adds
    gemm_bytes = 2 * (1024 * 64 + 64 * 1024 + 1024 * 1024) * 2  # Q, K (or P, V) read, S (or O) written, bf16
    scores = 2 * 1024 * 1024
    want = 2 * max(gemm_flops / peak, gemm_bytes / bw) + 2 * scores * 2 / bw + 2.5 * scores * 2 / bw
    op = Attention("a", 1, 2, 2, 1024, 1024, 64, "bf16", True, False, False, "unfused", True)
    assert time(op, hw, roof) == pytest.approx(want, rel=1e-12)
    parts = unfused_breakdown(1, 2, 1024, 1024, 64, False, True, hw, roof, price=time)
    assert [k for k, _ in parts] == ["bmm 1024x1024x64 x2", "bmm 1024x64x1024 x2", "softmax", "dropout"]
    assert sum(t for _, t in parts) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("backward", [False, True])
def test_unfused_time_is_the_sum_of_its_parts_without_a_measured_class(backward):
    hw = get_gpu("A100-SXM-80G")
    parts = unfused_breakdown(2, 16, 2048, 2048, 128, backward, True, hw, EFF, price=time)
    gemms, mems = unfused_parts(2, 16, 2048, 2048, 128, backward, True)
    assert len(parts) == len(gemms) + len(mems) == (6 if backward else 4)
    assert time(_att("unfused", 2048, backward, True, batch=2, heads=16), hw, EFF) == pytest.approx(
        sum(t for _, t in parts), rel=1e-12)


@pytest.mark.parametrize("gpu", ["H200-SXM", "H100-SXM"])
@pytest.mark.parametrize("backward", [False, True])
def test_unfused_uses_the_measured_class_where_there_is_one(gpu, backward):
    from c3kit.cost.opclass import calibration_for, unfused_features

    hw = get_gpu(gpu)
    cal = calibration_for(hw, "attention")
    m = cal.cal.unfused["bwd" if backward else "fwd"]
    f = unfused_features(2, 16, 2048, 2048, 128, backward, hw.l2_bytes, cal.cal.l2_edge)
    scale = [1 / cal.flops_ratio] + [1 / cal.bw_ratio] * 4
    want = m.fixed_s + sum(c * x * k for c, x, k in zip(m.coefs, f, scale))
    assert time(_att("unfused", 2048, backward, True, batch=2, heads=16), hw, EFF) == pytest.approx(want, rel=1e-12)


def test_unfused_features_by_hand():
    from c3kit.cost.opclass import L2Edge, unfused_features

    # 2 x 4 heads x 4096^2 scores, d64: 134M scores, 268 MB (past a 60 MB L2: all from HBM by the hinge); rows of 4096
    # (> 2048: the block softmax); the 16.8 MB mask fits the L2 (hinge: 0 from HBM)
    f = unfused_features(2, 4, 4096, 4096, 64, False, 60e6)
    s = 2 * 4 * 4096 * 4096
    assert list(f) == [4.0 * s * 64, s, s, s, 0.0]
    assert unfused_features(2, 4, 4096, 4096, 64, True, 60e6)[0] == 8.0 * s * 64
    # 1 x 1 x 8192^2: a 67 MB mask (past the L2), rows of 8192; 1 x 1 x 1024^2: 2 MB of scores in L2, rows of 1024
    assert list(unfused_features(1, 1, 8192, 8192, 64, False, 60e6)[2:]) == [8192 ** 2] * 3
    assert list(unfused_features(1, 1, 1024, 1024, 64, False, 60e6)[2:]) == [0.0, 0.0, 0.0]
    # with an edge: the share past it; without an L2: no L2 columns (the long rows stay)
    e = L2Edge(0.5, 0.2)
    assert unfused_features(1, 1, 4096, 4096, 64, False, 60e6, e)[2] == pytest.approx(
        4096 ** 2 / (1 + (2.0 * 4096 ** 2 / 30e6) ** (-1 / 0.2)))
    assert list(unfused_features(1, 1, 8192, 8192, 64, False)[2:]) == [0.0, 8192 ** 2, 0.0]


@pytest.mark.parametrize("gpu", ["H200-SXM", "H100-SXM"])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("hd", [64, 128])
def test_unfused_class_is_monotone_in_seq(gpu, backward, hd):
    hw = get_gpu(gpu)
    ts = [time(_att("unfused", s, backward, True, batch=1, heads=16, hd=hd), hw, EFF)
          for s in (256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 16384)]
    assert all(b > a for a, b in zip(ts, ts[1:]))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["H200-SXM", "H100-SXM"]), st.booleans(), st.integers(1, 8), st.integers(1, 64),
       st.sampled_from([64, 96, 128, 160]), st.integers(64, 32768), st.integers(1, 4096))
def test_unfused_class_grows_with_seq_and_batch(gpu, backward, batch, heads, hd, s, ds):
    hw = get_gpu(gpu)
    t = time(_att("unfused", s, backward, False, batch=batch, heads=heads, kv_heads=heads, hd=hd), hw, EFF)
    assert time(_att("unfused", s + ds, backward, False, batch=batch, heads=heads, kv_heads=heads, hd=hd), hw,
                EFF) > t > 0
    assert time(_att("unfused", s, backward, False, batch=batch + 1, heads=heads, kv_heads=heads, hd=hd), hw, EFF) > t


def test_unfused_split_is_the_fixed_attention_rule():
    import json

    from c3kit.cost.opclass import (UNFUSED_BWD_MIN_SCORES, family_rows, gpu_time_unfused_rows, is_held_out_attention,
                                    op_calibration, ops_file)

    # the rule reads sizes only: bit lengths of kv_len, heads, batch sum to a multiple of 3
    r = {"pass": "fwd", "batch": 1, "heads": 8, "q_len": 512, "kv_len": 512}
    assert is_held_out_attention(r)  # 10 + 4 + 1 = 15
    assert not is_held_out_attention({**r, "heads": 16})  # 10 + 5 + 1 = 16
    small = {"backend": "unfused", "pass": "bwd", "batch": 1, "heads": 8, "q_len": 2048, "kv_len": 2048, "time_s": 1e-3}
    big = {**small, "batch": 2}
    assert 8 * 2048 ** 2 < UNFUSED_BWD_MIN_SCORES <= 16 * 2048 ** 2
    assert gpu_time_unfused_rows([small, big, {**small, "pass": "fwd"}]) == [big, {**small, "pass": "fwd"}]
    # the shipped class is fitted on the fit split alone: rows that time kernels, none held out
    rows = family_rows("attn_backends", json.loads(ops_file("H200-SXM", "attn_backends").read_text()))
    fit = [r for r in gpu_time_unfused_rows(rows) if not is_held_out_attention(r)]
    cal = op_calibration("H200-SXM")
    for ps in ("fwd", "bwd"):
        assert cal.unfused[ps].n_rows == sum(r["pass"] == ps for r in fit) < sum(
            r["pass"] == ps for r in rows if r.get("backend") == "unfused")


def test_fit_unfused_recovers_its_coefficients():
    from c3kit.cost.opclass import fit_unfused, unfused_features

    rows = []
    shapes = [(1, 8, 1024, 64), (4, 16, 2048, 128), (1, 32, 4096, 64), (2, 12, 8192, 128), (1, 8, 512, 128),
              (4, 48, 1024, 64), (1, 16, 16384, 128), (1, 4, 512, 64), (2, 8, 4096, 128), (1, 2, 8192, 64)]
    coefs = np.array([1 / 5e14, 4e-12, 2e-12, 1.5e-12, 1e-12])
    for b, h, s, hd in shapes:
        f = unfused_features(b, h, s, s, hd, False, 60e6)
        rows.append({"backend": "unfused", "pass": "fwd", "batch": b, "heads": h, "kv_heads": h, "q_len": s,
                     "kv_len": s, "head_dim": hd, "causal": 1, "time_s": 3e-6 + f @ coefs})
    m = fit_unfused(rows, hold_out=False, l2_bytes=60e6)["fwd"]
    assert m.fixed_s == pytest.approx(3e-6, rel=1e-6)
    assert m.coefs == pytest.approx(tuple(coefs), rel=1e-6)


def test_unfused_backward_has_four_gemms_of_the_forward_size():
    gemms, mems = unfused_parts(1, 4, 512, 512, 64, True, False)
    assert len(gemms) == 4 and all(2 * g * m * n * k == 2 * 4 * 512 * 512 * 64 for g, m, n, k in gemms)
    assert [k for k, _, _ in mems] == ["softmax.bwd"]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(BACKENDS), st.sampled_from(["H200-SXM", "H100-SXM", "A100-SXM-80G"]), st.booleans(),
       st.integers(9, 15))
def test_every_backend_is_monotonic_in_sequence_length(backend, gpu, backward, log2s):
    hw = get_gpu(gpu)
    s = 2 ** log2s
    assert time(_att(backend, 2 * s, backward), hw, EFF) > time(_att(backend, s, backward), hw, EFF) > 0


def test_measured_backends_differ_on_the_h200_as_measured():
    """cuDNN is the fastest measured kernel on the H200, flash2 next, efficient slowest (the rows' rates)."""
    hw = get_gpu("H200-SXM")
    t = {b: time(_att(b, 8192), hw, EFF) for b in ("cudnn", "flash2", "efficient")}
    assert t["cudnn"] < t["flash2"] < t["efficient"]
    assert time(_att("", 8192), hw, EFF) == t["cudnn"]  # the H200's default


def test_h100_takes_the_h200_classes_per_backend():
    for b in ("cudnn", "flash2", "efficient"):
        assert time(_att(b), get_gpu("H100-SXM"), EFF) == pytest.approx(time(_att(b), get_gpu("H200-SXM"), EFF))


def test_default_backend_per_gpu():
    assert default_backend("H200-SXM") == default_backend("H100-SXM") == default_backend("B200") == "cudnn"
    assert default_backend("A100-SXM-80G") == "flash2"
    assert default_backend("MI250X") == "flash2"  # not listed: PyTorch's priority order puts flash first
    assert resolve_backend("", "H200-SXM") == "cudnn" and resolve_backend("unfused", "H200-SXM") == "unfused"


def test_basis_per_backend():
    assert attention_basis("H200-SXM") == {
        "cudnn": "measured", "flash2": "measured", "efficient": "measured", "unfused": "measured",
        "flash1": "measured flash2 x published flash1/flash2 rate ratio of A100-SXM-80G"}
    h100 = attention_basis("H100-SXM")
    assert h100["flash2"] == "transferred from H200-SXM"
    a100 = attention_basis("A100-SXM-80G")
    # A100: FlashAttention-2's published figures price flash2 only (cost/published.py); the rest is datasheet
    assert a100["cudnn"] == a100["efficient"] == "datasheet"
    assert a100["flash2"] == a100["flash1"] == "published microbenchmark"
    # H100: flash1 from FlashAttention (v1)'s own H100 bars, beside the transferred measured backends
    assert h100["flash1"] == "published microbenchmark" and h100["cudnn"] == "transferred from H200-SXM"
    assert attention_basis("MI250X")["flash1"] == attention_basis("MI250X")["flash2"] == "datasheet"
    assert a100["unfused"] == "batched GEMMs: published microbenchmark; softmax/dropout: published microbenchmark"
    e = explain(_att("flash2"), get_gpu("H100-SXM"), EFF)
    assert e.method == "attention-flash2" and e.detail["basis"] == "transferred from H200-SXM"


def test_bad_backend_is_refused_everywhere():
    with pytest.raises(WorkloadError, match="unknown attention backend 'flash3'"):
        _att("flash3")
    from c3kit.workload.layer import Structure
    from c3kit.workload.model import get_model
    from c3kit.workload.parallel import Parallelism

    with pytest.raises(C3kitError):
        Structure.of(get_model("llama-3-8b"), Parallelism(), "train", "sdpa")


def test_the_layer_description_carries_the_backend():
    from c3kit.workload.graph import build_step
    from c3kit.workload.model import get_model
    from c3kit.workload.parallel import Parallelism

    m, p = get_model("llama-3-8b"), Parallelism(tp=2, micro_batch=1, global_batch=4, dp=1)
    g = build_step(m, p, "train", 4096, attn_backend="unfused")
    atts = [n.op for n in g.nodes if isinstance(n.op, Attention)]
    assert atts and all(a.backend == "unfused" for a in atts)
    assert all(a.backend == "" for a in (n.op for n in build_step(m, p, "train", 4096).nodes)
               if isinstance(a, Attention))


def test_memory_proxy_prices_softmax_with_rmsnorm_coefficients_and_its_own_bytes():
    from c3kit.cost.opclass import FeatureCost, OpCalibration, ScaledCalibration

    norm = FeatureCost(2e-6, (1 / 3e12, 1e-9, 0.0))
    cal = ScaledCalibration(OpCalibration("X", {"rmsnorm": norm}, {}, None, 1e-6, 7e-6, {}, 1e18), 1.0, 1.0, 1e18)
    n, w = 1 << 20, 2048
    assert cal.kind_time("softmax", n, w) == pytest.approx(2e-6 + 2 * n * 2 / 3e12 + w * 1e-9)
    assert cal.kind_time("dropout", n, w) is None  # its proxy (residual_add) is not in this calibration


def test_fit_attention_per_backend_and_sparse_flops_only():
    from c3kit.cost.opclass import attention_flops, fit_attention

    rows = []
    for s in (512, 1024, 2048, 8192, 32768, 65536):
        w = attention_flops(1, 8, s, s, 128, True, False)
        rows.append({"backend": "flash", "pass": "fwd", "batch": 1, "heads": 8, "kv_heads": 8, "q_len": s,
                     "kv_len": s, "head_dim": 128, "causal": 1, "time_s": 2e-5 + w / 3e14})
    for s in (1024, 4096, 16384):
        w = attention_flops(2, 8, s, s, 64, True, True)
        rows.append({"backend": "efficient", "pass": "bwd", "batch": 2, "heads": 8, "kv_heads": 8, "q_len": s,
                     "kv_len": s, "head_dim": 64, "causal": 1, "time_s": 5e-5 + w / 1e14})
    att, _ = fit_attention(rows, hold_out=False)
    assert att[("flash2", "fwd", 128)].rate == pytest.approx(3e14, rel=1e-6)
    eff = att[("efficient", "bwd", 64)]
    assert eff.coefs[1:] == (0.0, 0.0) and eff.rate == pytest.approx(1e14, rel=1e-6)
    assert eff.fixed_s == pytest.approx(5e-5, rel=1e-6)


def test_fused_datasheet_roofline_on_the_a100():
    from c3kit.cost.roofline import roofline_time

    op, hw = _att("cudnn"), get_gpu("A100-SXM-80G")
    assert time(op, hw, EFF) == roofline_time(op, hw, EFF.attn_eff, EFF.mem_eff)
    # flash2 runs at FlashAttention-2's published A100 rate: causal, head dim 128, 4k tokens = 173 TFLOP/s
    op = _att("flash2")
    assert time(op, hw, EFF) == pytest.approx(op.flops / 173e12, rel=1e-12)
    assert np.isfinite(time(_att("unfused", dropout=True), hw, EFF))


def test_context_parallel_chunks_are_ring_steps_of_the_backend():
    """cp ring steps: the own chunk causally, then cp - 1 steps of the busiest rank, each the slower of a half-query
    step over a whole chunk and a whole-query step over half a chunk (workload.cp_torch.sdpa_calls); the work of
    one rank is 1 / cp of the whole sequence's, so cp x the chunk time stays near the unsplit time."""
    from c3kit.cost.opclass import calibration_for

    hw, S = get_gpu("H200-SXM"), 65536
    cal = calibration_for(hw, "attention")
    whole = time(Attention("a", 1, 32, 8, S, S, 128, "bf16", True, False, False, "flash2"), hw, EFF)
    for cp in (2, 4, 8):
        q = S // cp
        op = Attention("a", 1, 32, 8, q, S, 128, "bf16", True, True, True, "flash2")
        half_q = cal.attention_time(1, 32, 8, q // 2, q, 128, False, True, 2.0, "flash2")
        half_kv = cal.attention_time(1, 32, 8, q, q // 2, 128, False, True, 2.0, "flash2")
        assert half_kv != half_q
        want = cal.attention_time(1, 32, 8, q, q, 128, True, True, 2.0, "flash2") + (cp - 1) * max(half_q, half_kv)
        assert time(op, hw, EFF) == pytest.approx(float(want), rel=1e-12)
        fwd = time(Attention("a", 1, 32, 8, q, S, 128, "bf16", True, False, True, "flash2"), hw, EFF)
        assert cp * fwd == pytest.approx(whole, rel=0.05)


def test_cost_time_prices_a_flash2_forward_by_its_makespan_class():
    from c3kit.cost.opclass import attention_features, op_calibration

    hw = get_gpu("H200-SXM")
    cal = op_calibration("H200-SXM")
    m = cal.attention_model(False, 128, "flash2")
    op = Attention("a", 1, 8, 8, 4096, 4096, 128, "bf16", True, False, False, "flash2")
    want = m.fixed_s + attention_features(1, 8, 8, 4096, 4096, 128, True, False, hw.sms) @ np.asarray(m.coefs)
    assert time(op, hw, EFF) == pytest.approx(float(want), rel=1e-12)
    # one more head appends CTAs at the end of the launch order: never sooner
    assert time(Attention("a", 1, 9, 9, 4096, 4096, 128, "bf16", True, False, False, "flash2"), hw, EFF) >= time(
        op, hw, EFF)


def _fwd_bwd_rate(backend, gpu, hd, causal, s):
    """FlashAttention-2's benchmark layout (16k tokens, hidden 2048): forward + backward TFLOP/s under EFF."""
    h, hw = 2048 // hd, get_gpu(gpu)
    f = Attention("a", 16384 // s, h, h, s, s, hd, causal=causal, backend=backend)
    b = Attention("a", 16384 // s, h, h, s, s, hd, causal=causal, backward=True, backend=backend)
    return (f.flops + b.flops) / (time(f, hw, EFF) + time(b, hw, EFF)) / 1e12


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["A100-SXM-80G", "H100-SXM", "H200-SXM", "B200"]), st.sampled_from([64, 128]), st.booleans(),
       st.integers(9, 15), st.integers(0, 2))
def test_flash1_is_slower_than_flash2_on_the_same_shape(gpu, hd, causal, log2s, b):
    """Forward + backward, as the published rows time them (published rows price both passes at that one rate, so
    on the H100 at 512 tokens flash1's backward alone can undercut the measured flash2 class's slower backward)."""
    s = 2 ** log2s
    h = 2048 // hd
    one = lambda k, bwd: time(Attention("a", b + max(1, 16384 // s), h, h, s, s, hd, causal=causal, backward=bwd,  # noqa: E731
                                        backend=k), get_gpu(gpu), EFF)
    assert one("flash1", False) + one("flash1", True) > one("flash2", False) + one("flash2", True)


def test_flash1_on_the_a100_and_h100_is_their_published_figure():
    """A100 and H100: FlashAttention (v1)'s published bars (causal, head dim 128 at 8k: 80 and 135 TFLOP/s)."""
    assert _fwd_bwd_rate("flash1", "A100-SXM-80G", 128, True, 8192) == pytest.approx(80.0, rel=1e-9)
    assert _fwd_bwd_rate("flash1", "H100-SXM", 128, True, 8192) == pytest.approx(135.0, rel=1e-9)
    assert _fwd_bwd_rate("flash1", "H100-SXM", 64, False, 512) == pytest.approx(157.0, rel=1e-9)


def test_flash1_by_rate_ratio_hand_checked():
    """H200 (no flash1 rows): its measured flash2 time x 182 / 80, the A100 figure's FlashAttention-2 over
    FlashAttention (v1) rate at head dim 128, causal, 8k; interpolated in log length between published lengths."""
    from c3kit.cost.attention import rate_ratio, ratio_transfer

    hw = get_gpu("H200-SXM")
    assert ratio_transfer("flash1", "H200-SXM") == ("flash2", "A100-SXM-80G")
    assert ratio_transfer("flash1", "H100-SXM") is None  # its own published rows
    assert ratio_transfer("flash1", "MI250X") is None  # flash2 itself on the datasheet there
    assert ratio_transfer("flash2", "H200-SXM") is None
    for backward in (False, True):
        assert time(_att("flash1", 8192, backward), hw, EFF) == pytest.approx(
            time(_att("flash2", 8192, backward), hw, EFF) * 182 / 80, rel=1e-12)
    w = 0.5  # 1448 sits halfway between 1024 and 2048 in log length (to 1e-4)
    want = (133 * (1 - w) + 155 * w) / (62 * (1 - w) + 69 * w)
    assert rate_ratio("flash1", "H200-SXM", 128, True, 1448) == pytest.approx(want, rel=1e-3)
    assert time(_att("flash1", 4096), hw, "roofline") == time(_att("flash2", 4096), hw, "roofline")


def test_the_h100_figure_agrees_with_the_a100_ratio_transfer():
    """A check of the rate-ratio transfer: the H100's measured (transferred) flash2 x the A100 figure's ratio lands
    within 0.8-1.1x of FlashAttention (v1)'s own H100 bars from 2k tokens on (below, where the measured flash2 class
    runs further under the figure's FlashAttention-2 bars, down to 0.58x at 512)."""
    from c3kit.cost import published as pub
    from c3kit.cost.attention import rate_ratio

    for a in pub.published_ops("H100-SXM").attention:
        if a.backends != ("flash1",) or a.seq < 2048:
            continue
        moved = _fwd_bwd_rate("flash2", "H100-SXM", a.head_dim, a.causal, a.seq) / rate_ratio(
            "flash1", "H100-SXM", a.head_dim, a.causal, a.seq)
        assert 0.8 < moved / a.tflops < 1.1, (a.head_dim, a.causal, a.seq, moved)


@pytest.mark.parametrize("gpu", ["A100-SXM-80G", "H100-SXM", "H200-SXM"])
def test_flash1_layer_rows_match_the_per_op_price(gpu):
    """The vectorized layer path (attention_rows) prices flash1 as cost.time does, own rows or by ratio."""
    from c3kit.cost.attention import attention_rows
    from c3kit.workload.layer import AttnShape

    hw = get_gpu(gpu)
    for backward in (False, True):
        shape = AttnShape(batch=np.array([2, 1]), heads=16, kv_heads=16, q_len=np.array([2048, 8192]),
                          kv_len=np.array([2048, 8192]), head_dim=128, causal=True, backward=backward,
                          backend="flash1")
        rows = attention_rows(shape, hw, EFF, 2, price=time)
        want = [time(Attention("a", b, 16, 16, s, s, 128, causal=True, backward=backward, backend="flash1"), hw, EFF)
                for b, s in ((2, 2048), (1, 8192))]
        assert rows == pytest.approx(want, rel=1e-9)
