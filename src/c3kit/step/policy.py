"""Overlap policies: how long a compute/comm pair takes when the two may run at the same time.

This is the seam for the detailed overlap schedules (T3, ConCCL, FiCCO, ...): the step projection
asks a policy for every pair it could overlap and never assumes more than the answer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
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
    """No overlap at all: every pair is serialized (the 'serial' bound of RESEARCH.md); --overlap none."""

    name = "none"

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

# The op-level stand-in for an NCCL collective beside compute on one GPU: the k-block SM copy kernel launched first
# on a high-priority stream, copying without pause for longer than the cuBLAS GEMMs beside it (device call 31,
# family gemm_under_comm, calib/h200-sxm-ops-gemm_under_comm.json). NCCL runs one thread block per channel; the rows
# with 8 to 32 blocks stand for its usual channel counts. Not yet measured with NCCL on several GPUs.
CONTENTION_GPU = "H200-SXM"
CONTENTION_BLOCKS = (8, 16, 32)


@dataclass(frozen=True)
class Contention:
    """What one measured compute / comm pair says: comm_rate, the copy's rate beside a GEMM over its rate alone;
    gemm_slowdown, the GEMM's time beside the copy over its time alone - 1 (both medians over `rows` rows)."""

    comm_rate: float
    gemm_slowdown: float
    rows: int


def contention_rows(gpu_name: str = CONTENTION_GPU) -> list[dict]:
    """The stand-in rows of the measured gemm_under_comm file (SM copy, no pause, CONTENTION_BLOCKS blocks, the copy
    busy over the whole GEMM window); C3kitError without them."""
    from c3kit.cost.calib_store import op_calibration_path, op_rows
    from c3kit.errors import C3kitError

    path = op_calibration_path(gpu_name, "gemm_under_comm")
    try:
        rows = op_rows(path)
    except C3kitError as e:
        raise C3kitError(f"no measured compute / comm contention for {gpu_name} ({e})") from None
    keep = [r for r in rows if r.get("comm") == "sm_copy" and r.get("duty") == 1.0 and r.get("covered")
            and r.get("blocks") in CONTENTION_BLOCKS]
    if not keep:
        raise C3kitError(f"{path.name} holds no SM copy rows at {CONTENTION_BLOCKS} blocks without pause")
    return keep


@functools.lru_cache(maxsize=4)
def measured_contention(gpu_name: str = CONTENTION_GPU) -> Contention:
    """The measured Contention of a GPU (medians over contention_rows; benchmarks/overlap_contention.py prints them)."""
    rows = contention_rows(gpu_name)
    rate = float(np.median([r["copy_under_Bps"] / r["copy_alone_Bps"] for r in rows]))
    slow = float(np.median([r["gemm_under_s"] / r["gemm_alone_s"] - 1.0 for r in rows]))
    return Contention(rate, slow, len(rows))


class ContendedOverlap:
    """Independent pairs overlap at measured rates: the comm moves at comm_rate of its speed while compute runs
    (which takes 1 + gemm_slowdown, never less than alone), then alone: c' + max(0, m - comm_rate x c'), at most
    serial. Dependent pairs: compute + comm."""

    name = "contended"

    def __init__(self, contention: Contention):
        from c3kit.errors import C3kitError

        if not 0.0 < contention.comm_rate <= 1.0:
            raise C3kitError(f"contention: comm_rate must be within (0, 1], got {contention.comm_rate}")
        self.contention = contention

    def pair_time(self, compute_s, comm_s, dependent: bool):
        """Dependent: c + m; independent: c (1 + slowdown) + the comm left after comm_rate of it, capped at c + m."""
        if dependent:
            return compute_s + comm_s
        c = compute_s * (1.0 + max(self.contention.gemm_slowdown, 0.0))
        return np.minimum(c + np.maximum(comm_s - self.contention.comm_rate * c, 0.0), compute_s + comm_s)


def contended_policy() -> ContendedOverlap:
    """--overlap contended: independent compute / comm pairs at the H200's measured contention."""
    return ContendedOverlap(measured_contention())


# --- the overlap engine in the step ------------------------------------------------------------------
FAMILIES = ("serial", "bulk", "ring", "ficco", "fused")
RULE_MODES = ("none", "simple", "contended")  # modes priced by a rule, no engine (base_policy)
BASE_MODES = (*RULE_MODES, "auto")
# `analyze` and `validate` price under this mode unless told otherwise: the op-level measurement (device call 31) says
# a collective beside a GEMM moves at about a fifth of its rate, so simple's full overlap of independent pairs is an
# upper bound that no measurement supports (README, docs/overlap_default.md).
DEFAULT_MODE = "contended"


