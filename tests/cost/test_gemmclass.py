"""GEMM op classes fitted to the measured ops-gemm rows (cost/gemmclass.py): exact values, monotonicity,
the fits' held-out rows, basis labels and how cost.time uses them."""

import math
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from c3kit import cost
from c3kit.cost import gemmclass as gc
from c3kit.cost.basis import basis, basis_sources
from c3kit.cost.default_curve import bf16_curve_for, default_curve_for, fp8_fraction
from c3kit.cost.efficiency import DEFAULT_PEAK_FRAC
from c3kit.cost.fp8gemm import fp8_class_for, fp8_classes, fp8_over_bf16
from c3kit.hw import get_gpu
from c3kit.workload.ops import Gemm

H200, H100, B200 = get_gpu("H200-SXM"), get_gpu("H100-SXM"), get_gpu("B200")
CLASSES = ("gemm_small_m", "gemm_grouped", "gemm_fp8", "fp8_cast")


def test_streaming_gemm_hand_checked():
    # p = 1 adds the two terms: t_mem = (1e6 + 1e3 + 1e3) x 2 B / 1e12 B/s = 2.004 us, t_math = 2 x 16 x 1e6 / 1e15
    g = gc.StreamingGemm(fixed_s=1e-6, bw=1e12, n_half=0.0, peak=1e15, tile_m=16, p=1.0)
    assert g(1, 1000, 1000) == pytest.approx(1e-6 + 2.004e-6 + 3.2e-8, rel=1e-12)
    # n_half = N halves the bandwidth; two groups double both terms
    h = gc.StreamingGemm(fixed_s=0.0, bw=1e12, n_half=1000.0, peak=1e15, tile_m=16, p=1.0)
    assert h(1, 1000, 1000, groups=2) == pytest.approx(2 * (2 * 2.004e-6 + 3.2e-8), rel=1e-12)
    # a huge p is the max of the two terms
    m = gc.StreamingGemm(fixed_s=0.0, bw=1e12, n_half=0.0, peak=1e15, tile_m=16, p=200.0)
    assert m(1, 1000, 1000) == pytest.approx(2.004e-6, rel=1e-3)


def test_covers_is_a_factor_two_below_the_measured_rows():
    g = gc.StreamingGemm(0.0, 1e12, 0.0, 1e15, 16, 2.0, 10, 1024.0)
    assert g.covers(512, 4096) and not g.covers(511, 4096) and not g.covers(4096, 64)


def test_h200_classes_are_fitted_from_its_rows():
    cal = gc.gemm_calibration("H200-SXM")
    assert cal is not None and cal.origin == "h200-sxm-ops-gemm.json"
    # fitted on the cold-weight rows: 12 (N, K) shapes x 10 M, the 3 held-out shapes left out
    assert gc.small_m_kind(gc.gemm_rows("H200-SXM")) == "small_m_cold" and cal.small_m.n_rows == 90
    rows = gc.gemm_rows("H200-SXM")
    # the grouped class: the gemm family's grouped_mm rows and the MoE layers' forwards (moe_train), held out alike
    pairs = gc.moe_train_pairs(gc.gemm_rows("H200-SXM", ("moe_train",)))
    grouped_rows = [r for r in rows if r["kind"] == "grouped_mm"] + [f for f, _ in pairs]
    held = sum(gc.is_held_out_grouped(r) for r in grouped_rows)
    assert len(pairs) == 36 and cal.grouped.n_rows == len(grouped_rows) - held and held > 0
    # the wgrad class: the moe_grad rows (CUDA graph), held out by the same rule
    wg = gc.graph_wgrad_rows(gc.moe_grad_parts(gc.gemm_rows("H200-SXM", ("moe_grad",))))
    assert cal.grouped_wgrad.n_rows == sum(not gc.is_held_out_grouped(r) for r in wg) >= 8
    assert 0.5 < fp8_fraction("H200-SXM") < 1.0 and fp8_fraction("B200") is None
    assert cal.cast.n_rows == 20 and cal.cast.fixed_s > 0 and cal.cast.coefs[0] > 0
    assert gc.gemm_calibration("B200") is None


