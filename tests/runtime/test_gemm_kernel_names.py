"""benchmarks/gemm_kernel_names.py: trace parsing and marker grouping (the GPU part runs on the device only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gkn(load_benchmark):
    """benchmarks/gemm_kernel_names.py as a module."""
    return load_benchmark("gemm_kernel_names")


def test_kernels_in_start_order_and_grouped_between_markers(gkn):
    trace = {"traceEvents": [
        {"cat": "kernel", "ts": 30, "name": "spin_kernel"}, {"cat": "kernel", "ts": 40, "name": "nvjet_b"},
        {"cat": "kernel", "ts": 10, "name": "spin_kernel"}, {"cat": "kernel", "ts": 20, "name": "nvjet_a"},
        {"cat": "kernel", "ts": 25, "name": "splitKreduce_kernel"}, {"cat": "cpu_op", "ts": 0, "name": "aten::mm"},
        {"cat": "kernel", "ts": 50, "name": "spin_kernel"}]}
    names = gkn.kernels_of(trace)
    assert names == ["spin_kernel", "nvjet_a", "splitKreduce_kernel", "spin_kernel", "nvjet_b", "spin_kernel"]
    assert gkn.group_by_markers(names) == [["nvjet_a", "splitKreduce_kernel"], ["nvjet_b"]]
    assert gkn.group_by_markers(["nvjet_x"]) == []  # nothing before the first marker counts


def test_shipped_kernel_names_cover_every_shipped_shape(gkn):
    doc = json.loads((ROOT / "benchmarks" / "gemm_kernels_h200" / "gemm-kernels.json").read_text())
    have = {tuple(r[:4]) for r in doc["rows"]}
    want = {s[:4] for s in gkn.shapes()}
    assert want <= have and all(r[5] for r in doc["rows"])
    for key in ("machine", "gpu", "driver", "torch", "cuda", "date", "script"):
        assert key in doc["meta"]
