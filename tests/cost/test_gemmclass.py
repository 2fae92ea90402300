"""GEMM op classes fitted to the measured ops-gemm rows (cost/gemmclass.py): exact values, monotonicity,
the fits' held-out rows, basis labels and how cost.time uses them."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from c3kit import cost
from c3kit.cost import gemmclass as gc
from c3kit.cost.basis import basis
from c3kit.cost.default_curve import bf16_curve_for, default_curve_for, fp8_fraction
from c3kit.cost.efficiency import DEFAULT_PEAK_FRAC
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
    wg = gc.wgrad_rows(pairs, cal.grouped)
    assert cal.grouped_wgrad.n_rows == sum(not gc.is_held_out_grouped(r) for r in wg) >= 8
    assert 0.5 < fp8_fraction("H200-SXM") < 1.0 and fp8_fraction("B200") is None
    assert cal.cast.n_rows == 8 and cal.cast.fixed_s > 0 and cal.cast.coefs[0] > 0
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
    for model in (cal.small_m, cal.grouped):
        t = model(m, n, k, g)
        assert model(m + 16, n, k, g) >= t and model(m, 2 * n, k, g) > t
        assert model(m, n, 2 * k, g) > t and model(m, n, k, 2 * g) > t


def test_basis_labels_of_the_gemm_classes():
    assert all(basis("H200-SXM")[c] == "measured" for c in CLASSES)
    assert all(basis("H100-SXM")[c] == "transferred from H200-SXM" for c in CLASSES)
    # published rows (cost/data/published_ops): B200 and MI300X FP8 GEMM figures, A100 and MI300X STREAM
    # bandwidth (which prices the FP8 cast kernels); the grouped and small-M classes are the H200's only
    published = {"B200": {"gemm_fp8"}, "A100-SXM-80G": {"fp8_cast"}, "MI300X": {"gemm_fp8", "fp8_cast"}}
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
    assert cost.time(grouped, H200, "efficiency") == pytest.approx(cls.grouped(512, 1536, 2048, 16), rel=1e-12)
    est = cost.explain(grouped, H200, "efficiency")
    assert est.method == "gemm_grouped" and est.detail["basis"] == "measured"
    small = Gemm("d", 8, 4096, 4096)
    assert cost.time(small, H200, "efficiency") == pytest.approx(cls.small_m(8, 4096, 4096), rel=1e-12)
    assert cost.explain(small, H100, "efficiency").detail["basis"] == "transferred from H200-SXM"
    # FP8 grouped: the BF16 class x the curve's FP8 : BF16 ratio at the same rows
    curve = default_curve_for(H200)[0]
    f8 = Gemm("e8", 512, 1536, 2048, "fp8", 16)
    ratio = curve.gemm_time(512 * 16, 1536, 2048, "fp8", H200) / curve.gemm_time(512 * 16, 1536, 2048, "bf16", H200)
    assert cost.time(f8, H200, "efficiency") == pytest.approx(cls.grouped(512, 1536, 2048, 16) * ratio, rel=1e-12)
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
    assert len(errs["gemm small-M"]) == 30 and len(errs["gemm fp8 (_scaled_mm)"]) == 4
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
    flat = gc.StreamingGemm(1e-4, 1e18, 0.0, 1e18, 1.0, 1.0)  # prices every GEMM at 100 us
    (w,) = gc.wgrad_rows(pairs, flat)
    assert (w["m"], w["n"], w["k"], w["groups"]) == (2048, 1536, 2048, 16)
    assert w["time_s"] == pytest.approx(1.2e-3 - 3e-4 - 1e-4, rel=1e-3)
    slow = gc.StreamingGemm(1e-3, 1e18, 0.0, 1e18, 1.0, 1.0)  # a dgrad priced above the remainder: no wgrad row
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
    assert cost.time(dg, hw, "efficiency") == pytest.approx(cls.grouped(256, 2048, 1536, 128), rel=1e-12)



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
