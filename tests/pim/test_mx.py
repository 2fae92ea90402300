"""MX9 / MX6 / MX4 quantisers: hand-computed round trips, storage, directional copies, error bound."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from c3kit.errors import PimError
from c3kit.pim.mx import BLOCK, block_bound, dequantize, directional_copies, get_format, quantize, round_trip

BLOCK_VALUES = np.array([1.0, 0.5, 0.3, -0.2] + [0.0] * 12)


@pytest.mark.parametrize("fmt, expected", [
    # E = 0. Pair (1.0, 0.5): micro 0, scale 2^(1-m). Pair (0.3, -0.2): both below 2^0, micro 1, scale 2^(-m).
    ("mx9", [1.0, 0.5, 38 / 128, -26 / 128]),   # m=7: 0.3*128 = 38.4 -> 38; 0.2*128 = 25.6 -> 26
    ("mx6", [1.0, 0.5, 5 / 16, -3 / 16]),       # m=4: 0.3*16 = 4.8 -> 5; 0.2*16 = 3.2 -> 3
    ("mx4", [1.0, 0.5, 1 / 4, -1 / 4]),         # m=2: 0.3*4 = 1.2 -> 1; 0.2*4 = 0.8 -> 1
])
def test_hand_computed_round_trip(fmt, expected):
    y = round_trip(BLOCK_VALUES, fmt)
    assert y[:4].tolist() == pytest.approx(expected, abs=0)
    assert (y[4:] == 0).all()
    t = quantize(BLOCK_VALUES, fmt)
    assert t.exps.tolist() == [0]
    assert t.micro.tolist() == [[0, 1, 1, 1, 1, 1, 1, 1]]


def test_clamping_at_the_top_of_the_range():
    # 1.99 with E = 0 in MX4: 1.99 / 0.5 = 3.98 rounds to 4 but codes stop at 3 -> 1.5.
    assert round_trip(np.array([1.99] + [0.0] * 15), "mx4")[0] == 1.5


def test_storage_bytes():
    assert [get_format(f).bits_per_element for f in ("mx9", "mx6", "mx4")] == [9, 6, 4]
    assert [get_format(f).bytes_per_element for f in ("mx9", "mx6", "mx4")] == [1.125, 0.75, 0.5]
    assert quantize(np.ones((4, 32)), "mx6").nbytes == 4 * 32 * 0.75


def test_directional_copies_block_along_the_dot_product_axis():
    w = np.random.default_rng(1).standard_normal((32, 48))
    c = directional_copies(w, "mx9")
    assert c["forward_rowwise"].exps.shape == (32, 3)  # 48 inputs per row -> 3 blocks per row
    assert c["backward_colwise"].exps.shape == (48, 2)  # 32 outputs per column -> 2 blocks per column
    np.testing.assert_array_equal(dequantize(c["backward_colwise"]), round_trip(w.T, "mx9").T)
    # One large element spoils a row block forward but only a column block backward.
    w2 = np.full((16, 16), 0.01)
    w2[3, 5] = 100.0
    fwd = dequantize(directional_copies(w2, "mx4")["forward_rowwise"])
    bwd = dequantize(directional_copies(w2, "mx4")["backward_colwise"])
    assert (fwd[3, :5] == 0).all() and (fwd[4, :] != 0).all()
    assert (bwd[:3, 5] == 0).all() and (bwd[3, :5] != 0).all()


def test_padding_and_shapes():
    x = np.random.default_rng(2).standard_normal((3, 20))
    assert round_trip(x, "mx9").shape == (3, 20)
    assert round_trip(x, "mx9", axis=0).shape == (3, 20)


def test_bad_input():
    with pytest.raises(PimError):
        get_format("mx5")
    with pytest.raises(PimError):
        quantize(np.array([1.0, np.nan]), "mx9")
    with pytest.raises(PimError):
        directional_copies(np.ones(16), "mx9")


finite = st.floats(min_value=-1e30, max_value=1e30, allow_nan=False, allow_infinity=False)


@given(arrays(np.float64, st.integers(1, 70), elements=finite), st.sampled_from(["mx9", "mx6", "mx4"]))
def test_error_within_format_bound(x, fmt):
    y = round_trip(x, fmt)
    # Values below 2^-127 are not representable in the block's exponent range and flush.
    small = np.abs(x) < 2.0 ** -120
    err = np.abs(y - x)
    assert (err[~small] <= block_bound(x, fmt)[~small]).all()
    assert np.sign(y[y != 0]).tolist() == np.sign(x[y != 0]).tolist()
    assert len(y) == len(x) and BLOCK == 16
