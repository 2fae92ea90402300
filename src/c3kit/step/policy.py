"""Overlap policies: how long a compute/comm pair takes when the two may run at the same time.

This is the seam for the detailed overlap schedules (T3, ConCCL, FiCCO, ...): the step projection
asks a policy for every pair it could overlap and never assumes more than the answer.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class OverlapPolicy(Protocol):
    """Time of a compute op of `compute_s` seconds and a comm op of `comm_s` seconds run as a pair.

    `dependent` is True when one needs the other's result (a TP all-reduce and the GEMM that
    produces its input, or the op that consumes its output); False when the two are independent
    (a layer's gradient reduce-scatter and the backward GEMMs of the layer below).
    Implementations must accept floats or numpy arrays (the vectorized sweep calls them with
    arrays) and must return a time >= max(compute_s, comm_s).
    """

    name: str

    def pair_time(self, compute_s, comm_s, dependent: bool):
        """Seconds the pair occupies the critical path."""
        ...


class SimpleOverlap:
    """The default: dependent pairs run back to back, independent pairs fully overlap (max)."""

    name = "simple"

    def pair_time(self, compute_s, comm_s, dependent: bool):
        """compute + comm when dependent, max(compute, comm) when independent."""
        if dependent:
            return compute_s + comm_s
        return np.maximum(compute_s, comm_s)


class SerialOverlap:
    """No overlap at all: every pair is serialized (the 'serial' bound of RESEARCH.md)."""

    name = "serial"

    def pair_time(self, compute_s, comm_s, dependent: bool):
        """compute + comm for every pair."""
        return compute_s + comm_s


class SlowdownOverlap:
    """Independent pairs overlap but slow each other down: max(c, m) + alpha * min(c, m).

    alpha = 0 is SimpleOverlap, alpha = 1 is SerialOverlap; the C3 paper's measured 21% of the
    ideal speedup corresponds to alpha ~ 0.79 for equal-length pairs.
    """

    def __init__(self, alpha: float):
        if not 0.0 <= alpha <= 1.0:
            from c3kit.errors import C3kitError

            raise C3kitError(f"overlap slowdown alpha must be within [0, 1], got {alpha}")
        self.alpha = float(alpha)
        self.name = f"slowdown({alpha:g})"

    def pair_time(self, compute_s, comm_s, dependent: bool):
        """Dependent: compute + comm; independent: max + alpha * min."""
        if dependent:
            return compute_s + comm_s
        return np.maximum(compute_s, comm_s) + self.alpha * np.minimum(compute_s, comm_s)


DEFAULT_POLICY = SimpleOverlap()
