"""Roofline times: the larger of arithmetic time at peak FLOP/s and memory time at peak HBM bandwidth."""

from __future__ import annotations

from c3kit.hw.model import GPU
from c3kit.workload.ops import Attention, Gemm, MemOp


def roofline_time(op: Gemm | Attention | MemOp, gpu: GPU) -> float:
    """max(FLOPs / peak FLOP/s, bytes / HBM bandwidth) for a compute or memory op."""
    dtype = getattr(op, "dtype", "bf16")
    t_math = op.flops / gpu.peak_flops(dtype) if op.flops else 0.0
    return max(t_math, op.bytes / gpu.hbm_bw)
