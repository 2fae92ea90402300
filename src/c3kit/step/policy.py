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

# The op-level stand-in for an NCCL collective beside compute on one GPU: a same-priority SM copy kernel (8, 32 and
# 132 blocks) launched beside a cuBLAS GEMM, `c3kit bench c3` on the H200 (calib/h200-sxm-c3.json, docs/measurements.md
# run 2). Not yet measured with NCCL on several GPUs.
CONTENTION_GPU = "H200-SXM"
CONTENTION_VARIANTS = ("sm-copy-k8", "sm-copy-k32", "sm-copy-k132")


@functools.lru_cache(maxsize=4)
def measured_contention_alpha(gpu_name: str = CONTENTION_GPU) -> float:
    """SlowdownOverlap's alpha from the measured C3 rows: 1 - the mean fraction of the ideal overlap speedup that the
    CONTENTION_VARIANTS realized (SlowdownOverlap realizes 1 - alpha of it), clipped to [0, 1]; C3kitError without
    the calibration. benchmarks/overlap_alpha.py prints the derivation beside the two-stream gemm_pair rows."""
    import json

    from c3kit.cost.calib_store import calib_dir, calibration_path
    from c3kit.errors import C3kitError

    path = calibration_path(gpu_name, "c3", calib_dir())
    try:
        doc = json.loads(path.read_text())
        rows = [dict(zip(doc["columns"], r)) for r in doc["rows"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise C3kitError(f"no measured C3 table for {gpu_name} ({path.name}: {e})") from None
    f = [float(r["fraction_of_ideal"]) for r in rows if r.get("variant") in CONTENTION_VARIANTS
         and r.get("fraction_of_ideal") is not None]
    if not f:
        raise C3kitError(f"{path.name} holds no same-priority SM copy rows ({', '.join(CONTENTION_VARIANTS)})")
    return float(np.clip(1.0 - np.mean(f), 0.0, 1.0))


def contended_policy() -> SlowdownOverlap:
    """--overlap contended: independent compute / comm pairs slow each other down by the measured alpha."""
    pol = SlowdownOverlap(measured_contention_alpha())
    pol.name = "contended"
    return pol


# --- the overlap engine in the step ------------------------------------------------------------------
FAMILIES = ("serial", "bulk", "ring", "ficco", "fused")
BASE_MODES = ("none", "simple", "auto")


def overlap_modes() -> tuple[str, ...]:
    """Every --overlap mode: none, simple, auto, each schedule family and each schedule name."""
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
        base, name, t = fastest(problem, gpu, cands, power=power, _ctx=ctx)
    except C3kitError:
        return None
    hideable = base.serial - base.ideal
    saved = (base.serial - t) / hideable if hideable > 0 else 0.0
    return PairPrice(name, saved)


class EngineOverlap:
    """Collective-GEMM pairs priced by the overlap engine (c3kit.overlap on the simulator).

    mode "auto": per pair the selector's pick, never worse than serial or than `simple` (a pair whose
    collective already hides behind independent compute keeps that); a family or schedule name:
    forced on every pair it applies to (a forced schedule may be slower than serial, and is reported
    so); other pairs and the data-parallel collectives keep `simple`'s dependency-only overlap.
    The pair's exposed communication is m - saved x min(g, m), with g and m the step's own GEMM and
    collective times: the engine says which share of the hideable time a schedule hides.
    """

    def __init__(self, mode: str = "auto", power: str = "burst", patterns: tuple[str, ...] | None = None):
        from c3kit.errors import C3kitError

        if mode not in overlap_modes() or mode in ("none", "simple"):
            raise C3kitError(f"unknown engine overlap mode {mode!r}: use auto, a family ({', '.join(FAMILIES)}) "
                             "or a schedule name (`c3kit overlap --help`)")
        self.name = mode if patterns is None else f"{mode}[{','.join(patterns)}]"
        self.mode = mode
        self.power = power
        self.patterns = patterns  # only pairs of these patterns (e.g. T3 fuses GEMM + reduce-scatter only)

    def pair_time(self, compute_s, comm_s, dependent: bool):
        """Unbound use (no graph): simple's rule."""
        return SimpleOverlap().pair_time(compute_s, comm_s, dependent)

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
        self.pairs = pairs
        self.saved = saved
        self.sched = sched
        self.exposed: dict[int, np.ndarray] = {}  # per instance, filled by blocking_exposure
        self.used: dict[int, np.ndarray] = {}  # True where the engine's schedule set the exposure
        self.dp_saved: dict[str, float] = {}  # forced bulk schedules: the DP-layer pair's saved share per phase

    def pair_time(self, compute_s, comm_s, dependent: bool):
        """Layer-level and data-parallel pairs: simple's rule."""
        return SimpleOverlap().pair_time(compute_s, comm_s, dependent)

    def layer_pair_time(self, phase: str, compute_s, comm_s):
        """A layer's compute beside the data-parallel collectives of its neighbours: a forced bulk schedule's
        engine price (c + d - saved x min(c, d)), else simple's max(c, d)."""
        f = self.dp_saved.get(phase, float("nan"))
        if np.isnan(f):
            return SimpleOverlap().pair_time(compute_s, comm_s, False)
        return compute_s + comm_s - f * np.minimum(compute_s, comm_s)

    def blocking_exposure(self, node: int, partner, t, dependent: bool) -> np.ndarray:
        """Exposed seconds of blocking collective `node` (per instance) beside `partner` seconds of compute
        (t: seconds per instance of every node, nodes x scenarios)."""
        m = t[node]
        simple = np.clip(SimpleOverlap().pair_time(partner, m, dependent) - partner, 0.0, m)
        pr = self.pairs.get(node)
        if pr is None:
            return simple
        g = t[pr.gemm]
        f = self.saved[node]
        engine = m - np.nan_to_num(f, nan=0.0) * np.minimum(g, m)
        has = ~np.isnan(f) & np.ones_like(m, dtype=bool)
        if self.mode == "auto":
            use = has & (engine < simple)
        else:
            use = has
        x = np.where(use, np.maximum(engine, 0.0), simple)
        self.exposed[node] = x
        self.used[node] = use
        return x

    def schedule_of(self, node: int, scenario: int = 0) -> str:
        """The schedule that set a collective's exposure ('simple' where the engine's did not)."""
        use = self.used.get(node)
        if use is None or not bool(np.ravel(use)[min(scenario, np.size(use) - 1)]):
            return "simple"
        s = self.sched.get(node) or [""]
        return s[min(scenario, len(s) - 1)] or "simple"


def policy_for(mode: str, power: str = "burst"):
    """The policy of an --overlap mode (none, simple, auto, a family or a schedule name)."""
    from c3kit.errors import C3kitError

    if mode == "none":
        return SerialOverlap()
    if mode == "simple":
        return SimpleOverlap()
    if mode == "contended":
        return contended_policy()
    if mode not in overlap_modes():
        import difflib

        close = difflib.get_close_matches(mode, overlap_modes(), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise C3kitError(f"unknown overlap policy {mode!r}{hint}: use none, simple, contended, auto, a family "
                         f"({', '.join(FAMILIES)}) or a schedule name from `c3kit overlap`")
    return EngineOverlap(mode, power)
