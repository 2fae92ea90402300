"""DMA-engine (copy-engine) collectives: command-schedule, copy and sync terms for pcpy, bcst, swap, b2b.

Each GPU of an n-GPU group moves one chunk of S / n bytes to each of its n - 1 peers (S is the
nccl-tests array size: the gathered output of an all-gather, the per-rank buffer of an all-to-all).
A variant decides how those n - 1 transfers become commands:

- pcpy: n - 1 commands, one per destination, spread over the engines; n - 1 syncs.
- bcst (all-gather only): one command writes the same chunk to two destinations;
  ceil((n - 1) / 2) commands and syncs.
- swap (all-to-all only): one command exchanges chunks in both directions with one peer;
  the pair's commands are split between its two GPUs, so ceil((n - 1) / 2) per GPU.
- b2b: n - 1 commands back to back on one engine, one sync at the end.

Pre-launch (``prelaunch=True``) enqueues every command ahead of time behind a wait on a flag, so the
critical path pays one flag write (`trigger`) instead of one `launch` per command.

Timing is a small event walk: command i is issued at (i + 1) * launch (or at `trigger`), starts on its
engine when both issued and the engine is free, takes cmd_overhead + bytes / bandwidth, plus the
fabric's copy_latency once per engine queue; completions are observed one after another, `sync` each.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from c3kit.errors import CostError
from c3kit.hw.model import GPU

VARIANTS = ("pcpy", "bcst", "swap", "b2b")
KINDS = ("all_gather", "all_to_all")
# which variants apply to which collective (bcst sends one chunk to two peers: only all-gather has that;
# swap exchanges distinct chunks both ways: only all-to-all has that)
VARIANTS_FOR = {"all_gather": ("pcpy", "bcst", "b2b"), "all_to_all": ("pcpy", "swap", "b2b")}


@dataclass(frozen=True)
class DMAParams:
    """Parameters of one GPU's DMA engines as the collective model uses them (SI units)."""

    engines: int  # engines usable for peer transfers
    bw_per_engine: float  # B/s one engine moves
    launch: float  # s to schedule one command from the host / command processor (serial)
    sync: float  # s to signal and observe one completion (serial)
    cmd_overhead: float  # s an engine spends per command before moving data (fetch, decode, address setup)
    copy_latency: float  # s from first byte issued to first byte landed at a peer (fabric), once per queue
    trigger: float  # s of the single flag write that releases pre-launched commands
    peer_bw: float  # B/s of the link to one peer (a copy to one peer never exceeds it)
    fabric_bw: float  # B/s out of this GPU into the fabric, shared by all active engines
    dest_overhead: float = 0.0  # s more per command for each destination beyond the first (bcst, swap)

    def __post_init__(self) -> None:
        if self.engines < 1:
            raise CostError("DMA model needs at least one engine (set engines >= 1)")
        if min(self.bw_per_engine, self.peer_bw, self.fabric_bw) <= 0:
            raise CostError("DMA bandwidths (bw_per_engine, peer_bw, fabric_bw) must be positive")
        if min(self.launch, self.sync, self.cmd_overhead, self.copy_latency, self.trigger, self.dest_overhead) < 0:
            raise CostError("DMA latencies (launch, sync, cmd_overhead, copy_latency, trigger, dest_overhead) must be >= 0")

    @classmethod
    def from_gpu(cls, gpu: GPU, **overrides) -> "DMAParams":
        """Parameters from a catalog GPU's DMAEngines and scale-up fabric; keyword overrides win."""
        d = gpu.dma
        if d.engines < 1 or d.bw_per_engine <= 0:
            raise CostError(f"{gpu.name} lists no usable DMA engines; pass engines= and bw_per_engine=")
        base = dict(
            engines=d.engines, bw_per_engine=d.bw_per_engine, launch=d.launch, sync=d.sync,
            # assumed when the catalog has no figure: an engine's per-command fetch is a fraction of a host launch
            cmd_overhead=0.25 * d.launch,
            copy_latency=gpu.scaleup.latency,
            # assumed: releasing pre-launched commands costs one device-side flag write, ~ a quarter of a launch
            trigger=0.25 * d.launch,
            peer_bw=gpu.scaleup.peer_bw(), fabric_bw=gpu.scaleup.bw,
        )
        return cls.with_overrides(cls(**base), **overrides)

    @staticmethod
    def with_overrides(p: "DMAParams", **overrides) -> "DMAParams":
        """A copy with some parameters replaced; unknown names are an error."""
        names = {f.name for f in fields(DMAParams)}
        bad = sorted(set(overrides) - names)
        if bad:
            raise CostError(f"unknown DMA parameter(s) {', '.join(bad)}: use {', '.join(sorted(names))}")
        clean = {k: (int(v) if k == "engines" else float(v)) for k, v in overrides.items() if v is not None}
        return replace(p, **clean)

    @classmethod
    def from_calibration(cls, path: str | Path, gpu: GPU) -> "DMAParams":
        """Parameters from a calibration file of kind "dma": [param, value] rows, or measured single copies.

        Measured single copies are rows with columns bytes and seconds (or time_s): a least-squares line
        t = a + S / B gives bw_per_engine = B, and a is split over launch, cmd_overhead, copy_latency and
        sync in the proportions of the catalog-derived defaults (one copy cannot tell them apart).
        """
        try:
            doc = json.loads(Path(path).read_text())
            cols = [str(c).lower() for c in doc["columns"]]
            rows = doc["rows"]
            kind = doc.get("kind")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CostError(f"{path}: not a readable calibration file ({e})") from None
        if kind != "dma":
            raise CostError(f"{path}: calibration kind is {kind!r}, expected 'dma'")
        try:
            if "param" in cols and "value" in cols:
                ip, iv = cols.index("param"), cols.index("value")
                return cls.from_gpu(gpu, **{row[ip]: row[iv] for row in rows})
            tcol = next((c for c in ("seconds", "time_s", "t_s") if c in cols), None)
            if "bytes" not in cols or tcol is None:
                raise CostError(f"{path}: a dma calibration needs columns param, value or bytes, seconds")
            ib, it = cols.index("bytes"), cols.index(tcol)
            pts = [(float(r[ib]), float(r[it])) for r in rows]
        except (IndexError, TypeError, ValueError) as e:
            raise CostError(f"{path}: malformed dma calibration rows ({e})") from None
        return cls.fit_single_copies(pts, gpu)

    @classmethod
    def fit_single_copies(cls, points, gpu: GPU) -> "DMAParams":
        """Fit bandwidth and fixed cost to measured (bytes, seconds) of single GPU-to-GPU DMA copies."""
        pts = [(b, t) for b, t in points if b > 0 and t > 0]
        if len({b for b, _ in pts}) < 2:
            raise CostError("fitting DMA parameters needs single-copy times at two or more sizes")
        n = len(pts)
        mb = sum(b for b, _ in pts) / n
        mt = sum(t for _, t in pts) / n
        sxx = sum((b - mb) ** 2 for b, _ in pts)
        slope = sum((b - mb) * (t - mt) for b, t in pts) / sxx
        if slope <= 0:
            raise CostError("measured copy times do not grow with size: cannot fit a bandwidth")
        fixed = max(0.0, mt - slope * mb)
        base = cls.from_gpu(gpu)
        parts = base.launch + base.cmd_overhead + base.copy_latency + base.sync
        k = fixed / parts if parts > 0 else 0.0
        return replace(base, bw_per_engine=1.0 / slope, launch=base.launch * k, cmd_overhead=base.cmd_overhead * k,
                       copy_latency=base.copy_latency * k, sync=base.sync * k, trigger=base.trigger * k)

    def to_dict(self) -> dict:
        """Plain dict of the parameters (SI units)."""
        return asdict(self)


