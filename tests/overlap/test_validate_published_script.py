"""benchmarks/validate_overlap_published.py: the call-27 H200 chunk times it sets beside the async-TP rows."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_chunks_two_streams_by_case():
    spec = importlib.util.spec_from_file_location("vop", ROOT / "benchmarks" / "validate_overlap_published.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    got = mod.chunks_two_streams()
    assert len(got) == 13
    assert got["kraken-rs-512"] == pytest.approx(259.5e-6, rel=1e-3)
