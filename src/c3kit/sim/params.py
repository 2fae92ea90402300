"""The contention model's parameters: one frozen dataclass, every field named and documented, loadable
from a calibration file (src/c3kit/cost/data/calib/<gpu>-contention.json)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from c3kit.errors import SimError


@dataclass(frozen=True)
class ContentionParams:
    """How concurrent compute and communication share one GPU (see docs/sim.md for the model).

    Fractions are of the GPU's SM count; None means "derive from the GPU" (see the resolve_* methods).
    """

    # --- SMs -------------------------------------------------------------------------------------
    comm_sms: int | None = None
    """k: SMs an SM-based collective kernel occupies (NCCL/RCCL channels x 1 block). None: comm_sm_frac."""
    comm_sm_frac: float = 0.12
    """k as a fraction of the GPU's SMs when comm_sms is None (16 of 132 on H200, 36 of 304 on MI300X)."""
    sm_comm_bw: float | None = None
    """B/s one comm SM can push; None: scale-up bandwidth / (comm_sat_sm_frac x SMs), i.e. an SM
    collective saturates the fabric with that many SMs (C3: no gain beyond ~32 of 304 CUs)."""
    comm_sat_sm_frac: float = 0.10
    """SMs (fraction) an SM collective needs to reach full scale-up bandwidth (used when sm_comm_bw is None)."""
    noprio_comm_sm_share: float = 0.3
    """Share of its k SMs a comm kernel gets while a GEMM of the same or higher stream priority runs:
    its blocks are scheduled only as GEMM blocks retire. With higher priority it gets all k. (H200: an
    8- or 32-block copy kernel beside an 8192^3 GEMM ran ~3.3x slower without priority; c3kit bench c3.)"""
    partition_sms: int | None = None
    """SMs withheld from GEMMs in '-part' schedules (green contexts / CU masking). None: comm_sms."""
    link_efficiency: float = 0.8
    """Achieved / peak scale-up bandwidth for any transfer (nccl-tests all-reduce busbw ~360 of 450 GB/s
    on an H100 NVSwitch node; the same factor as the cost layer's comm_eff, assumed for every fabric)."""
    partition_overhead: float = 0.09
    """Fixed extra slowdown of a compute-bound GEMM confined to an SM partition (green context / CU
    mask): the library sizes its grid for the whole GPU, so even a few SMs fewer cost this much. A
    partitioned GEMM on s of S SMs runs (1 + o) x (1 + slope x (S/s - 1)) slower than on the whole GPU,
    with o and slope mixed by the GEMM's SM-bound share phi:
    o = phi x partition_overhead + (1 - phi) x partition_mem_overhead, and the same for the slopes.
    This replaces the cost model's re-pricing on s SMs for partitioned GEMMs (the measurements include
    the wave quantization). Default 0.09 with partition_sm_slope 0.62: the C3 paper's MI300X figures
    (a compute-bound GEMM loses 17% with 32 of 304 CUs removed, 27% with 64), fitted exactly.
    H200 (c3kit bench c3 run 2, 8192^3 bf16 in green contexts of 128..32 SMs: +26.5% .. +271%):
    0.225 / 0.655, within 2% at every point (calib/h200-sxm-contention.json)."""
    partition_sm_slope: float = 0.62
    """How a partitioned compute-bound GEMM's time grows with S/s - 1 (see partition_overhead); 1 would
    be perfectly proportional to the SMs it lost."""
    partition_mem_overhead: float = 0.0
    """partition_overhead for the memory-bound share (1 - phi). Default 0: the C3 paper reports that
    memory-bound GEMMs tolerate losing CUs on MI300X (no figure given; 0 is the reading of that
    remark). H200 run 2: a 262144x512x128 GEMM (phi ~0.5) lost 34% at 128 SMs, 104% at 64, 264% at 32,
    fitted 0.28 with slope 0.58 and used for the whole memory share (the H200 does not tolerate it)."""
    partition_mem_sm_slope: float = 0.0
    """partition_sm_slope for the memory-bound share (see partition_mem_overhead)."""
    # --- HBM -------------------------------------------------------------------------------------
    hbm_efficiency: float = 0.9
    """Fraction of peak HBM bandwidth that all concurrent ops together can draw."""
    gemm_hbm_traffic: float = 1.0
    """HBM bytes a GEMM really moves / its fewest bytes (A, B read once, C written once)."""
    copy_hbm_factor: float = 2.0
    """HBM bytes per byte sent by a copy: read the outgoing byte, write the incoming one (symmetric peers)."""
    reduce_hbm_factor: float = 3.0
    """HBM bytes per byte sent by a reducing transfer: read outgoing, read local operand, write result."""
    # --- interference beyond the bandwidth share (caches, L2, memory-controller queues) ------------
    gemm_interference: float = 0.1
    """A GEMM's compute-bound share runs 1 / (1 + gemm_interference x u_comm) fast while copies use
    u_comm = their HBM traffic / usable HBM bandwidth (H200 local copy-engine copy beside an 8192^3
    bf16 GEMM: the GEMM lost 1-8% at u_comm ~ 0.8; c3kit bench c3 runs 1 and 2, 2026-12-02)."""
    gemm_mem_interference: float = 0.8
    """The same for a GEMM's memory-bound share (H200: a 262144x512x128 GEMM lost 63% beside the same
    copy). A GEMM's factor is phi x gemm_interference + (1 - phi) x gemm_mem_interference."""
    comm_interference: float = 0.3
    """A transfer runs 1 / (1 + comm_interference x b) fast while compute holds a share b of the SMs
    (L2 and memory-pipeline pressure). Local HBM-bound copies on H200 slowed ~3x beside a compute-bound
    GEMM (c3kit bench c3); link-bound peer transfers read HBM far slower, so the default is lower."""
    # --- latencies per transfer step ---------------------------------------------------------------
    sm_launch: float = 2e-6
    """s before an SM comm kernel moves data (launch + peer handshake) per step."""
    sm_sync: float = 1e-6
    """s after an SM comm step until its consumer sees the data (flag write + poll)."""
    dma_launch: float | None = None
    """s to schedule one DMA command; None: the catalog's dma.launch."""
    dma_sync: float | None = None
    """s to signal and observe one DMA completion; None: the catalog's dma.sync."""
    trigger_latency: float = 0.5e-6
    """s from an output stage finishing to its pre-programmed transfer starting (fused schedules)."""
    eager_launch: float | None = None
    """s of host time per GPU operation that a framework's Python loop issues (PyTorch async TP, ring-dma):
    no operation starts before the host has issued it. None: the GPU's measured eager launch
    (cost.launch.eager_launch_s); 0: the loop is captured in a CUDA graph (no host issue time)."""
    # --- GEMM shape --------------------------------------------------------------------------------
    tile_m: int = 128
    """GEMM output tile rows: one tile runs on one SM; waves = ceil(tiles / SMs) (wave quantization)."""
    tile_n: int = 256
    """GEMM output tile columns."""
    fused_gemm_efficiency: float = 0.92
    """Speed of a fused compute+comm GEMM kernel relative to the vendor library GEMM (tile shape fixed
    by the fusion, flag polling, epilogue stores to peers)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0):
                raise SimError(f"contention parameter {f.name} must be a non-negative number, got {v!r}")
        if not 0 < self.noprio_comm_sm_share <= 1:
            raise SimError("noprio_comm_sm_share must be in (0, 1]")
        if not all(0 < v <= 1 for v in (self.hbm_efficiency, self.fused_gemm_efficiency, self.link_efficiency)):
            raise SimError("hbm_efficiency, link_efficiency and fused_gemm_efficiency must be in (0, 1]")
        if self.tile_m < 1 or self.tile_n < 1:
            raise SimError("tile_m and tile_n must be at least 1")

    # --- derived values --------------------------------------------------------------------------
    def resolve_comm_sms(self, sms: int) -> int:
        """k for a GPU with `sms` SMs."""
        k = self.comm_sms if self.comm_sms is not None else round(self.comm_sm_frac * sms)
        return max(1, min(int(k), sms - 1))

    def resolve_partition_sms(self, sms: int) -> int:
        """SMs withheld from GEMMs in partitioned schedules."""
        k = self.partition_sms if self.partition_sms is not None else self.resolve_comm_sms(sms)
        return max(0, min(int(k), sms - 1))

    def resolve_sm_comm_bw(self, sms: int, fabric_bw: float) -> float:
        """B/s one comm SM drives."""
        if self.sm_comm_bw is not None:
            return self.sm_comm_bw
        return fabric_bw / max(1.0, self.comm_sat_sm_frac * sms)

    def partition_speed(self, phi: float, sms: float, total: int, tiles: int = 0) -> float:
        """Speed (fraction of whole-GPU speed) of a GEMM confined to an SM partition of `sms` of `total`
        SMs. A GEMM whose output tiles fit in the partition loses nothing (the SMs taken away are ones it
        would not use); one with fewer tiles than the GPU has SMs counts only the SMs it can use."""
        if sms >= total or (tiles and tiles <= sms):
            return 1.0
        if sms <= 0:
            return 0.0
        full = min(total, tiles) if tiles else total
        part = min(sms, tiles) if tiles else sms
        o = phi * self.partition_overhead + (1.0 - phi) * self.partition_mem_overhead
        b = phi * self.partition_sm_slope + (1.0 - phi) * self.partition_mem_sm_slope
        return 1.0 / ((1.0 + o) * (1.0 + b * (full / part - 1.0)))

    def with_(self, **changes: Any) -> "ContentionParams":
        """A copy with some fields replaced."""
        try:
            return replace(self, **changes)
        except TypeError as e:
            raise SimError(f"unknown contention parameter: {e}") from None

    @classmethod
    def ideal(cls) -> "ContentionParams":
        """No contention at all: comm takes no SMs or HBM share, no interference, no step latency, no host issue time."""
        return cls(comm_sms=0, partition_sms=0, sm_comm_bw=1e30, noprio_comm_sm_share=1.0, hbm_efficiency=1.0,
                   link_efficiency=1.0, gemm_hbm_traffic=0.0, copy_hbm_factor=0.0, reduce_hbm_factor=0.0,
                   gemm_interference=0.0, gemm_mem_interference=0.0, comm_interference=0.0, sm_launch=0.0,
                   sm_sync=0.0, dma_launch=0.0, dma_sync=0.0, trigger_latency=0.0, eager_launch=0.0,
                   fused_gemm_efficiency=1.0,
                   partition_overhead=0.0, partition_mem_overhead=0.0)

    def to_dict(self) -> dict[str, Any]:
        """Every parameter by name (None where derived from the GPU)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], origin: str = "<dict>") -> "ContentionParams":
        """Build from a name -> value mapping; unknown names are an error."""
        known = {f.name for f in fields(cls)}
        bad = sorted(set(d) - known)
        if bad:
            raise SimError(f"{origin}: unknown contention parameters {', '.join(bad)}; known: {', '.join(sorted(known))}")
        try:
            return cls(**{k: (None if v is None else (int(v) if k in _INT_FIELDS else float(v))) for k, v in d.items()})
        except (TypeError, ValueError) as e:
            raise SimError(f"{origin}: malformed contention parameter ({e})") from None

    @classmethod
    def from_calibration(cls, gpu_name: str, path: str | Path | None = None) -> "ContentionParams":
        """Parameters fitted on a GPU (calib/<gpu>-contention.json, rows of [parameter, value]); defaults when absent."""
        if path is None:
            p = calibration_path(gpu_name)
            if p is None:
                return cls()
            text, origin = p.read_text(), str(p)
        else:
            p = Path(path)
            if not p.is_file():
                raise SimError(f"{p}: no such calibration file")
            try:
                text, origin = p.read_text(), str(p)
            except UnicodeDecodeError:
                raise SimError(f"{p}: not a text file (a calibration file is UTF-8 JSON)") from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise SimError(f"{origin}: not valid JSON ({e})") from None
        return cls.from_dict(_params_from_doc(doc, origin), origin)

    def to_calibration(self, meta: dict[str, Any]) -> dict[str, Any]:
        """The calibration-file document (docs/CONVENTIONS.md format) that from_calibration reads back."""
        rows = [[k, v] for k, v in self.to_dict().items() if v is not None]
        return {"meta": dict(meta), "kind": "contention", "columns": ["parameter", "value"], "rows": rows}


_INT_FIELDS = {"comm_sms", "partition_sms", "tile_m", "tile_n"}


def calibration_path(gpu_name: str) -> Path | None:
    """The shipped contention calibration file for a GPU (name or alias, e.g. 'H200-SXM' or 'h200'), if any."""
    from c3kit.cost.calib_store import find_calibration

    return find_calibration(gpu_name, "contention")


def _params_from_doc(doc: Any, origin: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("kind") != "contention":
        raise SimError(f"{origin}: not a contention calibration file (needs \"kind\": \"contention\")")
    cols, rows = doc.get("columns"), doc.get("rows")
    if not isinstance(cols, list) or not isinstance(rows, list) or "parameter" not in cols or "value" not in cols:
        raise SimError(f"{origin}: needs \"columns\" with \"parameter\" and \"value\" and a \"rows\" list")
    ip, iv = cols.index("parameter"), cols.index("value")
    out: dict[str, Any] = {}
    for r in rows:
        if not isinstance(r, list) or len(r) != len(cols):
            raise SimError(f"{origin}: row {r!r} does not match columns {cols}")
        out[str(r[ip])] = r[iv]
    return out
