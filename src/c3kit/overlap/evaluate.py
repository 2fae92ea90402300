"""Evaluate schedules of one problem on one GPU with the timeline simulator, and report the common metrics."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Iterable

from c3kit.errors import OverlapError
from c3kit.hw.catalog import get_gpu
from c3kit.hw.model import GPU
from c3kit.overlap.costs import DEFAULT_COST_MODEL, CostCache
from c3kit.overlap.problem import OverlapProblem
from c3kit.overlap.schedules import SCHEDULES, Ctx, build, check, comm_of, get_schedule, whole_gemm
from c3kit.sim.engine import alone_time, makespan, simulate
from c3kit.sim.params import ContentionParams
from c3kit.sim.timeline import Timeline


@dataclass(frozen=True)
class Baseline:
    """Isolated times of the problem: the whole GEMM and the whole collective(s) alone."""

    t_comp: float  # s, the un-split GEMM alone
    t_comm: float  # s, the whole collective(s) alone on the faster engine
    comm_engine: str  # "sm" or "dma": the faster engine for the whole collective
    t_comm_sm: float
    t_comm_dma: float | None

    @property
    def serial(self) -> float:
        """T_comp + T_comm."""
        return self.t_comp + self.t_comm

    @property
    def ideal(self) -> float:
        """max(T_comp, T_comm)."""
        return max(self.t_comp, self.t_comm)

    @property
    def speedup_ideal(self) -> float:
        """S_ideal = serial / ideal."""
        return self.serial / self.ideal if self.ideal > 0 else 1.0

    @property
    def scenario(self) -> str:
        """G-long, C-long or GC-equal (within 15%)."""
        if self.t_comp > 1.15 * self.t_comm:
            return "G-long"
        if self.t_comm > 1.15 * self.t_comp:
            return "C-long"
        return "GC-equal"


@dataclass(frozen=True)
class ScheduleResult:
    """One schedule's simulated time and the metrics of RESEARCH.md (common metrics and FiCCO's losses)."""

    schedule: str
    rank: int
    time: float  # s, simulated T_concurrent
    serial: float  # s, T_comp + T_comm
    ideal: float  # s, max(T_comp, T_comm)
    speedup: float  # S_real = serial / time
    speedup_ideal: float  # S_ideal = serial / ideal
    fraction_of_ideal: float  # (S_real - 1) / (S_ideal - 1)
    dil: float  # decomposition inefficiency loss: sum(sub-GEMMs alone on the whole GPU) / GEMM alone - 1
    contention_comp: float  # GEMM tasks: time as scheduled / time alone on the whole GPU - 1 (SM partition included)
    contention_comm: float  # comm tasks: time overlapped / time alone - 1
    exposed_comm: float  # s of the timeline with no compute running
    realizable: bool  # False: needs hardware no catalog GPU has (what-if)
    engine: str
    family: str
    timeline: Timeline | None = field(default=None, compare=False, repr=False)

    @property
    def vs_ideal(self) -> float:
        """time / ideal (1.0 = ideal reached)."""
        return self.time / self.ideal if self.ideal > 0 else 1.0

    @property
    def contention_loss(self) -> float:
        """The compute side's contention loss (the FiCCO paper's main one)."""
        return self.contention_comp

    def to_dict(self) -> dict[str, Any]:
        """Plain data (without the timeline)."""
        return {"schedule": self.schedule, "rank": self.rank, "time": self.time, "serial": self.serial,
                "ideal": self.ideal, "speedup": self.speedup, "speedup_ideal": self.speedup_ideal,
                "fraction_of_ideal": self.fraction_of_ideal, "vs_ideal": self.vs_ideal, "dil": self.dil,
                "contention_comp": self.contention_comp, "contention_comm": self.contention_comm,
                "exposed_comm": self.exposed_comm, "realizable": self.realizable, "engine": self.engine,
                "family": self.family}


def _resolve(gpu: GPU | str, params: ContentionParams | None) -> tuple[GPU, ContentionParams]:
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    p = params if params is not None else default_params(g.name)
    return g, p


@functools.lru_cache(maxsize=256)
def default_params(gpu_name: str) -> ContentionParams:
    """The GPU's shipped contention calibration (read once per process); for a catalog GPU without one that
    takes its GEMM calibration from another GPU (cost/data/transfers.toml, e.g. H100-SXM from H200-SXM: the
    same GH100 die), that GPU's contention calibration, which measures how GEMMs and copies share the same
    SMs, L2 and memory pipeline; else ContentionParams()."""
    from c3kit.cost.basis import catalog_name, source_gpu
    from c3kit.sim.params import calibration_path

    if calibration_path(gpu_name) is None and catalog_name(gpu_name) == gpu_name:
        src = source_gpu(gpu_name, "gemm")
        if src is not None and src != gpu_name and calibration_path(src) is not None:
            return ContentionParams.from_calibration(src)
    return ContentionParams.from_calibration(gpu_name)


def baseline(problem: OverlapProblem, gpu: GPU | str, params: ContentionParams | None = None,
             cost_model=DEFAULT_COST_MODEL, _ctx: Ctx | None = None, power: str = "burst") -> Baseline:
    """Isolated T_comp and T_comm (the faster of SM and DMA engines for the whole collective)."""
    g, p = _resolve(gpu, params)
    check_fits(problem, g)
    ctx = _ctx or Ctx(problem, g, p, CostCache.shared(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic, cost_model, power))
    t_comp = alone_time(whole_gemm(ctx), ctx.res)

    colls = tuple(comm_of(problem))
    # the collectives' side depends on their sizes only: shared by every pair shape with the same collectives
    key = ("baseline_comm", p, problem.gpus, colls)
    memo = ctx.cache.derived if ctx.params is p and ctx.gpu is g else {}
    hit = memo.get(key)
    if hit is None:

        def comm_time(engine: str) -> float:
            """The whole collective(s) alone on one engine."""
            total = 0.0
            for kind, nbytes in colls:
                tasks = ctx.collective(kind, nbytes, engine)
                total += alone_time(tasks[0], ctx.res) if len(tasks) == 1 else simulate(tasks, ctx.res, (), p).makespan
            return total

        t_sm = comm_time("sm")
        t_dma = comm_time("dma") if g.dma.engines > 0 else None
        eng = "dma" if t_dma is not None and t_dma < t_sm and not _sm_measured(problem, g) else "sm"
        hit = memo[key] = (t_dma if eng == "dma" else t_sm, eng, t_sm, t_dma)
    return Baseline(t_comp, *hit)


def _sm_measured(problem: OverlapProblem, gpu: GPU) -> bool:
    """True when every collective of the problem is priced from the GPU's measured table (the library's default
    SM path, cost.collectives.measured_time): the serial baseline then keeps that measured path rather than a
    whole-collective copy-engine estimate that rests on assumed engine parameters (hw catalog dma sources)."""
    from c3kit.cost.collectives import measured_time

    return all(measured_time(kind, problem.gpus, nbytes, gpu.name) is not None for kind, nbytes in comm_of(problem))


def check_fits(problem: OverlapProblem, gpu: GPU) -> None:
    """Raise OverlapError when the group does not fit in one node of this GPU."""
    if problem.gpus > gpu.gpus_per_node:
        raise OverlapError(f"{problem.gpus} GPUs do not fit in one {gpu.name} node ({gpu.gpus_per_node} GPUs per node); "
                           f"use --gpus {gpu.gpus_per_node} or fewer")


def applicable(problem: OverlapProblem, gpu: GPU | str) -> list[str]:
    """Names of the schedules that can run this problem on this GPU."""
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    return [n for n, s in SCHEDULES.items() if check(s, problem, g) is None]


def evaluate(problem: OverlapProblem, gpu: GPU | str, schedules: Iterable[str] | None = None,
             params: ContentionParams | None = None, trace: bool = False,
             cost_model=DEFAULT_COST_MODEL, power: str = "burst", _ctx: Ctx | None = None) -> list[ScheduleResult]:
    """Simulate schedules (default: every applicable one) and return them ranked, fastest first.

    params: the contention model (default: the GPU's calibration file, else ContentionParams());
    trace: keep each schedule's Timeline with resource segments (for Perfetto export);
    cost_model: how c3kit.cost prices the (sub-)GEMMs (default "efficiency": the fitted curve);
    power: "burst" or "sustained" GEMM clocks (overlap.costs.gemm_pricing);
    _ctx: a Ctx of this very problem, GPU, params and cost cache to reuse (its tasks are pure functions of those).
    """
    g, p, names, ctx, base = _prepare(problem, gpu, schedules, params, cost_model, power, _ctx)
    serial, ideal, s_ideal = base.serial, base.ideal, base.speedup_ideal
    rows = []
    seen: dict[tuple, Timeline] = {}
    for name in names:
        spec = SCHEDULES[name]
        tasks, streams, key = _schedule(spec, ctx, base)
        tl = seen.get(key)
        if tl is None:
            tl = seen[key] = simulate(tasks, ctx.res, streams, p, record=trace)
        t = tl.makespan
        comp_alone = tl.alone_in("comp")
        comp_full = sum(t.work for t in tasks if t.category == "comp")  # sub-GEMMs alone on the whole GPU
        comm_alone = tl.alone_in("comm")
        s_real = serial / t if t > 0 else 1.0
        frac = (s_real - 1.0) / (s_ideal - 1.0) if s_ideal > 1.0 + 1e-12 else (1.0 if s_real >= 1.0 - 1e-12 else 0.0)
        rows.append((t, len(rows), dict(
            schedule=name, time=t, serial=serial, ideal=ideal, speedup=s_real, speedup_ideal=s_ideal,
            fraction_of_ideal=frac,
            dil=comp_full / base.t_comp - 1.0 if base.t_comp > 0 else 0.0,
            contention_comp=tl.time_in("comp") / comp_full - 1.0 if comp_full > 0 else 0.0,
            contention_comm=(sum(i.duration for i in tl.intervals if i.category == "comm") / comm_alone - 1.0
                             if comm_alone > 0 else 0.0),
            exposed_comm=max(0.0, t - tl.busy("comp")),
            realizable=spec.realizable(problem.pattern), engine=spec.engine if spec.family != "serial" else base.comm_engine,
            family=spec.family, timeline=tl if trace else None)))
    rows.sort(key=lambda r: (r[0], r[1]))
    return [ScheduleResult(rank=i + 1, **r[2]) for i, r in enumerate(rows)]


def fastest(problem: OverlapProblem, gpu: GPU | str, schedules: Iterable[str], params: ContentionParams | None = None,
            cost_model=DEFAULT_COST_MODEL, power: str = "burst", _ctx: Ctx | None = None) -> tuple[Baseline, str, float]:
    """(baseline, schedule, simulated time) of the fastest of `schedules`: evaluate()'s first row (ties to the
    earlier name) without the metrics and timelines it also builds, for callers that need only the time."""
    _, p, names, ctx, base = _prepare(problem, gpu, schedules, params, cost_model, power, _ctx)
    seen: dict[tuple, float] = {}
    top = None
    for name in names:
        tasks, streams, key = _schedule(SCHEDULES[name], ctx, base)
        t = seen.get(key)
        if t is None:
            t = seen[key] = makespan(tasks, ctx.res, streams, p)
        if top is None or t < top[1]:
            top = (name, t)
    return base, top[0], top[1]


def _prepare(problem, gpu, schedules, params, cost_model, power, _ctx):
    """What evaluate and fastest share: GPU, contention params, checked schedule names, context and baseline."""
    g, p = _resolve(gpu, params)
    check_fits(problem, g)
    if schedules is None:
        names = applicable(problem, g)
    else:
        names = list(schedules)
        if not names:
            raise OverlapError("no schedules asked for")
        for name in names:
            why = check(get_schedule(name), problem, g)
            if why:
                raise OverlapError(why)
    ctx = _ctx or Ctx(problem, g, p, CostCache.shared(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic, cost_model, power))
    return g, p, names, ctx, baseline(problem, g, p, _ctx=ctx)


def _schedule(spec, ctx: Ctx, base: Baseline) -> tuple[list, list, tuple]:
    """A schedule's tasks and streams, and the key under which two schedules simulate alike."""
    tasks, streams = build(spec, ctx, base.comm_engine)
    return tasks, streams, (tuple(tasks), _effective_streams(tasks, streams))


def _effective_streams(tasks, streams) -> tuple:
    """Stream priorities as far as they can change a result: they steer only SM allocation, so when no
    task on a raised stream uses SMs they are all equivalent to priority 0 (same task graph, same timeline)."""
    raised = {s.name for s in streams if s.priority}
    if not any(t.stream in raised and (t.sms > 0 or t.kind == "compute") for t in tasks):
        return ()
    return tuple(streams)


def best(results: list[ScheduleResult], realizable_only: bool = True) -> ScheduleResult:
    """The fastest result (of the realizable ones by default)."""
    for r in results:
        if r.realizable or not realizable_only:
            return r
    return results[0]