def test_fits_leave_held_out_rows_out():
    rows = gc.gemm_rows("H200-SXM")
    a, b = gc.fit_small_m(rows), gc.fit_small_m(rows, hold_out=False)
    assert a.n_rows == 90 and b.n_rows == 120
    assert gc.fit_cast(rows, hold_out=False).n_rows == 12


def test_cast_time_hand_checked():
    c = gc.gemm_calibration("H200-SXM").cast
    s = gc.gemm_classes_for(H200)
    assert s.cast_time(1e6) == pytest.approx(c.fixed_s + c.coefs[0] * 1e6, rel=1e-12)
    # the H100 borrows the H200's cast kernels, slower by the HBM bandwidth ratio
    s100 = gc.gemm_classes_for(H100)
    assert s100.cast_s_per_element == pytest.approx(c.coefs[0] * H200.hbm_bw / H100.hbm_bw, rel=1e-12)
    assert gc.gemm_classes_for(B200).cast_time(1e6) is None


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 512), n=st.sampled_from([1024, 2048, 4096, 8192]), k=st.sampled_from([1024, 4096, 8192]),
       g=st.sampled_from([1, 4, 16]))
def test_classes_grow_with_size(m, n, k, g):
    cal = gc.gemm_calibration("H200-SXM")
    t = cal.small_m(m, n, k, g)
    assert cal.small_m(m + 16, n, k, g) >= t and cal.small_m(m, 2 * n, k, g) > t
    assert cal.small_m(m, n, 2 * k, g) > t and cal.small_m(m, n, k, 2 * g) > t
    # the grouped class: a longer K loop always costs more; more rows, columns or groups never cost less (inside
    # one wave of tiles the math term can hide a longer stream entirely)
    for routed in (False, True):
        t = cal.grouped(m, n, k, g, routed=routed)
        assert cal.grouped(m, n, 2 * k, g, routed=routed) > t
        assert min(cal.grouped(m + 16, n, k, g, routed=routed), cal.grouped(m, 2 * n, k, g, routed=routed),
                   cal.grouped(m, n, k, 2 * g, routed=routed)) >= t


def test_basis_labels_of_the_gemm_classes():
    assert all(basis("H200-SXM")[c] == "measured" for c in CLASSES)
    assert all(basis("H100-SXM")[c] == "transferred from H200-SXM" for c in CLASSES)
    # published rows (cost/data/published_ops): B200 and MI300X FP8 GEMM figures, A100, B200 and MI300X STREAM-like
    # bandwidth (which prices the FP8 cast kernels); the grouped and small-M classes are the H200's only
    published = {"B200": {"gemm_fp8", "fp8_cast"}, "A100-SXM-80G": {"fp8_cast"}, "MI300X": {"gemm_fp8", "fp8_cast"}}
    for name, pub in published.items():
        assert {c for c in CLASSES if basis(name)[c] == "published microbenchmark"} == pub
        assert all(basis(name)[c] == "datasheet" for c in CLASSES if c not in pub)


def test_fp8_fraction_reaches_the_default_curve():
    frac = fp8_fraction("H200-SXM")
    for gpu in (H200, H100):
        curve, origin = default_curve_for(gpu)
        assert curve.frac("fp8") == pytest.approx(frac) and origin.endswith("+fp8:H200-SXM")
        assert curve.frac("bf16") == bf16_curve_for(gpu)[0].frac("bf16")
    assert default_curve_for(get_gpu("MI325X"))[0].frac("fp8") == DEFAULT_PEAK_FRAC["fp8"]  # no FP8 figure published


