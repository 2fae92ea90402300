"""Isolated GEMM and reduction-kernel times for the schedules, priced through c3kit.cost.

The default cost model is kind "efficiency": the size-dependent efficiency curve of c3kit.cost (fitted
to the GPU's measured gemm calibration where one is shipped): wave/tile quantization over the SMs, K
saturation, per-kernel overhead. That curve is what makes sub-GEMMs lose efficiency (the
decomposition inefficiency loss). Kind "table" is not the default because schedules price many
off-grid sub-shapes and a smooth, monotone curve ranks them more reliably than interpolation between
measured points (on 2026-12-02 the H200 table gave 2048x8192x3072 slower than 2048x8192x4096).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import c3kit.cost as cost
from c3kit.hw.model import GPU, dtype_bytes
from c3kit.workload.ops import Gemm, MemOp

DEFAULT_COST_MODEL = "efficiency"
POWER_MODES = ("burst", "sustained")


def gemm_pricing(gpu: GPU, model=DEFAULT_COST_MODEL, power: str = "burst"):
    """(cost model, sustained clock or None) for the engine's GEMMs on gpu.

    power "burst": the GPU's own curve at burst clocks (the default). "sustained": as a GEMM runs back to
    back after a long warm-up (published microbenchmarks; a training step): times x the power-capped clock
    factor measured by `c3kit bench gemm --steady`, on the GPU or on the GPU whose GEMM calibration it
    takes by a documented transfer (cost/basis.py source_gpu: H100-SXM takes the H200-SXM's curve and clock).
    """
    from c3kit.errors import OverlapError

    if power not in POWER_MODES:
        raise OverlapError(f"unknown power mode {power!r}: use one of {', '.join(POWER_MODES)}")
    if power == "burst":
        return model, None
    from c3kit.cost.model import as_model
    from c3kit.cost.power import sustained_for

    # sustained_for and the default curve follow cost.basis.source_gpu (own, transferred or projected GEMM data)
    return as_model(model), sustained_for(gpu.name)


@dataclass(frozen=True)
class GemmCost:
    """What the simulator needs to know about one (sub-)GEMM run alone."""

    time: float  # s on the whole GPU
    phi: float  # share of the time that scales with SMs (1 compute-bound, ~0 memory-bound)
    hbm_rate: float  # B/s of HBM at full speed
    tiles: int  # output tiles (wave quantization when SMs are taken away)


_SHARED: dict = {}


class CostCache:
    """Per-evaluation cache of op costs by shape (the same sub-GEMM shapes recur across schedules)."""

    def __init__(self, gpu: GPU, tile_m: int, tile_n: int, traffic: float, model=DEFAULT_COST_MODEL,
                 power: str = "burst"):
        self.gpu = gpu
        self.tile_m = tile_m
        self.tile_n = tile_n
        self.traffic = traffic
        self.model, self.clock = gemm_pricing(gpu, model, power)
        self._gemm: dict[tuple, GemmCost] = {}
        self._mem: dict[float, float] = {}
        self._speed: dict[tuple, float] = {}
        self._fewer: dict[int, GPU] = {}
        # values derived from these costs that depend on a pair's collectives only, not on its GEMM (the
        # serial engine, the whole collectives' alone times), by (contention params, ranks, collectives)
        self.derived: dict[tuple, object] = {}

    @classmethod
    def shared(cls, gpu: GPU, tile_m: int, tile_n: int, traffic: float, model=DEFAULT_COST_MODEL,
               power: str = "burst") -> "CostCache":
        """One cache per (GPU, tile, traffic, cost model, power) for the process: the values are pure functions
        of those and the shape, so every evaluation and selection on that GPU can share them (the sweep prices
        thousands of pair shapes whose sub-GEMMs recur)."""
        try:
            key = (gpu, tile_m, tile_n, traffic, model, power)
            hash(key)
        except TypeError:  # an unhashable cost model object: a private cache
            return cls(gpu, tile_m, tile_n, traffic, model, power)
        hit = _SHARED.get(key)
        if hit is None:
            if len(_SHARED) >= 64:
                _SHARED.clear()
            hit = _SHARED[key] = cls(gpu, tile_m, tile_n, traffic, model, power)
        return hit

    def gemm(self, m: int, n: int, k: int, dtype: str, batch: int = 1) -> GemmCost:
        """Cost of `batch` GEMMs m x n x k run as one kernel, alone on the GPU."""
        key = (m, n, k, dtype, batch)
        hit = self._gemm.get(key)
        if hit is not None:
            return hit
        gpu = self.gpu
        nbytes = float(m * k + k * n + m * n) * dtype_bytes(dtype) * batch
        tiles = math.ceil(m / self.tile_m) * math.ceil(n / self.tile_n) * batch
        if 2 * tiles <= gpu.sms:  # libraries split K when the output tiles fill less than half the SMs
            tiles *= max(1, min(8, gpu.sms // tiles, k // 128))
        t = float(cost.time(Gemm("sub", m, n, k, dtype, batch), gpu, self.model))
        if self.clock is not None:
            t *= self.clock.factor(2.0 * m * n * k * batch / t / gpu.peak_flops(dtype))
        t_flops = 2.0 * m * n * k * batch / gpu.peak_flops(dtype)
        t_bytes = nbytes / gpu.hbm_bw
        # the SM-bound share: all of it for a compute-bound GEMM, the math/memory ratio otherwise
        phi = 1.0 if t_flops >= t_bytes else t_flops / t_bytes
        out = GemmCost(time=t, phi=phi, hbm_rate=nbytes * self.traffic / t, tiles=tiles)
        self._gemm[key] = out
        return out

    def speed(self, m: int, n: int, k: int, dtype: str, batch: int, sms: int) -> float:
        """Speed of the GEMM with only `sms` SMs relative to the whole GPU (the cost model re-run on fewer SMs:
        it re-chooses tiles, so wave quantization is what a library would really see)."""
        if sms >= self.gpu.sms:
            return 1.0
        key = (m, n, k, dtype, batch, sms)
        hit = self._speed.get(key)
        if hit is None:
            g = self._fewer.get(sms)
            if g is None:
                # the datasheet peak is the whole chip's: fewer SMs have that share of it (the per-SM math
                # rate is the same); HBM bandwidth stays whole (the contention model shares it)
                s = max(1, sms)
                f = s / self.gpu.sms
                g = self._fewer[sms] = self.gpu.with_(sms=s, flops={d: v * f for d, v in self.gpu.flops.items()})
            t = float(cost.time(Gemm("sub", m, n, k, dtype, batch), g, self.model))
            if self.clock is not None:
                t *= self.clock.factor(2.0 * m * n * k * batch / t / g.peak_flops(dtype))
            hit = self._speed[key] = min(1.0, self.gemm(m, n, k, dtype, batch).time / t)
        return hit

    def mem(self, nbytes: float) -> float:
        """Seconds of a memory-bound kernel (a local reduction) that moves nbytes."""
        hit = self._mem.get(nbytes)
        if hit is None:
            hit = float(cost.time(MemOp("reduce", nbytes), self.gpu, self.model))
            self._mem[nbytes] = hit
        return hit
