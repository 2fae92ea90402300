"""Roofline times: the larger of arithmetic time at peak FLOP/s and memory time at peak HBM bandwidth."""

from __future__ import annotations

from c3kit.hw.model import GPU
from c3kit.workload.ops import Attention, Gemm, MemOp


def vector_flops(gpu: GPU) -> float:
    """FLOP/s for element-wise work (no tensor cores): fp32, else the best listed rate."""
    f = gpu.flops.get("fp32")
    return f if f else max(gpu.flops.values())


def roofline_time(op: Gemm | Attention | MemOp, gpu: GPU, flop_eff: float = 1.0, mem_eff: float = 1.0) -> float:
    """max(FLOPs / (peak x flop_eff), bytes / (HBM bandwidth x mem_eff)) for a compute or memory op."""
    flops = op.flops
    if isinstance(op, MemOp):
        t_math = flops / (vector_flops(gpu) * flop_eff) if flops else 0.0
    else:
        t_math = flops / (gpu.peak_flops(op.dtype) * flop_eff) if flops else 0.0
    t_mem = op.bytes / (gpu.hbm_bw * mem_eff)
    return t_math if t_math > t_mem else t_mem
