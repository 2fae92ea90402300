"""Frozen data classes that describe one GPU, its scale-up fabric, scale-out NIC and DMA engines."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

from c3kit.errors import HardwareError

TOPOLOGIES = ("switch", "mesh", "ring")


@dataclass(frozen=True)
class ScaleUp:
    """The intra-node fabric as seen by one GPU.

    bw is the GPU's aggregate unidirectional bandwidth into the fabric (B/s, summed over its links);
    on a full mesh each of the links_per_gpu links carries bw / links_per_gpu to one peer.
    """

    topology: str  # "switch" (NVSwitch: any peer at full bw), "mesh" (one link per peer), "ring"
    bw: float  # B/s per direction, all links of one GPU together
    links_per_gpu: int
    latency: float  # s per transfer (one hop / one step of a collective algorithm)
    launch: float = 0.0  # s fixed per collective call (library base latency: launch, setup, completion)

    def __post_init__(self) -> None:
        if self.topology not in TOPOLOGIES:
            raise HardwareError(f"unknown topology {self.topology!r}: use one of {', '.join(TOPOLOGIES)}")
        if self.bw <= 0 or self.links_per_gpu <= 0 or self.latency < 0 or self.launch < 0:
            raise HardwareError("scale-up bandwidth and link count must be positive, latency and launch non-negative")

    def peer_bw(self) -> float:
        """Bandwidth (B/s) from this GPU to one peer when it talks to that peer alone."""
        return self.bw if self.topology == "switch" else self.bw / self.links_per_gpu


@dataclass(frozen=True)
class DMAEngines:
    """The GPU's DMA / copy engines that move data without using SMs."""

    engines: int  # engines usable for peer-to-peer transfers
    bw_per_engine: float  # B/s one engine sustains
    launch: float  # s to schedule one command (host or device side)
    sync: float  # s to signal and observe completion of one command

    def __post_init__(self) -> None:
        if self.engines < 0 or self.bw_per_engine < 0 or self.launch < 0 or self.sync < 0:
            raise HardwareError("DMA engine count, bandwidth and latencies must be non-negative")


@dataclass(frozen=True)
class GPU:
    """One accelerator with the node it sits in. All values SI: FLOP/s, B, B/s, s, Hz."""

    name: str
    vendor: str
    sms: int  # SMs (NVIDIA) or CUs (AMD)
    clock: float  # Hz, boost
    flops: Mapping[str, float]  # dense FLOP/s by dtype: "fp32", "tf32", "bf16", "fp16", "fp8"
    hbm_bytes: float
    hbm_bw: float
    l2_bytes: float
    gpus_per_node: int
    scaleup: ScaleUp
    scaleout_bw: float  # B/s per direction per GPU (its NIC share)
    scaleout_latency: float  # s
    dma: DMAEngines
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "flops", MappingProxyType(dict(self.flops)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        if self.sms <= 0 or self.clock <= 0 or self.hbm_bytes <= 0 or self.hbm_bw <= 0 or self.gpus_per_node <= 0:
            raise HardwareError(f"{self.name}: SMs, clock, HBM size and bandwidth, GPUs per node must be positive")
        if not self.flops or any(v <= 0 for v in self.flops.values()):
            raise HardwareError(f"{self.name}: needs at least one positive FLOP/s entry")

    def __hash__(self) -> int:
        # the mappings are read-only views, so hashing their items keeps GPU usable as a cache key; the fields never
        # change, so the hash is computed once (a sweep hashes its GPUs tens of thousands of times as cache keys; a
        # GPU cannot be pickled, its mappings being views, so the cached hash never crosses processes)
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.name, self.vendor, self.sms, self.clock, tuple(sorted(self.flops.items())), self.hbm_bytes,
                      self.hbm_bw, self.l2_bytes, self.gpus_per_node, self.scaleup, self.scaleout_bw,
                      self.scaleout_latency, self.dma))
            object.__setattr__(self, "_hash", h)
        return h

    def peak_flops(self, dtype: str) -> float:
        """Dense FLOP/s for a dtype; fp16 falls back to bf16 and tf32 to fp32 when not listed."""
        if dtype in self.flops:
            return self.flops[dtype]
        fallback = {"fp16": "bf16", "bf16": "fp16", "tf32": "fp32", "fp8": "bf16"}.get(dtype)
        if fallback and fallback in self.flops:
            return self.flops[fallback]
        raise HardwareError(f"{self.name} has no FLOP/s for dtype {dtype!r}; it lists {', '.join(self.flops)}")

    def with_(self, **changes) -> "GPU":
        """A copy with some fields replaced (used by scaling rules and what-if studies)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        """A plain JSON-ready dict of every field (SI units), sources included."""
        return {
            "name": self.name, "vendor": self.vendor, "sms": self.sms, "clock": self.clock,
            "flops": dict(self.flops), "hbm_bytes": self.hbm_bytes, "hbm_bw": self.hbm_bw,
            "l2_bytes": self.l2_bytes, "gpus_per_node": self.gpus_per_node,
            "scaleup": {"topology": self.scaleup.topology, "bw": self.scaleup.bw,
                        "links_per_gpu": self.scaleup.links_per_gpu, "latency": self.scaleup.latency,
                        "launch": self.scaleup.launch},
            "scaleout_bw": self.scaleout_bw, "scaleout_latency": self.scaleout_latency,
            "dma": {"engines": self.dma.engines, "bw_per_engine": self.dma.bw_per_engine,
                    "launch": self.dma.launch, "sync": self.dma.sync},
            "sources": dict(self.sources), "notes": self.notes,
        }


DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise HardwareError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPE_BYTES)}") from None