def test_cost_time_uses_the_classes():
    cls = gc.gemm_classes_for(H200)
    grouped = Gemm("e", 512, 1536, 2048, "bf16", 16)
    assert cost.time(grouped, H200, "efficiency") == pytest.approx(cls.grouped(512, 1536, 2048, 16, routed=True),
                                                                   rel=1e-12)
    est = cost.explain(grouped, H200, "efficiency")
    assert est.method == "gemm_grouped" and est.detail["basis"] == "measured"
    small = Gemm("d", 8, 4096, 4096)
    assert cost.time(small, H200, "efficiency") == pytest.approx(cls.small_m(8, 4096, 4096), rel=1e-12)
    assert cost.explain(small, H100, "efficiency").detail["basis"] == "transferred from H200-SXM"
    # FP8 grouped: the BF16 class x the FP8 class's FP8 : BF16 ratio at the same rows
    curve = default_curve_for(H200)[0]
    f8 = Gemm("e8", 512, 1536, 2048, "fp8", 16)
    t16 = curve.gemm_time(512 * 16, 1536, 2048, "bf16", H200)
    ratio = fp8_class_for(H200)(512 * 16, 1536, t16) / t16
    assert cost.time(f8, H200, "efficiency") == pytest.approx(cls.grouped(512, 1536, 2048, 16, routed=True) * ratio,
                                                              rel=1e-12)
    # below the FP8 class's rows (K = 64 < 512) the curve's FP8 : BF16 ratio applies instead
    assert fp8_over_bf16(H200, 512 * 16, 1536, 64, 1.0) is None
    # no class on the B200: the curve prices it; roofline never uses the classes
    b = Gemm("e", 512, 1536, 2048, "bf16", 16)
    assert cost.time(b, B200, "efficiency") == pytest.approx(
        default_curve_for(B200)[0].gemm_time(512, 1536, 2048, "bf16", B200, 16), rel=1e-12)
    assert cost.explain(b, H200, "roofline").method == "roofline"
    # far below the measured N and K the big-GEMM curve keeps the GEMM
    assert cost.explain(Gemm("t", 64, 64, 64), H200, "efficiency").method == "efficiency"


def test_held_out_checks_run(load_benchmark):
    mod = load_benchmark("validate_ops")
    errs = mod.gemm_held_out_errors()
    assert len(errs["gemm small-M"]) == 30
    assert len(errs["gemm fp8 tensorwise (_scaled_mm)"]) == len(errs["gemm fp8 rowwise (_scaled_mm)"]) == 10
    assert len(errs["gemm fp8 tensorwise on the ops-gemm rows (out of sample)"]) == 12
    assert len(errs["gemm fp8 tensorwise on the ops-gemm rows held out before (out of sample)"]) == 4
    assert len(errs["gemm fp8 rowwise [before: no rowwise tile rule]"]) == 10
    # the cast: 4 held-out fp8_cast rows, amax / scale / cast at the held-out parts size, 48 ops-fp8 rows no fit reads
    before = errs["fp8 cast [before: a line through the fp8_cast rows]"]
    assert len(errs["fp8 cast (amax+scale+cast)"]) == len(before) == 4
    assert len(errs["fp8 cast parts (fp8_cast_parts: amax, scale, cast)"]) == 3
    assert len(errs["fp8 cast (ops-fp8 cast_tensorwise rows, out of sample)"]) == 48
    assert np.all(np.isfinite(np.concatenate(list(errs.values()))))


def test_small_m_falls_back_to_warm_rows_without_cold_ones():
    rows = [r for r in gc.gemm_rows("H200-SXM") if r["kind"] != "small_m_cold"]
    assert gc.small_m_kind(rows) == "small_m" and gc.fit_small_m(rows).n_rows == 70


def test_moe_train_pairs_and_wgrad_rows_hand_checked():
    rows = [{"kind": "gate_up", "model": "m", "tokens": 4096, "hidden": 2048, "ffn": 768, "experts": 16, "top_k": 8,
             "ep": 8, "pass": p, "time_s": t} for p, t in (("fwd", 3e-4), ("fwd_bwd", 1.2e-3))]
    rows += [{**rows[0], "kind": "down", "time_s": None}]  # a row without a time pairs with nothing
    pairs = gc.moe_train_pairs(rows)
    assert len(pairs) == 1
    f, fb = pairs[0]
    # 4096 tokens x top-8 over 16 local experts: 2048 rows each; gate+up: N = 2 x 768, K = 2048
    assert (f["m"], f["n"], f["k"], f["groups"]) == (2048, 1536, 2048, 16) and fb["time_s"] == 1.2e-3
    flat = gc.TiledGroupedGemm(1e-4, 1e18, 1e18, 0.0, 1.0, 132)  # prices every GEMM at 100 us
    (w,) = gc.wgrad_rows(pairs, flat)
    assert (w["m"], w["n"], w["k"], w["groups"]) == (2048, 1536, 2048, 16)
    assert w["time_s"] == pytest.approx(1.2e-3 - 3e-4 - 1e-4, rel=1e-3)
    slow = gc.TiledGroupedGemm(1e-3, 1e18, 1e18, 0.0, 1.0, 132)  # a dgrad priced above the remainder: no wgrad row
    assert gc.wgrad_rows(pairs, slow) == []


