"""The schedule design space: how one compute/communication pair is cut into tasks on streams.

Names read family-engine[-prio|-part][-gN]:
  family  serial | bulk | ring (shard-level P2P) | ficco (finer-grain all-to-all steps) | fused (tile-triggered)
  engine  sm (comm kernels on k SMs) | dma (copy engines, no SMs)
  -prio   comm streams get a higher priority (first claim on SMs and HBM bandwidth)
  -part   GEMMs are confined to SMs - partition_sms (SM partition / green context)
  -gN     ficco: N comm steps per compute chunk (compute granularity chosen independently)
docs/overlap.md has one paragraph and a timeline picture per family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from c3kit.errors import OverlapError
from c3kit.hw.model import GPU
from c3kit.overlap.costs import CostCache
from c3kit.overlap.problem import OverlapProblem
from c3kit.sim.engine import Resources, Stream, Task, alone_time
from c3kit.sim.params import ContentionParams

DEPENDENT = ("ag_gemm", "gemm_rs", "gemm_ar", "moe")


@dataclass(frozen=True)
class ScheduleSpec:
    """One point of the design space."""

    name: str
    family: str  # serial, bulk, ring, ficco, fused
    engine: str  # sm, dma ("best" for serial: the faster of the two for the whole collective)
    prio: bool = False
    part: bool = False
    group: int = 1  # ficco: comm steps per compute chunk
    summary: str = ""

    def patterns(self) -> tuple[str, ...]:
        """Patterns this schedule applies to."""
        if self.family == "serial":
            return (*DEPENDENT, "bulk")
        if self.family == "bulk":
            return ("bulk",)
        return DEPENDENT

    def realizable(self, pattern: str) -> bool:
        """False for what-if schedules that need hardware no catalog GPU has (T3 trackers with near-memory reduce)."""
        return not (self.family == "fused" and self.engine == "dma" and pattern in ("gemm_rs", "gemm_ar"))

    def needs_dma(self) -> bool:
        """True when the schedule moves data with DMA engines."""
        return self.engine == "dma"

    def to_dict(self) -> dict:
        """Plain data."""
        return {"name": self.name, "family": self.family, "engine": self.engine, "prio": self.prio,
                "part": self.part, "group": self.group, "summary": self.summary}


def _spec(name: str, summary: str) -> ScheduleSpec:
    parts = name.split("-")
    family = parts[0]
    engine = parts[1] if len(parts) > 1 else "best"
    group = 1
    for p in parts[2:]:
        if p.startswith("g") and p[1:].isdigit():
            group = int(p[1:])
    return ScheduleSpec(name, family, engine, "prio" in parts, "part" in parts, group, summary)


_DEFS = [
    ("serial", "GEMM and collective one after the other (the collective on its faster engine)"),
    ("bulk-sm", "independent GEMM and SM collective launched together, same priority"),
    ("bulk-sm-prio", "bulk, collective on a high-priority stream"),
    ("bulk-sm-part", "bulk, GEMM confined to the SMs the collective does not hold"),
    ("bulk-dma", "bulk, collective on DMA engines (ConCCL-style: one engine per peer)"),
    ("bulk-dma-prio", "bulk DMA, collective first in HBM arbitration"),
    ("bulk-dma-part", "bulk DMA, GEMM on fewer SMs to leave HBM queues to the copies"),
    ("ring-sm", "one chunk per GPU, P2P ring steps by an SM kernel, same priority (TE ring-exchange)"),
    ("ring-sm-prio", "ring steps by an SM kernel on a high-priority stream"),
    ("ring-sm-part", "ring steps by an SM kernel, GEMM chunks on a reserved SM partition"),
    ("ring-dma", "ring steps by copy engines (PyTorch async TP / symmetric memory)"),
    ("ring-dma-prio", "ring steps by copy engines, copies first in HBM arbitration"),
    ("ficco-sm", "FiCCO: shard split by GPU count, all-to-all steps over all links, SM kernel"),
    ("ficco-sm-prio", "FiCCO steps by an SM kernel on a high-priority stream"),
    ("ficco-sm-part", "FiCCO steps by an SM kernel, GEMM chunks on a reserved SM partition"),
    ("ficco-sm-prio-g2", "FiCCO SM prio, one compute chunk per two comm steps"),
    ("ficco-dma", "FiCCO steps on DMA engines (one engine per peer link)"),
    ("ficco-dma-prio", "FiCCO DMA, copies first in HBM arbitration"),
    ("ficco-dma-part", "FiCCO DMA, GEMM chunks on fewer SMs"),
    ("ficco-dma-g2", "FiCCO DMA, one compute chunk per two comm steps"),
    ("ficco-dma-prio-g2", "FiCCO DMA prio, one compute chunk per two comm steps"),
    ("fused-sm", "one fused kernel: output/input stages trigger in-kernel transfers by k SMs (Flux-like)"),
    ("fused-dma", "one GEMM kernel whose finished stages trigger pre-programmed DMA transfers (T3-like)"),
]
SCHEDULES: dict[str, ScheduleSpec] = {n: _spec(n, s) for n, s in _DEFS}


def get_schedule(name: str) -> ScheduleSpec:
    """A schedule by name, with a helpful error."""
    try:
        return SCHEDULES[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, list(SCHEDULES), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise OverlapError(f"unknown schedule {name!r}{hint} (known: {', '.join(SCHEDULES)})") from None


# ---------------------------------------------------------------------------------------------------
class Ctx:
    """Everything a builder needs: sizes, GPU, contention parameters, cost cache."""

    def __init__(self, prob: OverlapProblem, gpu: GPU, params: ContentionParams, cache: CostCache):
        self.p = prob
        self.gpu = gpu
        self.params = params
        self.cache = cache
        self.n = prob.gpus
        self.b = prob.elem_bytes
        self.res = Resources.from_gpu(gpu, params)
        self.S = gpu.sms
        self.k_sms = 0 if params.comm_sms == 0 else params.resolve_comm_sms(gpu.sms)
        self.part_sms = params.resolve_partition_sms(gpu.sms)
        self.sm_bw = params.resolve_sm_comm_bw(gpu.sms, gpu.scaleup.bw)
        self.topo = gpu.scaleup.topology
        self.L = gpu.scaleup.links_per_gpu
        self.lat = gpu.scaleup.latency
        self.dma_launch = gpu.dma.launch if params.dma_launch is None else params.dma_launch
        self.dma_sync = gpu.dma.sync if params.dma_sync is None else params.dma_sync
        self._tasks: dict[tuple, Task] = {}  # schedules share many identical tasks: build each once
        self._built: dict[tuple, list[Task]] = {}  # task lists by schedule shape (see build)
        self._fields = cache.derived.setdefault(("task-fields", params), {})
        self._fids = cache.derived.setdefault(("task-fids", params), {})
        self.alone: dict[int, float] = {}  # alone time of the tasks built here, by id (they live in _tasks)
        self._eager: float | None = params.eager_launch
        # each such task's fields by number (equal fields, one number): the selector memoizes what it derives from
        # a task's fields by that number (heuristic.estimate_time)
        self.fid: dict[int, int] = {}

    def _entry(self, t: Task) -> tuple:
        """A field-cache entry: the fields of t other than name, stream and deps, its alone time, their number."""
        fields = t[2:5] + t[6:]
        return t[2:5], t[6:], alone_time(t, self.res), self._fids.setdefault(fields, len(self._fids))

    def _cached(self, key: tuple, name: str, stream: str, deps: tuple[str, ...], make) -> Task:
        """The task of field-cache key `key` under this name, stream and deps (make() builds it the first time); kept
        in _tasks, as every task alone and fid know by id must be (an id is reused once its task is gone)."""
        tkey = (key, name, stream, deps)
        t = self._tasks.get(tkey)
        if t is None:
            f = self._fields.get(key)
            if f is None:
                t = make()
                f = self._fields[key] = self._entry(t)
            else:
                t = tuple.__new__(Task, (name, stream, *f[0], deps, *f[1]))
            self._tasks[tkey] = t
            self.alone[id(t)] = f[2]
            self.fid[id(t)] = f[3]
        return t

    def eager_launch(self) -> float:
        """s of host time per operation a Python loop issues (params.eager_launch, else the measured eager launch)."""
        if self._eager is None:
            from c3kit.cost.launch import eager_launch_s

            self._eager = eager_launch_s(self.gpu)
        return self._eager

    # --- building blocks ------------------------------------------------------------------------
    def link_mask(self, width: int, first: int = 0) -> int:
        """Links used when sending to `width` peers at once, starting at peer link `first` (0: the switch port)."""
        if self.topo == "switch":
            return 0
        mask = 0
        for j in range(min(width, self.L)):
            mask |= 1 << ((first + j) % self.L)
        return mask

    def comm(self, name: str, stream: str, nbytes: float, width: int, engine: str, *, reduce: bool = False,
             hops: int = 1, trigger: bool = False, deps: tuple[str, ...] = (), peer: int = 0) -> Task:
        """A transfer of nbytes (sent by this GPU) to `width` peers at once (from peer link `peer` on)."""
        key = ("c", name, stream, nbytes, width, engine, reduce, hops, trigger, deps, peer)
        hit = self._tasks.get(key)
        if hit is None:
            hit = self._tasks[key] = self._comm(name, stream, nbytes, width, engine, reduce, hops, trigger, deps, peer)
        return hit

    def _comm(self, name, stream, nbytes, width, engine, reduce, hops, trigger, deps, peer) -> Task:
        # a transfer's fields other than its name, stream and deps are the same for every pair shape on this
        # GPU and contention model: built once per cost cache (the sweep prices thousands of shapes)
        key = ("c", nbytes, width, engine, reduce, hops, trigger, peer)
        f = self._fields.get(key)
        if f is None:
            t = self._new_comm(name, stream, nbytes, width, engine, reduce, hops, trigger, deps, peer)
            f = self._fields[key] = self._entry(t)
        else:
            t = tuple.__new__(Task, (name, stream, *f[0], deps, *f[1]))
        self.alone[id(t)] = f[2]
        self.fid[id(t)] = f[3]
        return t

    def _new_comm(self, name, stream, nbytes, width, engine, reduce, hops, trigger, deps, peer) -> Task:
        pr = self.params
        lf = self.link_mask(width, peer)
        if engine == "sm":
            k = self.k_sms
            bw = k * self.sm_bw if k else math.inf
            pre = (pr.trigger_latency if trigger else pr.sm_launch) + hops * self.lat
            return Task(name, stream, nbytes, kind="comm", category="comm", deps=deps, pre=pre, post=pr.sm_sync,
                        sms=k, bw=bw, links=lf,
                        hbm=pr.reduce_hbm_factor if reduce else pr.copy_hbm_factor)
        e = min(width, self.gpu.dma.engines)
        rounds = math.ceil(width / e)
        pre = (pr.trigger_latency if trigger else self.dma_launch) + hops * self.lat
        return Task(name, stream, nbytes, kind="comm", category="comm", deps=deps, pre=pre,
                    post=rounds * self.dma_sync, engines=e, bw=e * self.gpu.dma.bw_per_engine, links=lf,
                    hbm=pr.reduce_hbm_factor if reduce else pr.copy_hbm_factor)

    def gemm(self, name: str, stream: str, rows: int, *, deps: tuple[str, ...] = (), cap: float = 0.0,
             grouped: bool = False, n_out: int | None = None) -> Task:
        """A (sub-)GEMM over `rows` rows of A (for moe: rows spread over the local experts)."""
        key = ("g", name, stream, rows, deps, cap, grouped, n_out)
        hit = self._tasks.get(key)
        if hit is None:
            hit = self._tasks[key] = self._gemm(name, stream, rows, deps, cap, grouped, n_out)
        return hit

    def _gemm(self, name, stream, rows, deps, cap, grouped, n_out) -> Task:
        p = self.p
        n_cols = p.n if n_out is None else n_out
        if grouped:
            e_loc = p.experts // p.gpus
            shape = (max(1, math.ceil(rows / e_loc)), n_cols, p.k, p.dtype, e_loc)
        else:
            shape = (rows, n_cols, p.k, p.dtype, 1)
        key = ("g", shape, cap)  # as for _comm: a sub-GEMM's fields depend on its shape and cap only
        f = self._fields.get(key)
        if f is None:
            c = self.cache.gemm(*shape)
            t = Task(name, stream, c.time, kind="compute", category="comp", deps=deps, sms=cap, hbm=c.hbm_rate,
                     phi=c.phi, tiles=c.tiles, curve=self.curve(shape, cap, partitioned=bool(cap)))
            f = self._fields[key] = self._entry(t)
        else:
            t = tuple.__new__(Task, (name, stream, *f[0], deps, *f[1]))
        self.alone[id(t)] = f[2]
        self.fid[id(t)] = f[3]
        return t

    def curve(self, shape: tuple, cap: float, partitioned: bool = False) -> tuple:
        """(SMs, speed) levels a GEMM meets: its own cap, and cap minus what comm kernels take (with and
        without priority); speeds from the cost model on that many SMs. A GEMM confined to an SM
        partition is priced by the contention model's measured partition rule instead
        (ContentionParams.partition_speed: overhead plus a term in the SMs it lost)."""
        top = int(cap) if cap else self.S
        if partitioned and top < self.S:
            c = self.cache.gemm(*shape)
            return ((top, self.params.partition_speed(c.phi, top, self.S, c.tiles)),)
        levels = {top}
        if not cap and self.k_sms:
            levels.add(self.S - self.k_sms)
            levels.add(self.S - int(math.ceil(self.k_sms * self.params.noprio_comm_sm_share)))
        return tuple((lv, self.cache.speed(*shape, lv)) for lv in sorted(levels, reverse=True))

    def stage(self, name: str, stream: str, whole: Task, frac: float, *, deps: tuple[str, ...] = (),
              cap: float = 0.0) -> Task:
        """A slice of one fused kernel: `frac` of its work, no kernel boundary of its own."""
        p = self.p
        if p.pattern == "moe":
            e_loc = p.experts // p.gpus
            shape = (max(1, math.ceil(p.m / e_loc)), p.n, p.k, p.dtype, e_loc)
        else:
            shape = (p.m, p.n, p.k, p.dtype, 1)
        # as for _gemm: a stage's fields depend on the kernel's shape, its fields and the slice only
        key = ("s", p.pattern == "moe", shape, p.m, frac, cap, whole.work, whole.hbm, whole.phi, whole.tiles)
        f = self._fields.get(key)
        if f is None:
            t = self._new_stage(name, stream, whole, frac, deps, cap, shape)
            f = self._fields[key] = self._entry(t)
        else:
            t = tuple.__new__(Task, (name, stream, *f[0], deps, *f[1]))
        self.alone[id(t)] = f[2]
        self.fid[id(t)] = f[3]
        return t

    def _new_stage(self, name, stream, whole, frac, deps, cap, shape) -> Task:
        eff = self.params.fused_gemm_efficiency
        p = self.p
        work, hbm = whole.work * frac, whole.hbm
        rows = max(1, round(frac * p.m))
        if p.pattern != "moe" and rows < p.m and p.k * p.n * self.b > self.gpu.l2_bytes:
            # the kernel computes row blocks as their data arrive (or as their output leaves); a weight matrix
            # B larger than L2 is streamed from HBM again for every stage, so a stage costs at least what
            # its rows cost as a GEMM of their own (the re-read B is most of a skinny GEMM's traffic)
            sub = self.cache.gemm(rows, p.n, p.k, p.dtype, 1)
            if sub.time > work:
                work, hbm = sub.time, sub.hbm_rate
        return Task(name, stream, work / eff, kind="compute", category="comp", deps=deps, sms=cap,
                    hbm=hbm * eff, phi=whole.phi, tiles=whole.tiles, curve=self.curve(shape, cap))

    def reduce(self, name: str, stream: str, nbytes: float, deps: tuple[str, ...]) -> Task:
        """A local reduction kernel (what DMA cannot do): reads and writes nbytes in total."""
        def make() -> Task:
            t = self.cache.mem(nbytes)
            # memory-bound: it saturates HBM with the comm SMs (k) and gains nothing from more
            return Task(name, stream, t, kind="compute", category="comm", deps=deps, hbm=nbytes / t, phi=0.0,
                        sms=float(max(1, self.k_sms)))

        return self._cached(("r", nbytes), name, stream, deps, make)

    def collective(self, kind: str, nbytes: float, engine: str, prefix: str = "", stream: str = "comm",
                   deps: tuple[str, ...] = (), red_stream: str | None = None) -> list[Task]:
        """A whole collective of S = nbytes as the library runs it (all links; ring latency for SM kernels)."""
        n = self.n
        w = n - 1
        ring_hops = 1 if self.topo == "mesh" else n - 1
        if kind in ("all_gather", "all_to_all"):
            hops = 1 if kind == "all_to_all" or engine == "dma" else ring_hops
            t = self.comm(f"{prefix}{kind}", stream, nbytes * w / n, w, engine, hops=hops, deps=deps)
            return [self._measured(t, kind, nbytes) if engine == "sm" else t]
        if kind in ("reduce_scatter", "all_reduce"):
            ar = kind == "all_reduce"
            if engine == "sm":
                t = self.comm(f"{prefix}{kind}", stream, nbytes * w / n * (2 if ar else 1), w, "sm", reduce=True,
                              hops=ring_hops * (2 if ar else 1), deps=deps)
                return [self._measured(t, kind, nbytes)]
            # DMA cannot reduce: copy the peers' pieces, reduce them with a small kernel, (all-reduce:) copy
            # the reduced shard back out; pipelined over n row chunks as a copy-engine library would
            out: list[Task] = []
            for c in range(n):
                piece = nbytes * w / n / n
                cp = self.comm(f"{prefix}rs-copy-{c}", stream, piece, w, "dma", deps=deps if c == 0 else ())
                red = self.reduce(f"{prefix}rs-reduce-{c}", red_stream or "reduce", nbytes * (1 + 1 / n) / n,
                                  (cp.name,))
                out += [cp, red]
                if ar:
                    out.append(self.comm(f"{prefix}ag-copy-{c}", "comm2", piece, w, "dma", deps=(red.name,)))
            return out
        raise OverlapError(f"unknown collective {kind!r}")


    def _measured(self, task: Task, kind: str, nbytes: float) -> Task:
        """A library (NCCL) collective on SM kernels at the rate its GPU's measured table gives
        (cost.collectives.measured_time), where there is one: alone it then takes the measured time, and
        under contention it shares links, SMs and HBM like any transfer."""
        from c3kit.cost.collectives import measured_time

        t_meas = measured_time(kind, self.n, nbytes, self.gpu.name)
        if t_meas is None or task.work <= 0:
            return task

        def make() -> Task:
            busy = t_meas - task.pre - task.post
            if busy <= 0:
                return task._replace(pre=t_meas - task.post if t_meas > task.post else 0.0, bw=math.inf)
            return task._replace(bw=task.work / busy)

        # as for the transfers: its fields depend on the library's transfer's and the measured time only
        return self._cached(("m", task[2:5], task[6:], t_meas), task.name, task.stream, task.deps, make)


def comm_of(prob: OverlapProblem) -> list[tuple[str, float]]:
    """The pattern's whole collectives as (kind, S) in order (moe: dispatch then combine)."""
    S = prob.collective_bytes()
    if prob.pattern == "ag_gemm":
        return [("all_gather", S)]
    if prob.pattern == "gemm_rs":
        return [("reduce_scatter", S)]
    if prob.pattern == "gemm_ar":
        return [("all_reduce", S)]
    if prob.pattern == "moe":
        return [("all_to_all", S), ("all_to_all", float(prob.m * prob.n * prob.elem_bytes))]
    return [(prob.collective, S)]


