"""The FP8 cast as the sum of its kernels (cost/fp8cast.py): exact values, monotone in elements, the held-out
rules fixed, and the shipped fit."""

import pytest
from hypothesis import given, settings, strategies as st

from c3kit.cost import fp8cast as fc
from c3kit.cost import gemmclass as gc

PARTS = fc.CastParts(amax_fixed_s=8e-6, amax_s_per_element=1.5e-12, scalar_s=2e-6, cast_fixed_s=2e-6,
                     cast_s_per_element=4e-12, divide_s_per_element=1e-12)


def test_cast_parts_hand_checked():
    # 1M elements: amax 8 + 1.5 = 9.5 us; scale 2 x 2 = 4 us; cast 2 + 4 = 6 us
    assert float(PARTS.amax(1e6)) == pytest.approx(9.5e-6, rel=1e-12)
    assert PARTS.scale() == pytest.approx(4e-6, rel=1e-12)
    assert float(PARTS.cast(1e6)) == pytest.approx(6e-6, rel=1e-12)
    # the unfused composite: amax + 3 scalar kernels + the dividing cast = 8 + 6 + 2 + (1.5 + 4 + 1) us
    assert PARTS.fixed_s == pytest.approx(16e-6, rel=1e-12) and PARTS.s_per_element == pytest.approx(6.5e-12)
    assert float(PARTS.composite(1e6)) == pytest.approx(22.5e-6, rel=1e-12)


@settings(max_examples=50, deadline=None)
@given(a=st.floats(1.0, 1e9), b=st.floats(1.0, 1e9))
def test_cast_monotone_in_elements(a, b):
    lo, hi = sorted((a, b))
    shipped = fc.fit_cast_parts(gc.gemm_rows("H200-SXM", ("fp8_cast_parts",)), gc.cast_rows(gc.gemm_rows("H200-SXM")))
    for p in (PARTS, shipped):
        assert float(p.composite(lo)) <= float(p.composite(hi))
        assert float(p.amax(lo)) <= float(p.amax(hi)) and float(p.cast(lo)) <= float(p.cast(hi))


def test_held_out_rules_are_fixed():
    # parts: every third size in increasing order, whatever the file order
    assert fc.is_held_out_parts_size([1, 4, 16, 64, 256]) == [False, False, True, False, False]
    assert fc.is_held_out_parts_size([256, 16, 16, 1]) == [True, False, False, False]
    assert fc.is_held_out_parts_size([64, 16, 4, 1, 16]) == [False, True, False, False, True]
    # the composite's fp8_cast rows: every third in file order (the split of the line fitted before)
    assert gc.held_out_every_third(list(range(7))) == [False, False, True, False, False, True, False]


def test_shipped_fit_uses_the_fit_rows_only():
    prow = gc.gemm_rows("H200-SXM", ("fp8_cast_parts",))
    cr = gc.cast_rows(gc.gemm_rows("H200-SXM"))
    p = fc.fit_cast_parts(prow, cr)
    # amax, scale and cast at 4 of the 5 sizes (16M held out) and 8 of the 12 fp8_cast rows
    assert p.n_rows == 3 * 4 + 8 and fc.fit_cast_parts(prow, cr, hold_out=False).n_rows == 3 * 5 + 12
    # the held-out rows do not move the fit
    g = fc.graph_part_rows(prow)
    sizes = fc.is_held_out_parts_size([float(r["elements"]) for r in g])
    slow_parts = [{**r, "time_s": 10 * r["time_s"]} if h else r for r, h in zip(g, sizes)]
    slow_cast = [{**r, "time_s": 10 * r["time_s"]} if h else r for r, h in zip(cr, gc.held_out_every_third(cr))]
    assert fc.fit_cast_parts(slow_parts, slow_cast) == p
    assert fc.fit_cast_parts(slow_parts, slow_cast, hold_out=False) != p
    # measured: scale is two one-element kernels of 3.75-3.79 us together; the parts' per-element costs are positive
    assert 1.8e-6 < p.scalar_s < 1.95e-6 and p.amax_s_per_element > 0 and p.cast_s_per_element > 0
    assert p.divide_s_per_element >= 0
    # the GEMM calibration's cast is this composite
    c = gc.gemm_calibration("H200-SXM").cast
    assert (c.fixed_s, c.coefs[0], c.n_rows) == pytest.approx((p.fixed_s, p.s_per_element, p.n_rows), rel=1e-12)


def test_too_few_rows_give_none_and_no_composite_rows_give_the_parts():
    prow = gc.gemm_rows("H200-SXM", ("fp8_cast_parts",))
    assert fc.fit_cast_parts([r for r in prow if r["part"] != "amax"], []) is None
    assert fc.fit_cast_parts(prow, []).divide_s_per_element == 0.0
    assert fc.fit_cast_parts([], []) is None
