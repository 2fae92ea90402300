"""Cost models: `time(op, hw)` in seconds for every op of the workload layer."""

from __future__ import annotations

from c3kit.cost.collectives import collective_time
from c3kit.cost.roofline import roofline_time
from c3kit.hw.model import GPU
from c3kit.workload.ops import Collective, Op


def time(op: Op, hw: GPU) -> float:
    """Seconds that op takes alone on hw (roofline for compute, alpha-beta for collectives)."""
    if isinstance(op, Collective):
        return collective_time(op, hw)
    return roofline_time(op, hw)


op_time = time

__all__ = ["time", "op_time", "roofline_time", "collective_time"]