def test_expert_wgrad_takes_the_wgrad_class():
    from c3kit import cost
    from c3kit.hw.catalog import get_gpu
    from c3kit.workload.ops import Gemm

    hw = get_gpu("H200-SXM")
    cls = gc.gemm_classes_for(hw)
    wg = Gemm("expert_fc1.wgrad", 2048, 1536, 256, "bf16", 128)
    assert cost.time(wg, hw, "efficiency") == pytest.approx(cls.grouped_wgrad(2048, 1536, 256, 128), rel=1e-12)
    dg = Gemm("expert_fc1.dgrad", 256, 2048, 1536, "bf16", 128)
    assert cost.time(dg, hw, "efficiency") == pytest.approx(cls.grouped(256, 2048, 1536, 128, routed=True), rel=1e-12)



def test_wave_gemm_counts_waves_of_output_tiles_by_hand():
    # 128 groups of 2048 x 1536 outputs: 16 x 12 tiles of 128 x 128 each, 24576 tiles = ceil(186.2) = 187 waves of 132
    w = gc.WaveGemm(2e-6, 1e-6, 1e-9, 132)
    assert w(2048, 1536, 256, 128) == pytest.approx(2e-6 + 187 * (1e-6 + 1e-9 * 256), rel=1e-12)
    # one tile more than a wave costs a whole second wave
    assert w(128, 128 * 133, 512, 1) - w(128, 128 * 132, 512, 1) == pytest.approx(1e-6 + 1e-9 * 512, rel=1e-9)
    # a GPU with twice the math rate halves the tile times, not the fixed cost
    assert w.scaled(2.0, 1.0)(2048, 1536, 256, 128) == pytest.approx(2e-6 + 187 * (1e-6 + 1e-9 * 256) / 2, rel=1e-12)


def test_fit_wave_recovers_known_tile_costs():
    m, n, k, g = (np.array(v, dtype=float) for v in zip(*[(mm, nn, kk, gg) for mm in (768, 2048) for nn in (1536, 4096)
                                                           for kk in (256, 2048, 8192) for gg in (8, 128)]))
    t = 5e-6 + gc.WaveGemm.features(m, n, k, g, 132) @ np.array([2e-6, 3e-9])
    w = gc.fit_wave(m, n, k, g, t, sms=132)
    assert (w.fixed_s, w.per_tile_s, w.per_k_s) == pytest.approx((5e-6, 2e-6, 3e-9), rel=1e-6)
    assert w.n_rows == len(t) and w.min_nk == 768


def test_expected_row_tiles_by_hand():
    # balanced: groups x ceil(M / tile); one group gets every row whatever the routing
    assert gc.expected_row_tiles(256, 8) == 16.0 and gc.expected_row_tiles(257, 8) == 24.0
    assert gc.expected_row_tiles(8192, 1, routed=True) == 64.0
    # routed: 4 x 64 rows over 4 groups, tiles of 16; exact binomial expectation of sum ceil(X / 16)
    n, p = 256, 0.25
    exact = 4 * sum(math.comb(n, x) * p ** x * (1 - p) ** (n - x) * math.ceil(x / 16) for x in range(n + 1))
    assert gc.expected_row_tiles(64, 4, 16, routed=True) == pytest.approx(exact, rel=5e-3)
    # the spread adds tails: 128 experts of 256 rows on average need about 2.5 tiles each, not 2
    assert gc.expected_row_tiles(256, 128, routed=True) == pytest.approx(128 * 2.49, rel=5e-3)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 4096), g=st.integers(1, 256))
def test_routed_tiles_lie_between_the_rows_and_one_partial_tile_a_group(m, g):
    # sum ceil(X_i / 128) is at least the rows over 128 and below that plus one tile a group, and grows with M
    routed = gc.expected_row_tiles(m, g, routed=True)
    assert g * m / 128 - 1e-6 * g <= routed <= g * m / 128 + g
    assert routed <= gc.expected_row_tiles(m + 128, g, routed=True) + 1e-9


