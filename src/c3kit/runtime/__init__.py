"""Real execution with PyTorch: overlapped collective-matmul ops, comm backends, microbenchmarks.

PyTorch is optional: importing this package never imports torch; the ops raise RuntimeSetupError
with an install hint when torch is missing.
"""

from __future__ import annotations

from c3kit.runtime.schedules import BACKENDS, SCHEDULES, resolve_schedule

__all__ = [
    "SCHEDULES", "BACKENDS", "resolve_schedule",
    "all_gather_matmul", "matmul_reduce_scatter", "moe_all_to_all_gemm",
    "reference_all_gather_matmul", "reference_matmul_reduce_scatter", "reference_moe_all_to_all_gemm",
]


def __getattr__(name: str):
    if name in __all__:
        from c3kit.runtime import ops

        return getattr(ops, name)
    raise AttributeError(f"module 'c3kit.runtime' has no attribute {name!r}")