def overlap_modes() -> tuple[str, ...]:
    """Every --overlap mode: none, simple, contended, auto, each schedule family and each schedule name."""
    from c3kit.overlap.schedules import SCHEDULES

    return (*BASE_MODES, *FAMILIES, *(n for n in SCHEDULES if n not in FAMILIES))


@dataclass(frozen=True)
class PairPrice:
    """What the overlap engine says about one collective-GEMM pair under one mode.

    saved: (serial - time) / min(T_comp, T_comm) of the engine: the share of the hideable time the
    schedule hides (1 = ideal overlap, 0 = serial, < 0 = slower than serial).
    """

    schedule: str
    saved: float


# Schedules `auto` does not recommend while their model fails its check against published measurements of the
# implementation they stand for (the fit split of overlap/data/published_overlap.csv, `c3kit overlap validate`):
# PyTorch's async TP (ring-dma and its -prio twin, the same tasks) is predicted 19-42% faster than measured on every
# row, an excess per step no op-level fact explains yet (docs/async_tp.md), so auto would advise it where it
# measured slower. They stay available by name or family. tests/step/test_auto_excluded.py re-checks the reason.
AUTO_EXCLUDED = frozenset({"ring-dma", "ring-dma-prio"})


@functools.lru_cache(maxsize=65536)
def price_pair(problem, gpu, mode: str, power: str = "burst") -> PairPrice | None:
    """Engine price of one pair under a mode (cached by distinct pair shape); None: the mode does not apply.

    auto: the selector's heuristic picks (never an AUTO_EXCLUDED schedule), the simulator prices the pick; a pick
    that loses to serial is replaced by serial. A family: the simulated best schedule of that family. A name: that schedule.
    """
    from c3kit.errors import C3kitError
    from c3kit.hw.catalog import get_gpu
    from c3kit.overlap.costs import CostCache
    from c3kit.overlap.evaluate import applicable, check_fits, default_params, fastest
    from c3kit.overlap.heuristic import pick
    from c3kit.overlap.schedules import SCHEDULES, Ctx

    try:
        ctx = None
        if mode == "auto":
            # the selector and the simulator share one context: the pick's tasks are built once
            g = get_gpu(gpu) if isinstance(gpu, str) else gpu
            check_fits(problem, g)
            p = default_params(g.name)
            ctx = Ctx(problem, g, p, CostCache.shared(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic, power=power))
            cands = list(dict.fromkeys([pick(problem, g, power=power, _ctx=ctx, exclude=AUTO_EXCLUDED), "serial"]))
        else:
            names = applicable(problem, gpu)
            if mode in FAMILIES:
                cands = [n for n in names if SCHEDULES[n].family == mode and SCHEDULES[n].realizable(problem.pattern)]
            else:
                cands = [mode] if mode in names else []
        if not cands:
            return None
        if ctx is not None and len(cands) == 2:
            # serial replaces the pick only when it simulates strictly faster: not simulated when its floor (below)
            # is already above the pick's time (the same answer as simulating both)
            base, name, t = fastest(problem, gpu, cands[:1], power=power, _ctx=ctx)
            if t >= serial_floor(ctx, base.comm_engine):
                _, _, t_serial = fastest(problem, gpu, ["serial"], power=power, _ctx=ctx)
                if t_serial < t:
                    name, t = "serial", t_serial
        else:
            base, name, t = fastest(problem, gpu, cands, power=power, _ctx=ctx)
    except C3kitError:
        return None
    hideable = base.serial - base.ideal
    saved = (base.serial - t) / hideable if hideable > 0 else 0.0
    return PairPrice(name, saved)


# The simulator's makespan of a chain of tasks, each alone, is the sum of their alone times up to rounding (a few ulps);
# a floor this far below that sum is never above it.
SERIAL_FLOOR_MARGIN = 1e-9


