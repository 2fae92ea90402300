"""benchmarks/validate_overlap_published.py: the call-27 H200 chunk times it sets beside the async-TP rows."""

import pytest


def test_chunks_two_streams_by_case(load_benchmark):
    got = load_benchmark("validate_overlap_published").chunks_two_streams()
    assert len(got) == 13
    assert got["kraken-rs-512"] == pytest.approx(259.5e-6, rel=1e-3)