def whole_gemm(ctx: Ctx, name: str = "gemm", stream: str = "compute", deps: tuple[str, ...] = ()) -> Task:
    """The un-split GEMM of the problem."""
    return ctx.gemm(name, stream, ctx.p.m, deps=deps, grouped=ctx.p.pattern == "moe")


def check(spec: ScheduleSpec, prob: OverlapProblem, gpu: GPU) -> str | None:
    """Why a schedule cannot run this problem on this GPU, or None when it can."""
    if prob.pattern not in spec.patterns():
        return f"{spec.name} does not apply to the {prob.pattern} pattern"
    if spec.needs_dma() and gpu.dma.engines == 0:
        return f"{spec.name} needs DMA engines; {gpu.name} has none (use an -sm schedule)"
    n = prob.gpus
    if spec.family in ("ficco", "fused") and prob.m % (n * n):
        return (f"{spec.name} splits each shard by the GPU count: m = {prob.m} must divide by gpus^2 = {n * n}")
    if spec.family == "ficco" and n % spec.group:
        return f"{spec.name} groups {spec.group} steps per compute chunk: gpus = {n} must divide by {spec.group}"
    if n > gpu.gpus_per_node:
        return f"{n} GPUs do not fit in one {gpu.name} node ({gpu.gpus_per_node} GPUs)"
    return None