def serial_floor(ctx, comm_engine: str) -> float:
    """A time the serial schedule's simulation never beats on ctx: when its tasks form one chain (each waits for the
    one before: the GEMM and a collective of one task each), the sum of their alone times less SERIAL_FLOOR_MARGIN of
    it; else 0 (collectives pipelined over several tasks overlap among themselves)."""
    from c3kit.overlap.schedules import SCHEDULES, build
    from c3kit.sim.engine import alone_time

    tasks, _ = build(SCHEDULES["serial"], ctx, comm_engine)
    if tasks[0].deps or any(t.deps != (u.name,) for u, t in zip(tasks, tasks[1:])):
        return 0.0
    get = ctx.alone.get
    total = 0.0
    for t in tasks:
        a = get(id(t))
        total += alone_time(t, ctx.res) if a is None else a
    return total * (1.0 - SERIAL_FLOOR_MARGIN)


def base_policy(mode: str | None = None):
    """The rule-based policy of a non-engine mode (none, simple, contended; default DEFAULT_MODE): the engine
    modes' `base`."""
    from c3kit.errors import C3kitError

    mode = mode or DEFAULT_MODE
    rules = {"none": SerialOverlap, "simple": SimpleOverlap, "contended": contended_policy}
    if mode not in rules:
        raise C3kitError(f"an engine mode's base must be none, simple or contended, got {mode!r}")
    return rules[mode]()


class EngineOverlap:
    """Collective-GEMM pairs priced by the overlap engine (c3kit.overlap on the simulator), other pairs by `base`.

    base: the rule-based policy (none, simple, contended) of every pair the engine does not price (the
    data-parallel collectives, pairs no schedule applies to); default the DEFAULT_MODE's rule, so `auto` is the
    default plus the engine's picks. mode "auto": per pair the selector's pick, never worse than serial or than
    `base` (a pair whose collective hides behind independent compute under base keeps that); a family or schedule
    name: forced on every pair it applies to (a forced schedule may be slower than serial, and is reported so).
    The pair's exposed communication is m - saved x min(g, m), with g and m the step's own GEMM and
    collective times: the engine says which share of the hideable time a schedule hides.
    """

    def __init__(self, mode: str = "auto", power: str = "burst", patterns: tuple[str, ...] | None = None,
                 base=None):
        from c3kit.errors import C3kitError

        if mode not in overlap_modes() or mode in RULE_MODES:
            raise C3kitError(f"unknown engine overlap mode {mode!r}: use auto, a family ({', '.join(FAMILIES)}) "
                             "or a schedule name (`c3kit overlap --help`)")
        self.name = mode if patterns is None else f"{mode}[{','.join(patterns)}]"
        self.mode = mode
        self.power = power
        self.patterns = patterns  # only pairs of these patterns (e.g. T3 fuses GEMM + reduce-scatter only)
        self.base = base if base is not None else base_policy()

    def pair_time(self, compute_s, comm_s, dependent: bool):
        """Unbound use (no graph): the base policy's rule."""
        return self.base.pair_time(compute_s, comm_s, dependent)

    def bind(self, graph, gpu, problems=None) -> "BoundEngineOverlap":
        """The policy for one graph on one GPU; problems: {comm node: [OverlapProblem or None per scenario]}
        (the vectorized sweep's per-scenario sizes), default the graph's own sizes."""
        from c3kit.step.pairs import find_pairs, problem_of

        pairs = {i: p for i, p in find_pairs(graph).items() if self.patterns is None or p.pattern in self.patterns}
        saved: dict[int, np.ndarray] = {}
        sched: dict[int, list[str]] = {}
        for i, pr in pairs.items():
            probs = problems[i] if problems is not None else [problem_of(pr, graph)]
            prices = [price_pair(p, gpu, self.mode, self.power) if p is not None else None for p in probs]
            saved[i] = np.array([np.nan if x is None else x.saved for x in prices])
            sched[i] = [x.schedule if x is not None else "" for x in prices]
        bound = BoundEngineOverlap(self, pairs, saved, sched)
        if problems is None and (self.mode == "bulk" or self.mode.startswith("bulk-")):
            bound.dp_saved = {ph: self._dp_price(graph, gpu, ph) for ph in ("fwd", "bwd")}
        return bound

    def _dp_price(self, graph, gpu, phase: str) -> float:
        """saved share of a layer's data-parallel collectives (FSDP gathers, gradient reductions) run beside
        the layer's largest GEMM as an independent (bulk) pair; nan where the engine cannot take it
        (a group across nodes, no DP collective)."""
        from c3kit.errors import C3kitError
        from c3kit.overlap.problem import OverlapProblem
        from c3kit.workload.ops import Collective, Gemm

        layer = [nd for nd in graph.nodes if nd.scope == "layer" and nd.phase == phase]
        dp = [nd.op for nd in layer if nd.stream == "dp" and isinstance(nd.op, Collective)]
        gemms = [nd.op for nd in layer if isinstance(nd.op, Gemm)]
        if not dp or not gemms or any(c.span != "intra" or c.ranks < 2 for c in dp):
            return float("nan")
        g = max(gemms, key=lambda op: op.flops)
        c = max(dp, key=lambda op: op.bytes)
        try:
            prob = OverlapProblem("bulk", int(g.m * g.batch), int(g.n), int(g.k), graph.dtype, int(c.ranks),
                                  collective=c.kind, comm_bytes=float(sum(x.bytes for x in dp if x.kind == c.kind)))
        except C3kitError:
            return float("nan")
        price = price_pair(prob, gpu, self.mode, self.power)
        return float("nan") if price is None else price.saved