def test_tiled_grouped_gemm_by_hand():
    g = gc.TiledGroupedGemm(fixed_s=1e-6, bw=1e12, tile_rate=1e12, per_tile_s=1e-6, p=1.0, sms=132)
    # 8 groups of 256 x 1024 x 512: (1024 x 512 + 256 x 512 + 256 x 1024) x 2 B x 8 = 14,680,064 B at 1 TB/s;
    # 8 x 2 x 8 = 128 tiles, one wave of 1 us + 2 x 128 x 128 x 512 / 1e12 s; p = 1 adds them
    assert g(256, 1024, 512, 8) == pytest.approx(1e-6 + 14.680064e-6 + 1e-6 + 16.777216e-6, rel=1e-12)
    # 133 tiles take a second wave
    assert g(128, 128 * 133, 512, 1) - g(128, 128 * 132, 512, 1) == pytest.approx(
        1e-6 + 16.777216e-6 + 128 * 512 * 2 / 1e12 + 128 * 128 * 2 / 1e12, rel=1e-9)
    # a GPU with twice the math rate and bandwidth halves both terms, not the fixed cost
    assert g.scaled(2.0, 2.0)(256, 1024, 512, 8) == pytest.approx(1e-6 + (g(256, 1024, 512, 8) - 1e-6) / 2, rel=1e-12)


def test_shipped_grouped_class_prices_routed_experts_above_balanced():
    cal = gc.gemm_calibration("H200-SXM")
    bal, rt = cal.grouped(256, 1536, 2048, 128), cal.grouped(256, 1536, 2048, 128, routed=True)
    assert rt > bal and cal.grouped.n_rows > 40


def test_moe_grad_parts_and_graph_wgrad_rows_hand_checked():
    base = {"kind": "down", "model": "m", "tokens": 4096, "hidden": 2048, "ffn": 768, "experts": 16, "top_k": 8,
            "ep": 8, "routing": "random"}
    times = {"fwd": 2e-4, "fwd_dgrad": 5e-4, "fwd_wgrad": 4.5e-4, "fwd_bwd": 7e-4, "grad_accumulate": 1e-4}
    rows = [{**base, "pass": p, "time_s": t} for p, t in times.items()]
    rows += [{**base, "routing": "balanced", "pass": "fwd", "time_s": 1e-4}]  # incomplete: left out
    (p,) = gc.moe_grad_parts(rows)
    # 4096 x 8 rows over 16 local experts: 2048 each; down: N = hidden, K = ffn
    assert (p["m"], p["n"], p["k"], p["groups"], p["routed"]) == (2048, 2048, 768, 16, True)
    assert p["dgrad"] == pytest.approx(3e-4) and p["wgrad"] == pytest.approx(2.5e-4)
    assert p["both"] == pytest.approx(5e-4) and p["acc"] == 1e-4
    (w,) = gc.graph_wgrad_rows([p])
    assert (w["m"], w["n"], w["k"], w["groups"]) == (768, 2048, 2048, 16) and w["time_s"] == pytest.approx(2.5e-4)
    assert gc.graph_wgrad_rows([{**p, "wgrad": -1e-6}]) == []


def test_shipped_wgrad_class_is_fitted_on_the_graph_rows():
    cal = gc.gemm_calibration("H200-SXM")
    wrows = gc.graph_wgrad_rows(gc.moe_grad_parts(gc.gemm_rows("H200-SXM", ("moe_grad",))))
    fit = [r for r in wrows if not gc.is_held_out_grouped(r)]
    assert len(wrows) == 72 and cal.grouped_wgrad.n_rows == len(fit) < len(wrows)
    # no eager floor in CUDA-graph rows: the fitted fixed part is far below the eager rows' 89 us
    assert cal.grouped_wgrad.fixed_s < 20e-6