_STREAMS = {prio: [Stream("compute", 0), Stream("comm", prio), Stream("comm2", prio), Stream("reduce", prio)]
            for prio in (0, 1)}


def build(spec: ScheduleSpec, ctx: Ctx, comm_engine: str) -> tuple[list[Task], list[Stream]]:
    """Tasks and streams of one schedule; comm_engine is the engine of the serial schedule's collective."""
    prio = 1 if spec.prio else 0
    streams = list(_STREAMS[prio])
    # a -prio variant differs from its plain twin only in its streams' priorities (ring-dma alone is built
    # differently: PyTorch's async TP), so the task list is built once per context and shared
    key = build_key(spec, comm_engine)
    hit = ctx._built.get(key)
    if hit is None:
        hit = ctx._built[key] = _build_tasks(spec, ctx, comm_engine)
    return list(hit), streams


def build_key(spec: ScheduleSpec, comm_engine: str) -> tuple:
    """What a schedule's task list depends on besides the context: a -prio variant has its twin's key."""
    return (spec.family, spec.engine, spec.part, spec.group, spec.name == "ring-dma",
            comm_engine if spec.family == "serial" else "")


def _build_tasks(spec: ScheduleSpec, ctx: Ctx, comm_engine: str) -> list[Task]:
    cap = float(ctx.S - ctx.part_sms) if spec.part else 0.0
    fam, pat = spec.family, ctx.p.pattern
    if fam == "serial":
        return _serial(ctx, comm_engine)
    if fam == "bulk":
        g = ctx.gemm("gemm", "compute", ctx.p.m, cap=cap)
        return [g, *ctx.collective(ctx.p.collective, ctx.p.comm_bytes, spec.engine, red_stream="reduce")]
    if pat == "ag_gemm":
        return _ag(spec, ctx, cap)
    if pat in ("gemm_rs", "gemm_ar"):
        return _rs_ar(spec, ctx, cap)
    return _moe(spec, ctx, cap)


