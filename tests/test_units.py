"""Human-unit parsing and formatting at the edges."""

import pytest
from hypothesis import given, strategies as st

from c3kit.errors import C3kitError
from c3kit.units import fmt_bytes, fmt_rate, fmt_time, parse_bytes


@pytest.mark.parametrize("text,value", [("4096", 4096), ("64KB", 64e3), ("1MiB", 2**20), ("1.5 GB", 1.5e9),
                                        ("2gib", 2 * 2**30), ("1e3", 1000)])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("bad", ["", "KB", "12 parsecs", "-5MB", "1..2"])
def test_parse_bytes_rejects(bad):
    with pytest.raises(C3kitError):
        parse_bytes(bad)


def test_formatting():
    assert fmt_bytes(1.5e9) == "1.5 GB"
    assert fmt_bytes(512) == "512 B"
    assert fmt_time(2.5e-3) == "2.5 ms"
    assert fmt_time(3e-9) == "3 ns"
    assert fmt_rate(989.4e12, "FLOP/s") == "989 TFLOP/s"


@given(st.floats(min_value=1, max_value=1e15))
def test_parse_roundtrip_plain_numbers(x):
    assert parse_bytes(repr(x)) == pytest.approx(x)