def test_fp8_gemm_hand_checked():
    # 1024 x 1024 output: 8 x 8 = 64 tiles of 128 x 128 on 132 SMs, one wave: 1 us + 0.5 x 10 us + 0.2 us
    f = gc.Fp8Gemm(fixed_s=1e-6, ratio=0.5, per_wave_s=2e-7, sms=132)
    assert f(1024, 1024, 1e-5) == pytest.approx(6.2e-6, rel=1e-12)
    # 2048 x 2048: 256 tiles, two waves; 1000 rows pad to 8 tiles like 1024; a batch of 3 x 64 tiles: two waves
    assert f(2048, 2048, 1e-5) == pytest.approx(6.4e-6, rel=1e-12)
    assert f(1000, 1024, 1e-5) == f(1024, 1024, 1e-5) and f.waves(1024, 1024, 3) == 2
    # on a GPU with twice the FP8 peak and twice the FP8 : BF16 ratio: the math part halves, the epilogue too
    g = f.scaled(2.0, 2.0)
    assert (g.ratio, g.per_wave_s, g.fixed_s) == (0.25, 1e-7, 1e-6)


def test_rowwise_wave_factor_hand_checked():
    # 1536^3: ceil(1536 / 128)^2 = 144 clusters > 66 cluster slots, so 128 x 128 tiles: 144 tiles on 132 slots, two
    # waves: q = 2 x 132 / 144
    assert gc.rowwise_wave_factor(1536, 1536, 132) == pytest.approx(264 / 144, rel=1e-12)
    # 1024^2: 64 clusters fit the 66 slots, so 64 x 128 tiles: 16 x 8 = 128 tiles, one wave: q = 132 / 128
    assert gc.rowwise_wave_factor(1024, 1024, 132) == pytest.approx(132 / 128, rel=1e-12)
    # 2048^2: 128 x 128 tiles, 256 of them, two waves of 132
    assert gc.rowwise_wave_factor(2048, 2048, 132) == pytest.approx(264 / 256, rel=1e-12)
    # an exact multiple of the slots has no quantization loss
    assert gc.rowwise_wave_factor(128 * 132, 128, 132) == 1.0
    # the factor multiplies only the math part, and only where the class says its kernel is the rowwise one
    f = gc.Fp8Gemm(fixed_s=1e-6, ratio=0.5, per_wave_s=2e-7, sms=132, rowwise_tiles=True)
    assert f(1536, 1536, 1e-5) == pytest.approx(1e-6 + 0.5 * 264 / 144 * 1e-5 + 2 * 2e-7, rel=1e-12)
    assert gc.Fp8Gemm(1e-6, 0.5, 2e-7, 132)(1536, 1536, 1e-5) == pytest.approx(1e-6 + 0.5e-5 + 4e-7, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 40000), n=st.integers(1, 40000), sms=st.sampled_from([78, 114, 132, 148]))