def _serial(ctx: Ctx, engine: str) -> list[Task]:
    p = ctx.p
    colls = comm_of(p)
    if p.pattern in ("ag_gemm", "moe"):
        first = ctx.collective(colls[0][0], colls[0][1], engine, prefix="in-", stream="comm")
        g = whole_gemm(ctx, deps=(first[-1].name,))
        out = [*first, g]
        if p.pattern == "moe":
            out += ctx.collective(colls[1][0], colls[1][1], engine, prefix="out-", stream="comm", deps=(g.name,))
        return out
    g = whole_gemm(ctx)
    return [g, *ctx.collective(colls[0][0], colls[0][1], engine, stream="comm", deps=(g.name,))]


def _steps(spec: ScheduleSpec, ctx: Ctx) -> tuple[int, int, int]:
    """(comm steps, peers per step, rows per step) of the input side: ring = one remote shard per step
    from one peer; ficco/fused = 1/gpus of every remote shard per step, from all peers at once."""
    n, m = ctx.n, ctx.p.m
    if spec.family == "ring":
        return n - 1, 1, m // n
    return n, n - 1, (n - 1) * m // (n * n)


def _input_side(spec: ScheduleSpec, ctx: Ctx, cap: float, step: str, grouped: bool) -> list[Task]:
    """The gathered-input side shared by all-gather -> GEMM and MoE dispatch -> grouped GEMM: the local
    shard's GEMM, the comm steps `step-j` that bring the remote rows, and after each group of steps the
    GEMM of the rows it brought (named gemm-c, depending on its last step)."""
    n, m, k, b = ctx.n, ctx.p.m, ctx.p.k, ctx.b
    eng = spec.engine
    fused = spec.family == "fused"
    nsteps, width, rows = _steps(spec, ctx)
    if fused and eng == "sm":
        cap = float(ctx.S - ctx.k_sms)
    whole = whole_gemm(ctx) if fused else None

    def part(name: str, r: int, deps: tuple[str, ...] = ()) -> Task:
        return (ctx.stage(name, "compute", whole, r / m, deps=deps, cap=cap) if fused
                else ctx.gemm(name, "compute", r, deps=deps, cap=cap, grouped=grouped))

    out: list[Task] = [part("gemm-local", m // n)]
    for j in range(nsteps):
        out.append(ctx.comm(f"{step}-{j}", "comm", rows * k * b, width, eng, trigger=fused,
                            peer=j if spec.family == "ring" else 0))
    group = spec.group if spec.family == "ficco" else 1
    for c in range(nsteps // group):
        out.append(part(f"gemm-{c}", rows * group, deps=(f"{step}-{(c + 1) * group - 1}",)))
    return out


def _ag(spec: ScheduleSpec, ctx: Ctx, cap: float) -> list[Task]:
    if spec.name == "ring-dma":
        return _symm_mem_ag(ctx, cap)
    return _input_side(spec, ctx, cap, "ag", grouped=False)


# --- PyTorch async TP (torch.distributed._symmetric_memory), ring-dma ---------------------------------------
# The decomposition as PyTorch implements it (_pipelined_all_gather_and_consume and
# _pipelined_produce_and_all2all behind fused_all_gather_matmul / fused_matmul_reduce_scatter): symmetric-memory
# barriers (one small SM kernel that signals every peer and waits for their flags), copies as contiguous
# `Tensor.copy_` calls (cudaMemcpyAsync: copy engines) that pull one peer's chunk per step, and the per-step
# work issued on two streams in turn (the current one and a backend stream) so that the sub-GEMMs of
# neighbouring steps may also overlap each other. The P2P copies of the two streams run one at a time in the
# order they are issued: PyTorch's own notes on both loops state that "cp" from different streams cannot
# overlap (torch/distributed/_symmetric_memory/__init__.py, _pipelined_multi_all_gather_and_consume and
# _pipelined_produce_and_all2all), so each copy also waits for the one issued before it.
#
# The loops are Python: the host issues every operation one by one, so none can start before the host has issued
# it (ContentionParams.eager_launch: the measured eager launch per operation, 0 under a CUDA graph). Each task
# below is one host-issued operation (a barrier kernel, a copy_, an mm.out, the sum); the host also issues
# operations that are no task here: each stream join (wait_stream) records an event on one stream and makes the
# other wait for it (two), and the reduce-scatter's torch.cuda._sleep(100) (one). The task `host-issue` (on its
# own stream, no resources) lasts the issue time of the whole loop and the last-issued task depends on it.
SYMM_STREAMS = ("compute", "comm")
HOST_STREAM = "host"
JOIN_OPS = 2  # host-issued operations per stream join: cudaEventRecord on one stream, cudaStreamWaitEvent on the other


def _barrier(ctx: Ctx, name: str, stream: str, deps: tuple[str, ...] = ()) -> Task:
    """A symmetric-memory barrier: a kernel start, one flag exchange over the fabric, the poll that sees it."""
    pr = ctx.params
    return Task(name, stream, 0.0, kind="comm", category="comm", deps=deps, pre=pr.sm_launch + ctx.lat,
                post=pr.sm_sync)


def host_ops(tasks: list[Task], joins: int, extra: int = 0) -> int:
    """Operations the host issues for a symm_mem loop: one per task, JOIN_OPS per stream join, and `extra` more."""
    return sum(1 for t in tasks if t.stream != HOST_STREAM) + joins * JOIN_OPS + extra


def _issued(ctx: Ctx, tasks: list[Task], joins: int, extra: int = 0) -> list[Task]:
    """The loop's tasks (in issue order) behind the host that issues them: `host-issue` lasts host_ops x the eager
    launch (0 s in a CUDA graph), and the last task, issued last, waits for it."""
    host = Task("host-issue", HOST_STREAM, 0.0, kind="comm", category="comm",
                pre=host_ops(tasks, joins, extra) * ctx.eager_launch())
    last = tasks[-1]
    return [host, *tasks[:-1], last._replace(deps=(*last.deps, host.name))]


def _local_copy(ctx: Ctx, name: str, stream: str, nbytes: float, deps: tuple[str, ...] = ()) -> Task:
    """A device-local copy of nbytes (read and write in HBM)."""
    t = ctx.cache.mem(2.0 * nbytes)
    return Task(name, stream, t, kind="compute", category="comm", deps=deps, hbm=2.0 * nbytes / t, phi=0.0, sms=1.0)


def _symm_mem_ag(ctx: Ctx, cap: float) -> list[Task]:
    """fused_all_gather_matmul: barrier, local shard into the symmetric buffer, barrier, local GEMM; then for
    each of the n-1 remote shards (streams in turn) pull it with a copy engine and run its GEMM; copy the
    local shard into the all-gather output; both streams joined by a last barrier."""
    n, m, k, b = ctx.n, ctx.p.m, ctx.p.k, ctx.b
    rows = m // n
    shard = rows * k * b
    cur, back = SYMM_STREAMS
    out: list[Task] = [_barrier(ctx, "barrier-0", cur), _local_copy(ctx, "mv", cur, shard),
                       _barrier(ctx, "barrier-1", cur), ctx.gemm("gemm-local", cur, rows, cap=cap)]
    first_back = True
    last = {cur: "gemm-local", back: ""}
    for j in range(1, n):
        st = back if j % 2 else cur
        # the backend stream waits for the current stream once, after the second barrier
        deps = ("barrier-1",) if st == back and first_back else ()
        first_back = first_back and st != back
        if j > 1:  # copies of the two streams do not overlap: after the one issued before
            deps = (*deps, f"ag-{j - 1}")
        cp = ctx.comm(f"ag-{j}", st, shard, 1, "dma", deps=deps, peer=j - 1)
        g = ctx.gemm(f"gemm-{j}", st, rows, cap=cap)
        out += [cp, g]
        last[st] = g.name
    st = cur if n % 2 == 0 else back
    out.append(_local_copy(ctx, "ag-out", st, shard))
    last[st] = "ag-out"
    out.append(_barrier(ctx, "barrier-end", cur, deps=tuple(x for x in last.values() if x)))
    # three stream joins: the backend stream waits for the current one after each of the first two barriers,
    # the current one for the backend stream before the last barrier
    return _issued(ctx, out, joins=3)


def _symm_mem_rs(ctx: Ctx, cap: float) -> list[Task]:
    """fused_matmul_reduce_scatter: for each of the n-1 peers (streams in turn) compute the peer's row chunk
    into this GPU's symmetric buffer, barrier, pull this GPU's chunk from that peer with a copy engine,
    barrier; then the local chunk, a last barrier and the sum of the n stacked partial chunks."""
    n, m, nn, b = ctx.n, ctx.p.m, ctx.p.n, ctx.b
    rows = m // n
    chunk = rows * nn * b
    cur, back = SYMM_STREAMS
    out: list[Task] = [_barrier(ctx, "barrier-0", cur)]
    last = {cur: "barrier-0", back: ""}
    for j in range(1, n):
        st = back if j % 2 else cur
        deps = ("barrier-0",) if st == back and not last[back] else ()
        g = ctx.gemm(f"gemm-{j}", st, rows, cap=cap, deps=deps)
        b1 = _barrier(ctx, f"barrier-{j}a", st)
        # copies of the two streams do not overlap: after the one issued before
        cp = ctx.comm(f"rs-{j}", st, chunk, 1, "dma", peer=j - 1, deps=(f"rs-{j - 1}",) if j > 1 else ())
        b2 = _barrier(ctx, f"barrier-{j}b", st)
        out += [g, b1, cp, b2]
        last[st] = b2.name
    out.append(ctx.gemm("gemm-local", cur, rows, cap=cap))
    last[cur] = "gemm-local"
    out.append(_barrier(ctx, "barrier-end", cur, deps=tuple(x for x in last.values() if x)))
    red = ctx.cache.mem(m * nn * b + chunk)
    out.append(Task("rs-sum", cur, red, kind="compute", category="comm", deps=("barrier-end",),
                    hbm=(m * nn * b + chunk) / red, phi=0.0))
    # two stream joins (the backend stream waits for the current one after the first barrier, the current one for
    # the backend stream before the last) and the one torch.cuda._sleep(100) (issued at step 2, or after the loop)
    return _issued(ctx, out, joins=2, extra=1)


def _rs_ar(spec: ScheduleSpec, ctx: Ctx, cap: float) -> list[Task]:
    n, m, nn, b = ctx.n, ctx.p.m, ctx.p.n, ctx.b
    eng = spec.engine
    fused = spec.family == "fused"
    ar = ctx.p.pattern == "gemm_ar"
    nmc = fused and eng == "dma"  # T3: the DMA target reduces near memory, no reduction kernel
    if fused and eng == "sm":
        cap = float(ctx.S - ctx.k_sms)
    whole = whole_gemm(ctx) if fused else None
    ring_hops = 1 if ctx.topo == "mesh" else n - 1
    out: list[Task] = []
    tail: list[str] = []
    if spec.name == "ring-dma" and not ar:
        return _symm_mem_rs(ctx, cap)
    if spec.family == "ring" and not ar:
        # chunk j holds peer j's rows; it is sent as soon as it is computed; own rows last
        rows = m // n
        for j in range(n):
            g = ctx.gemm(f"gemm-{j}", "compute", rows, cap=cap)
            out.append(g)
            if j < n - 1:
                out.append(ctx.comm(f"rs-{j}", "comm", rows * nn * b, 1, eng, reduce=eng == "sm", deps=(g.name,),
                                    peer=j))
                tail.append(f"rs-{j}")
        if eng == "dma":
            out.append(ctx.reduce("rs-reduce", "reduce", (n + 1) * rows * nn * b, (*tail, f"gemm-{n - 1}")))
        return out
    # ficco / fused (and ring for all-reduce): n compute chunks of m/n rows, each with all peers' pieces
    group = spec.group if spec.family == "ficco" else 1
    nchunks = n // group
    rows = m // nchunks
    chunk_bytes = rows * nn * b
    width = 1 if spec.family == "ring" else n - 1
    for c in range(nchunks):
        g = (ctx.stage(f"gemm-{c}", "compute", whole, rows / m, cap=cap) if fused
             else ctx.gemm(f"gemm-{c}", "compute", rows, cap=cap))
        out.append(g)
        hops = ring_hops if spec.family == "ring" else 1
        if eng == "sm" or nmc:
            nbytes = chunk_bytes * (n - 1) / n * (2 if ar else 1)
            out.append(ctx.comm(f"comm-{c}", "comm", nbytes, width, eng, reduce=True, hops=hops * (2 if ar else 1),
                                trigger=fused, deps=(g.name,)))
        else:
            cp = ctx.comm(f"rs-{c}", "comm", chunk_bytes * (n - 1) / n, width, eng, hops=hops, trigger=fused,
                          deps=(g.name,))
            red = ctx.reduce(f"reduce-{c}", "reduce", chunk_bytes * (1 + 1 / n), (cp.name,))
            out += [cp, red]
            if ar:
                out.append(ctx.comm(f"ag-{c}", "comm2", chunk_bytes * (n - 1) / n, width, eng, hops=hops,
                                    trigger=fused, deps=(red.name,)))
    return out


def _moe(spec: ScheduleSpec, ctx: Ctx, cap: float) -> list[Task]:
    """Dispatch steps -> grouped GEMM chunks, each chunk's output combined back as soon as it is computed."""
    _, width, rows = _steps(spec, ctx)
    rows *= spec.group if spec.family == "ficco" else 1
    out: list[Task] = []
    c = 0
    for t in _input_side(spec, ctx, cap, "dispatch", grouped=True):
        out.append(t)
        if t.name == f"gemm-{c}":
            out.append(ctx.comm(f"combine-{c}", "comm2", rows * ctx.p.n * ctx.b, width, spec.engine,
                                trigger=spec.family == "fused", deps=(t.name,),
                                peer=c if spec.family == "ring" else 0))
            c += 1
    return out
