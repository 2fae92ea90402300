"""Future hardware: named per-generation scaling rules that turn a catalog GPU into a projected one.

A rule multiplies, per generation, five things: dense FLOP/s (every dtype), HBM bandwidth, HBM
capacity, scale-up (intra-node) bandwidth and scale-out (NIC) bandwidth. Everything else stays as
it is: SM count and clock (so the extra compute is per-SM throughput and wave quantization keeps
its shape), L2 size, latencies, GPUs per node and topology. DMA engine bandwidth follows the
scale-up factor because copy engines feed the same links.

Where the factors come from (see docs/hardware.md):
- historical: geometric mean per generation of NVIDIA A100-SXM-80G -> H100-SXM -> B200 taken from
  this catalog (two generations): bf16 312 -> 989.4 -> 2250 TFLOP/s, HBM 2.039 -> 3.35 -> 8 TB/s,
  80 -> 80 -> 180 GB, NVLink 300 -> 450 -> 900 GB/s, NIC 25 -> 50 -> 50 GB/s per GPU.
  `historical_factors(chain)` recomputes them from catalog GPUs; a test keeps the two in step.
- historical-amd: AMD MI300X -> MI355X (one generation) from this catalog.
- compute-heavy: assumed; the trend the Comp-vs-Comm paper (arXiv 2302.02825) warns of, compute
  outgrowing memory and network (3x compute, ~1.4-1.6x everything else per generation).
- balanced: assumed; everything 2x per generation (a reference with constant ratios).
- comm-rich: assumed; a network-first roadmap (rack-scale NVLink, co-packaged optics): 3x scale-up
  and scale-out bandwidth per generation against 2x compute.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Sequence

from c3kit.errors import HardwareError
from c3kit.hw.model import GPU


@dataclass(frozen=True)
class ScalingRule:
    """Per-generation multipliers for compute, memory bandwidth and capacity, and both networks."""

    name: str
    compute: float
    mem_bw: float
    mem_capacity: float
    scaleup_bw: float
    scaleout_bw: float
    source: str

    def __post_init__(self) -> None:
        for f in ("compute", "mem_bw", "mem_capacity", "scaleup_bw", "scaleout_bw"):
            v = getattr(self, f)
            if not (v > 0 and math.isfinite(v)):
                raise HardwareError(f"scaling rule {self.name!r}: factor {f} must be a positive number, got {v!r}")

    def factors(self) -> dict[str, float]:
        """The five per-generation factors by name."""
        return {"compute": self.compute, "mem_bw": self.mem_bw, "mem_capacity": self.mem_capacity,
                "scaleup_bw": self.scaleup_bw, "scaleout_bw": self.scaleout_bw}


HISTORICAL_CHAIN = ("A100-SXM-80G", "H100-SXM", "B200")
AMD_CHAIN = ("MI300X", "MI355X")

RULES: dict[str, ScalingRule] = {
    r.name: r
    for r in (
        ScalingRule("historical", 2.685, 1.981, 1.500, 1.732, 1.414,
                    "geometric mean per generation of A100-SXM-80G -> H100-SXM -> B200 in this catalog"),
        ScalingRule("historical-amd", 1.925, 1.509, 1.500, 1.200, 1.000,
                    "MI300X -> MI355X in this catalog (one generation)"),
        ScalingRule("compute-heavy", 3.0, 1.6, 1.4, 1.4, 1.25,
                    "assumed: compute outgrows memory and network, the trend arXiv 2302.02825 studies"),
        ScalingRule("balanced", 2.0, 2.0, 2.0, 2.0, 2.0,
                    "assumed: every resource doubles per generation, ratios stay as today"),
        ScalingRule("comm-rich", 2.0, 2.0, 1.5, 3.0, 3.0,
                    "assumed: network-first roadmap (rack-scale scale-up, co-packaged optics)"),
    )
}


def list_rules() -> list[ScalingRule]:
    """Every named scaling rule, in definition order."""
    return list(RULES.values())


def get_rule(rule: str | ScalingRule) -> ScalingRule:
    """A rule by name (or the rule itself); unknown names raise HardwareError with the valid ones."""
    if isinstance(rule, ScalingRule):
        return rule
    hit = RULES.get(str(rule).lower())
    if hit is None:
        raise HardwareError(f"unknown scaling rule {rule!r}: use one of {', '.join(RULES)}")
    return hit


def historical_factors(chain: Sequence[GPU]) -> dict[str, float]:
    """Per-generation geometric-mean factors along a chain of GPUs (one generation per step), e.g.
    historical_factors([get_gpu(n) for n in HISTORICAL_CHAIN])."""
    if len(chain) < 2 or not all(isinstance(g, GPU) for g in chain):
        raise HardwareError("a generation chain needs at least two GPU objects (look names up with hw.get_gpu)")
    first, last = chain[0], chain[-1]
    gens = len(chain) - 1
    ratio = {
        "compute": last.peak_flops("bf16") / first.peak_flops("bf16"),
        "mem_bw": last.hbm_bw / first.hbm_bw,
        "mem_capacity": last.hbm_bytes / first.hbm_bytes,
        "scaleup_bw": last.scaleup.bw / first.scaleup.bw,
        "scaleout_bw": last.scaleout_bw / first.scaleout_bw,
    }
    return {k: v ** (1.0 / gens) for k, v in ratio.items()}


MAX_GENERATIONS = 10  # a rule fitted to a decade of parts; 1000 generations overflow float FLOP/s


def projected_name(base: str, rule: str, generations: int) -> str:
    """The catalog-style name of a projection, e.g. 'H200-SXM+2g(historical)'."""
    return f"{base}+{generations}g({rule})"


PROJECTED = re.compile(r"^(?P<base>.+)\+(?P<gens>\d+)g\((?P<rule>[\w-]+)\)$")


def base_name(gpu_name: str) -> str:
    """The catalog name under a projection ('H200-SXM+2g(historical)' -> 'H200-SXM'); other names unchanged."""
    m = PROJECTED.match(gpu_name.strip())
    return m["base"] if m else gpu_name


def project(gpu: GPU, rule: str | ScalingRule, generations: int) -> GPU:
    """gpu scaled by `generations` generations of `rule`; 0 generations returns gpu unchanged."""
    r = get_rule(rule)
    if isinstance(generations, bool) or not isinstance(generations, int) or generations < 0:
        raise HardwareError(f"generations must be a non-negative whole number, got {generations!r}")
    if generations > MAX_GENERATIONS:
        raise HardwareError(f"generations {generations} is beyond what a scaling rule can say (at most "
                            f"{MAX_GENERATIONS}, about {2 * MAX_GENERATIONS} years)")
    if generations == 0:
        return gpu
    c, bw, cap = r.compute ** generations, r.mem_bw ** generations, r.mem_capacity ** generations
    up, out = r.scaleup_bw ** generations, r.scaleout_bw ** generations
    sources = dict(gpu.sources)
    sources["projection"] = (f"{gpu.name} scaled by {generations} generation(s) of rule {r.name!r} "
                             f"({r.source}): x{c:.3g} FLOP/s, x{bw:.3g} HBM bandwidth, x{cap:.3g} HBM capacity, "
                             f"x{up:.3g} scale-up, x{out:.3g} scale-out")
    return replace(
        gpu,
        name=projected_name(gpu.name, r.name, generations),
        flops={k: v * c for k, v in gpu.flops.items()},
        hbm_bw=gpu.hbm_bw * bw,
        hbm_bytes=gpu.hbm_bytes * cap,
        scaleup=replace(gpu.scaleup, bw=gpu.scaleup.bw * up),
        scaleout_bw=gpu.scaleout_bw * out,
        dma=replace(gpu.dma, bw_per_engine=gpu.dma.bw_per_engine * up),
        sources=sources,
        notes=(gpu.notes + " " if gpu.notes else "") + f"Projected: {generations} generation(s) of {r.name}.",
    )