def test_rowwise_wave_factor_is_at_least_one_and_bounded(m, n, sms):
    q = gc.rowwise_wave_factor(m, n, sms)
    # a partial last wave costs at most a whole wave: q in [1, slots / tiles], and at most 2 beyond one wave
    tiles = math.ceil(m / 128) * math.ceil(n / 128)
    assert 1.0 <= q <= 2 * (sms // 2) and (tiles <= sms // 2 or q < 2.0)


def test_shipped_rowwise_class_uses_the_rowwise_tile_rule():
    c = fp8_classes("H200-SXM")
    assert c["fp8_rowwise"].rowwise_tiles and not c["fp8_tensorwise"].rowwise_tiles
    # with the tile rule the 1536^3 fit row is priced by its waves, not by the fixed cost: the fitted fixed cost is
    # below the per-tensor kernel's
    assert c["fp8_rowwise"].fixed_s < c["fp8_tensorwise"].fixed_s


def test_shipped_fp8_class_prices_fp8_gemms():
    classes = fp8_classes("H200-SXM")
    # 31 shapes of the fp8_mm rows, 10 held out; the math part near the FP8 : BF16 peak ratio (1979 / 989 TFLOP/s)
    assert set(classes) == set(gc.FP8_KINDS)
    for c in classes.values():
        assert c.n_rows == 21 and c.min_mnk == 1024 and 0.45 < c.ratio < 0.6 and c.fixed_s > 0 and c.per_wave_s > 0
    # 8192^3 on the H200: 64 x 64 = 4096 tiles over 132 SMs = 32 waves, the BF16 twin by the calibrated curve
    f = classes["fp8_tensorwise"]
    assert fp8_class_for(H200) == f and fp8_classes("B200") == {}
    t16 = bf16_curve_for(H200)[0].gemm_time(8192, 8192, 8192, "bf16", H200)
    want = f.fixed_s + f.ratio * t16 + 32 * f.per_wave_s
    op = Gemm("x", 8192, 8192, 8192, "fp8")
    assert cost.time(op, H200, "efficiency") == pytest.approx(want, rel=1e-12)
    est = cost.explain(op, H200, "efficiency")
    assert est.method == "gemm_fp8" and est.detail["basis"] == "measured"
    # the H100 (same GH100 die) takes the class unchanged, labelled as transferred; the B200 keeps its published curve
    assert fp8_class_for(H100) == f and fp8_class_for(B200) is None
    assert cost.explain(op, H100, "efficiency").detail["basis"] == "transferred from H200-SXM"
    assert cost.explain(op, B200, "efficiency").method == "efficiency"


@settings(max_examples=40, deadline=None)
@given(m=st.sampled_from([1024, 1536, 4096, 8192, 16384]), n=st.sampled_from([1024, 2560, 4096, 14336]),
       k=st.sampled_from([1024, 2048, 8192, 16384]))
def test_fp8_price_grows_with_size_and_stays_below_bf16(m, n, k):
    t = cost.time(Gemm("x", m, n, k, "fp8"), H200, "efficiency")
    for bigger in ((2 * m, n, k), (m, 2 * n, k), (m, n, 2 * k)):
        assert cost.time(Gemm("x", *bigger, "fp8"), H200, "efficiency") > t
    # every per-tensor FP8 row measured ran faster than its BF16 twin (FP8 / BF16 0.48-0.73)
    assert t < cost.time(Gemm("x", m, n, k, "bf16"), H200, "efficiency")


def test_fp8_held_out_rule_is_a_fixed_hash_of_the_shape():
    rows = gc.gemm_rows("H200-SXM", ("fp8_mm",))
    held = sorted({(r["m"], r["n"], r["k"]) for r in rows if gc.is_held_out_fp8(r)})
    assert held == [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 2304, 16384), (4096, 2560, 8192),
                    (4096, 8192, 4096), (4096, 16384, 6656), (8192, 4096, 4096), (8192, 8192, 3584),
                    (8192, 16384, 2048), (16384, 13312, 16384)]
    # a rule on the shape alone: the row's kind, time and position do not matter
    assert gc.is_held_out_fp8({"m": 1024, "n": 1024, "k": 1024}) and not gc.is_held_out_fp8({"m": 1536, "n": 1536,
                                                                                              "k": 1536})
    curve = bf16_curve_for(H200)[0]
    a, b = gc.fit_fp8_gemm(list(reversed(rows)), curve, H200), fp8_classes("H200-SXM")["fp8_tensorwise"]
    assert (a.fixed_s, a.ratio, a.per_wave_s) == pytest.approx((b.fixed_s, b.ratio, b.per_wave_s), rel=1e-9)
    assert gc.fit_fp8_gemm(rows, curve, H200, hold_out=False).n_rows == 31


def test_fp8_fit_needs_rows_of_its_kind():
    rows = gc.gemm_rows("H200-SXM", ("fp8_mm",))
    curve = bf16_curve_for(H200)[0]
    assert gc.fit_fp8_gemm(rows, curve, H200, kind="fp8_blockwise") is None
    assert gc.fit_fp8_gemm([r for r in rows if r["kind"] != "bf16_mm"], curve, H200) is None  # no BF16 twins
    assert gc.fit_fp8_gemm(rows[:9], curve, H200) is None  # 3 shapes: too few to fit three terms


def test_fp8_basis_cites_the_fp8_mm_file():
    assert basis_sources("H200-SXM")["gemm_fp8"] == "cost/data/calib/h200-sxm-ops-fp8_mm.json"
    assert basis_sources("H100-SXM")["gemm_fp8"].startswith("cost/data/calib/h200-sxm-ops-fp8_mm.json by ")
    assert basis("H100-SXM-96G-500W")["gemm_fp8"] == "datasheet"  # its transfer does not list the FP8 classes