class BoundEngineOverlap:
    """EngineOverlap bound to one graph: per collective node, its GEMM partner and the engine's price."""

    def __init__(self, parent: EngineOverlap, pairs: dict, saved: dict, sched: dict):
        self.name = parent.name
        self.mode = parent.mode
        self.base = parent.base
        self.pairs = pairs
        self.saved = saved
        self.sched = sched
        self.exposed: dict[int, np.ndarray] = {}  # per instance, filled by blocking_exposure
        self.used: dict[int, np.ndarray] = {}  # True where the engine's schedule set the exposure
        self.dp_saved: dict[str, float] = {}  # forced bulk schedules: the DP-layer pair's saved share per phase

    def pair_time(self, compute_s, comm_s, dependent: bool):
        """Layer-level and data-parallel pairs: the base policy's rule."""
        return self.base.pair_time(compute_s, comm_s, dependent)

    def layer_pair_time(self, phase: str, compute_s, comm_s):
        """A layer's compute beside the data-parallel collectives of its neighbours: a forced bulk schedule's
        engine price (c + d - saved x min(c, d)), else the base policy's independent pair."""
        f = self.dp_saved.get(phase, float("nan"))
        if np.isnan(f):
            return self.base.pair_time(compute_s, comm_s, False)
        return compute_s + comm_s - f * np.minimum(compute_s, comm_s)

    def blocking_exposure(self, node: int, partner, t, dependent: bool) -> np.ndarray:
        """Exposed seconds of blocking collective `node` (per instance) beside `partner` seconds of compute
        (t: seconds per instance of every node, nodes x scenarios)."""
        m = t[node]
        base = np.clip(self.base.pair_time(partner, m, dependent) - partner, 0.0, m)
        pr = self.pairs.get(node)
        if pr is None:
            return base
        g = t[pr.gemm]
        f = self.saved[node]
        engine = m - np.nan_to_num(f, nan=0.0) * np.minimum(g, m)
        has = ~np.isnan(f) & np.ones_like(m, dtype=bool)
        if self.mode == "auto":
            use = has & (engine < base)
        else:
            use = has
        x = np.where(use, np.maximum(engine, 0.0), base)
        self.exposed[node] = x
        self.used[node] = use
        return x

    def schedule_of(self, node: int, scenario: int = 0) -> str:
        """The schedule that set a collective's exposure (the base policy's name where the engine's did not)."""
        use = self.used.get(node)
        if use is None or not bool(np.ravel(use)[min(scenario, np.size(use) - 1)]):
            return self.base.name
        s = self.sched.get(node) or [""]
        return s[min(scenario, len(s) - 1)] or self.base.name


def policy_for(mode: str, power: str = "burst"):
    """The policy of an --overlap mode (none, simple, contended, auto, a family or a schedule name); the engine
    modes price the pairs the engine does not take with the default mode's rule (base_policy())."""
    from c3kit.errors import C3kitError

    if mode in RULE_MODES:
        return base_policy(mode)
    if mode not in overlap_modes():
        import difflib

        close = difflib.get_close_matches(mode, overlap_modes(), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise C3kitError(f"unknown overlap policy {mode!r}{hint}: use none, simple, contended, auto, a family "
                         f"({', '.join(FAMILIES)}) or a schedule name from `c3kit overlap`")
    return EngineOverlap(mode, power, base=base_policy())