@dataclass(frozen=True)
class DMATime:
    """One DMA collective's time and its three terms (s). total <= schedule + copy + sync (they overlap)."""

    kind: str
    variant: str
    prelaunch: bool
    bytes: float
    ranks: int
    commands: int
    syncs: int
    total: float
    schedule: float  # issue (launch or trigger) plus per-command engine overhead on the critical engine
    copy: float  # data movement on the critical engine: bytes / bandwidth + fabric latency
    sync_time: float  # syncs * sync

    @property
    def non_copy_share(self) -> float:
        """Share of the total that is not the copy itself (command scheduling and synchronization)."""
        return max(0.0, 1.0 - self.copy / self.total) if self.total > 0 else 0.0

    @property
    def label(self) -> str:
        """Variant name with '+PL' when pre-launched."""
        return self.variant + ("+PL" if self.prelaunch else "")


def _commands(kind: str, variant: str, chunk: float, n: int) -> list[tuple[float, int]]:
    """(bytes the engine moves, destinations) of each command of a variant."""
    peers = n - 1
    if variant in ("pcpy", "b2b"):
        return [(chunk, 1)] * peers
    pairs = math.ceil(peers / 2)
    if variant == "bcst":
        # one read, two writes; the last command has one destination when n - 1 is odd
        return [(2 * chunk, 2)] * (peers // 2) + [(chunk, 1)] * (peers % 2)
    # swap: a GPU owns half of its pair exchanges, each moving a chunk both ways
    return [(2 * chunk, 2)] * pairs


def dma_collective_time(kind: str, nbytes: float, ranks: int, params: DMAParams, variant: str = "pcpy",
                        prelaunch: bool = False) -> DMATime:
    """Time of an all-gather or all-to-all of nbytes (nccl-tests S) on ranks GPUs by DMA engines."""
    if kind not in KINDS:
        raise CostError(f"DMA engines cannot run {kind!r} (they do not reduce): use {' or '.join(KINDS)}")
    if variant not in VARIANTS:
        raise CostError(f"unknown DMA variant {variant!r}: use one of {', '.join(VARIANTS)}")
    if variant not in VARIANTS_FOR[kind]:
        raise CostError(f"variant {variant!r} does not apply to {kind}: use one of {', '.join(VARIANTS_FOR[kind])}")
    if ranks < 2:
        raise CostError(f"a DMA collective needs at least 2 ranks, got {ranks}")
    if nbytes <= 0 or not math.isfinite(nbytes):
        raise CostError(f"collective size must be a positive number of bytes, got {nbytes}")
    p = params
    cmds = _commands(kind, variant, nbytes / ranks, ranks)
    n_eng = 1 if variant == "b2b" else min(p.engines, len(cmds))
    # bandwidth one engine gets while n_eng engines run at once (engine, one link, shared fabric);
    # bcst and swap commands touch two links, so their per-link cap doubles
    links = 1 if variant in ("pcpy", "b2b") else 2
    bw = min(p.bw_per_engine, links * p.peer_bw, p.fabric_bw / n_eng)
    issue = [p.trigger] * len(cmds) if prelaunch else [(i + 1) * p.launch for i in range(len(cmds))]
    free = [0.0] * n_eng
    started = [False] * n_eng
    done: list[float] = []
    busy_copy = [0.0] * n_eng
    busy_cmd = [0.0] * n_eng
    for i, (b, dests) in enumerate(cmds):
        e = i % n_eng
        start = max(issue[i], free[e])
        overhead = p.cmd_overhead + (dests - 1) * p.dest_overhead
        t = overhead + b / bw + (0.0 if started[e] else p.copy_latency)
        busy_copy[e] += b / bw + (0.0 if started[e] else p.copy_latency)
        busy_cmd[e] += overhead
        started[e] = True
        free[e] = start + t
        done.append(free[e])
    n_sync = 1 if variant == "b2b" else len(cmds)
    finish = [free[0]] if variant == "b2b" else sorted(done)
    t = 0.0
    for d in finish:
        t = max(t, d) + p.sync
    crit = max(range(n_eng), key=lambda e: free[e])
    sched = (p.trigger if prelaunch else len(cmds) * p.launch) + busy_cmd[crit]
    return DMATime(kind=kind, variant=variant, prelaunch=prelaunch, bytes=float(nbytes), ranks=ranks,
                   commands=len(cmds), syncs=n_sync, total=t, schedule=sched, copy=busy_copy[crit],
                   sync_time=n_sync * p.sync)


def single_copy_time(nbytes: float, params: DMAParams) -> DMATime:
    """One GPU-to-GPU DMA copy of nbytes: one launch, one command, one sync (the DMA-Latte breakdown)."""
    if nbytes <= 0 or not math.isfinite(nbytes):
        raise CostError(f"copy size must be a positive number of bytes, got {nbytes}")
    p = params
    bw = min(p.bw_per_engine, p.peer_bw, p.fabric_bw)
    copy = p.copy_latency + nbytes / bw
    total = p.launch + p.cmd_overhead + copy + p.sync
    return DMATime(kind="copy", variant="copy", prelaunch=False, bytes=float(nbytes), ranks=2, commands=1, syncs=1,
                   total=total, schedule=p.launch + p.cmd_overhead, copy=copy, sync_time=p.sync)


def all_variants(kind: str, nbytes: float, ranks: int, params: DMAParams) -> list[DMATime]:
    """Every applicable variant of a collective, each with and without pre-launch."""
    return [dma_collective_time(kind, nbytes, ranks, params, v, pl) for v in VARIANTS_FOR[kind] for pl in (False, True)]


def best_variant(kind: str, nbytes: float, ranks: int, params: DMAParams) -> DMATime:
    """The fastest variant (with or without pre-launch) for this size: the size-based selector."""
    return min(all_variants(kind, nbytes, ranks, params), key=lambda t: t.total)


def selector(kind: str, sizes, ranks: int, params: DMAParams) -> list[tuple[float, float, str]]:
    """Size ranges [lo, hi] and the variant the model picks there, merged where the pick repeats."""
    out: list[tuple[float, float, str]] = []
    for s in sizes:
        lab = best_variant(kind, s, ranks, params).label
        if out and out[-1][2] == lab:
            out[-1] = (out[-1][0], s, lab)
        else:
            out.append((s, s, lab))
    return out
