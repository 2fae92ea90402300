"""Pick a schedule from static sizes without simulating: a critical-path estimate per candidate.

For every applicable, realizable schedule the selector builds its task graph (chunk sizes from M, N,
K, the GPU count and the collective's bytes; each task's time alone from c3kit.cost and the fabric),
then estimates its time by critical-path walks over the graph (stream order + dependencies), with
no event simulation and no resource sharing:

  walk 1: every task at its time alone;
  walk 2, 3: every task stretched by the tasks the previous walk overlapped it with, in proportion to
          the overlap (by c per unit of overlap if it ends inside the other task, by c / (1 + c) if the
          other ends first), with c:
    GEMM x transfer:     speed with the SMs an SM kernel leaves (k with priority, share x k without,
                         priced by the cost model on that many SMs) + the interference factor x u_comm
    transfer x GEMM:     an SM kernel's shortfall without priority (k / SMs it gets)
                         + comm_interference x the GEMM's share of the SMs
    transfer x transfer: on common links, each at half speed.
    GEMM x GEMM:         (two streams of one schedule; also GEMM x memory-bound kernel) the speeds the
                         simulator gives the two running together (sim.engine.compute_rates: SMs by
                         priority and cap, HBM shared), against the GEMM's speed alone.
  The schedule with the smallest estimate wins; exact ties go to a -prio variant, then to the earlier
  name in SCHEDULES.

The features shown with each choice are the estimate's parts: T_comm / T_comp, the candidate's
decomposition loss (DIL) and its estimated stretch from contention.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

from c3kit.hw.catalog import get_gpu
from c3kit.hw.model import GPU
from c3kit.overlap.costs import CostCache
from c3kit.overlap.problem import OverlapProblem
from c3kit.overlap.schedules import SCHEDULES, Ctx, build, build_key, check
from c3kit.sim.engine import Resources, Stream, Task, _compute_sm_rate, alone_time, compute_rates
from c3kit.sim.params import ContentionParams


# Critical-path walks: one at the alone times, then re-walks with the times stretched by the overlaps
# of the previous walk. The one fitted choice, made on the design split of `c3kit overlap eval`
# (2026-12-02): 2 walks 73.6% exact optimal picks, worst ratio 96.0%; 3 walks 90.2%, 96.0%;
# 4 walks 91.3% but worst 83.7% (the overlap pattern starts to swing between walks).
PASSES = 3


@dataclass(frozen=True)
class Estimate:
    """The selector's estimate for one candidate schedule."""

    schedule: str
    time: float  # s, estimated
    dil: float  # sum of its sub-GEMMs alone / whole GEMM alone - 1
    stretch: float  # estimated time / the same graph with no contention - 1
    comm: float = 0.0  # s, serial only: the whole collective(s) alone (T_comm)
    comp: float = 0.0  # s, serial only: the whole GEMM alone (T_comp)


def _walk(tasks: list[Task], dur: list[float], index: dict[str, int]) -> tuple[list[float], list[float]]:
    """Start and end of every task: after its deps and after the previous task of its stream (the
    builders list every task after its deps and its stream predecessors, so one pass suffices)."""
    return _walk_idx(_links_of(tasks, index), dur)


def _links_of(tasks: list[Task], index: dict[str, int]) -> list[tuple[int, ...]]:
    """The indices of the tasks each task waits for (the previous task of its stream, then its dependencies): what
    a walk needs of the graph."""
    last: dict[str, int] = {}
    out = []
    for i, t in enumerate(tasks):
        prev = last.get(t.stream)
        out.append(((prev,) if prev is not None else ()) + tuple(index[d] for d in t.deps))
        last[t.stream] = i
    return out


def _walk_idx(links: list[tuple[int, ...]], dur: list[float]) -> tuple[list[float], list[float]]:
    """_walk on a graph given as the indices each task waits for (_links_of)."""
    n = len(links)
    start = [0.0] * n
    end = [0.0] * n
    for i, waits in enumerate(links):
        s0 = 0.0
        for d in waits:
            e = end[d]
            if e > s0:
                s0 = e
        start[i] = s0
        end[i] = s0 + dur[i]
    return start, end


def estimate_time(tasks: list[Task], streams: list[Stream], res: Resources, params: ContentionParams,
                  _alone: list[float] | None = None, _links: list | None = None,
                  _walk0: tuple | None = None, _fids: list | None = None, _memo: tuple | None = None
                  ) -> tuple[float, float]:
    """(estimated time, time of the same graph without contention) by PASSES critical-path walks.

    _alone, _links, _walk0: the tasks' alone times, walk graph and walk at the alone times (_walk_idx) when the
    caller has them already. _fids, _memo: each task's fields by number (Ctx.fid) and the memos (_task_memo) of
    what the walks derive from one task's fields and from two tasks' fields side by side, shared by every estimate
    on that context's field cache."""
    n = len(tasks)
    if n == 0:
        return 0.0, 0.0
    prio = {s.name: s.priority for s in streams}
    S, H = res.sms, res.hbm_bw
    share = params.noprio_comm_sm_share
    links = _links if _links is not None else _links_of(tasks, {t.name: i for i, t in enumerate(tasks)})
    alone = _alone if _alone is not None else [alone_time(t, res) for t in tasks]
    start, end = _walk0 if _walk0 is not None else _walk_idx(links, alone)
    free = max(end)
    kk = None
    if _fids is not None and _memo is not None and None not in _fids:
        task_memo, costs = _memo
        get = task_memo.get
        info = list(map(get, _fids))
        if None in info:
            info = [_task_info(t, a, res) if x is None else x for t, a, x in zip(tasks, alone, info)]
            for f, x in zip(_fids, info):
                task_memo[f] = x
        # a pair's cost depends on the two tasks' fields and their streams' priorities: one integer key per task
        pr = [prio.get(t[1], 0) for t in tasks]
        if min(pr) >= 0 and max(pr) < _PRIOS:
            kk = [f * _PRIOS + q for f, q in zip(_fids, pr)]
            if max(kk) >= _KEY_SPAN:
                kk = None
    else:
        info = [_task_info(t, a, res) for t, a in zip(tasks, alone)]
    if kk is None:  # pair costs of this graph alone, by task index
        kk, costs = list(range(n)), {}
    work = list(map(_FIRST, info))
    fixed = list(map(_FIFTH, info))
    get = costs.get
    rng = range(n)
    for _ in range(PASSES - 1):
        order = sorted(rng, key=start.__getitem__)
        # (index, start, end, work, pair-cost key) in start order: one tuple unpacking per pair, not five lookups
        spans = list(zip(order, map(start.__getitem__, order), map(end.__getitem__, order),
                         map(work.__getitem__, order), map(kk.__getitem__, order)))
        stretch = [0.0] * n
        for a_pos, (i, _, end_i, work_i, k_i) in enumerate(spans):
            s_i = stretch[i]  # i gains nothing more from earlier tasks: sum its own terms locally, in the same order
            row_i = k_i * _KEY_SPAN
            for j, start_j, end_j, work_j, k_j in spans[a_pos + 1:]:
                if start_j >= end_i:
                    break
                ov = (end_i if end_i < end_j else end_j) - start_j
                if ov <= 0:
                    continue
                # both directions: how much i slows beside j, and j beside i
                if work_i > 0:
                    c = get(row_i + k_j)
                    if c is None:
                        c = costs[row_i + k_j] = _pair_cost(tasks[i], tasks[j], prio, S, H, share, params,
                                                            info[j][2], info[i][3], info[i][1], info[j][1], res)
                    # slowed to 1/(1+c) over the overlap: if j leaves first, i only loses the work it did
                    # not do in the window (c/(1+c) of it); if i ends inside j, all of i stretches by c
                    if end_j <= end_i:
                        c = c / (1.0 + c)
                    s_i += ov / work_i * c
                if work_j > 0:
                    c = get(k_j * _KEY_SPAN + k_i)
                    if c is None:
                        c = costs[k_j * _KEY_SPAN + k_i] = _pair_cost(tasks[j], tasks[i], prio, S, H, share, params,
                                                                     info[i][2], info[j][3], info[j][1], info[i][1],
                                                                     res)
                    if end_i <= end_j:
                        c = c / (1.0 + c)
                    stretch[j] += ov / work_j * c
            stretch[i] = s_i
        start, end = _walk_idx(links, [f + w * (1.0 + s) for f, w, s in zip(fixed, work, stretch)])
    return max(end), free


_FIRST, _FIFTH = itemgetter(0), itemgetter(4)  # a _task_info's work seconds and fixed latency

# pair-cost memo keys: (field number x _PRIOS + priority) of t, x _KEY_SPAN, + that of u (streams' priorities are
# small non-negative integers; a graph with others is estimated without the memo)
_PRIOS = 16
_KEY_SPAN = 1 << 40


def _task_memo(ctx: Ctx) -> tuple[dict, dict]:
    """The memos estimate_time shares between the estimates on ctx's field cache (its cost cache and contention
    parameters): per field number, what the walks derive from one task; per key pair, a pair cost."""
    key = ("estimate-memo", ctx.params)
    hit = ctx.cache.derived.get(key)
    if hit is None:
        hit = ctx.cache.derived[key] = ({}, {})
    return hit


def _task_info(t: Task, a: float, res: Resources) -> tuple[float, float, float, float, float]:
    """(work seconds, rate alone, bandwidth of HBM drawn alone, link capacity, fixed latency) of a task that takes a
    seconds alone: its work (a without its latencies), its B/s or work per second alone, the HBM it draws alone
    (comm: rate x HBM bytes per byte sent), the B/s of the links a transfer may use, its latencies."""
    # the fields by position: Task is a NamedTuple, and attribute lookups are slower
    _, _, t_work, kind, _, _, pre, post, _, _, _, t_links, t_hbm = t[:13]
    every = (1 << res.links) - 1
    w = a - pre - post
    if w > 0:
        r = t_work / w
        h = r * t_hbm if kind == "comm" else t_hbm
    else:
        r = h = 0.0
    return w, r, h, ((t_links & every) or every).bit_count() * res.link_bw / res.links, pre + post


_COMPUTE_PAIR: dict[tuple, float] = {}  # _pair_cost of two compute tasks by what the simulator's sharing reads of them


def _pair_cost(t: Task, u: Task, prio: dict, S: int, H: float, share: float, p: ContentionParams,
               u_hbm: float, t_link: float, t_rate: float = 0.0, u_rate: float = 0.0,
               res: Resources | None = None) -> float:
    """How much t slows (extra time per unit of overlap) while u runs beside it."""
    if t.kind == "compute" and t.category == "comp":
        if u.kind != "comm":
            # two kernels on two streams (PyTorch async TP issues its steps on two streams; a reduction beside a
            # GEMM) share SMs and HBM as the simulator shares them (sim.engine.compute_pair_rates)
            pt, pu = prio.get(t.stream, 0), prio.get(u.stream, 0)
            key = (t.sms, t.tiles, t.hbm, t.phi, t.curve, u.sms, u.tiles, u.hbm, u.phi, u.curve, S, H, pt > pu, pt < pu)
            hit = _COMPUTE_PAIR.get(key)
            if hit is None:
                if len(_COMPUTE_PAIR) >= 1 << 16:
                    _COMPUTE_PAIR.clear()
                both = compute_rates((t, u), S, H, (pt, pu))[0]
                hit = _COMPUTE_PAIR[key] = compute_rates((t,), S, H)[0] / both - 1.0 if both > 0 else 1.0
            return hit
        extra = (p.gemm_interference * t.phi + p.gemm_mem_interference * (1.0 - t.phi)) * u_hbm / H
        if u.sms > 0:
            taken = u.sms if prio.get(u.stream, 0) > prio.get(t.stream, 0) else u.sms * share
            own = t.sms if 0 < t.sms < S else S
            full = _compute_sm_rate(own, S, t.phi, t.tiles, t.curve)
            left = _compute_sm_rate(min(own, S - taken), S, t.phi, t.tiles, t.curve)
            if left > 0:
                extra += full / left - 1.0
        return extra
    if t.kind == "comm":
        if u.kind == "comm":
            return _link_cost(t, u, t_rate, u_rate, res)
        busy = min(u.sms if 0 < u.sms < S else S, u.tiles if u.tiles else S)
        extra = p.comm_interference * busy / S
        if t.sms > 0 and u.category == "comp" and prio.get(t.stream, 0) <= prio.get(u.stream, 0):
            got = max(t.sms * share, min(t.sms, S - busy))
            full = min(t.bw, t_link)
            extra += full / min(t.bw * got / t.sms, t_link) - 1.0
        return extra
    return 0.0


def _link_cost(t: Task, u: Task, t_rate: float, u_rate: float, res: Resources | None) -> float:
    """Slowdown of transfer t beside transfer u: waiting for DMA engines u holds, or sharing common links."""
    if res is None:
        return 1.0
    if t.engines and u.engines and t.engines + u.engines > res.dma_engines:
        return 1.0  # u holds engines t needs: they run one after the other, as if at half speed each
    every = (1 << res.links) - 1
    mt, mu = (t.links & every) or every, (u.links & every) or every
    common = bin(mt & mu).count("1")
    if not common:
        return 0.0
    per_link = res.link_bw / res.links
    nt, nu = bin(mt).count("1"), bin(mu).count("1")
    rt, ru = t_rate / nt, u_rate / nu  # B/s each puts on one of its links
    if rt + ru <= per_link or rt <= 0:
        return 0.0
    got = min(rt, max(per_link / 2.0, per_link - ru))
    return common / nt * (rt / got - 1.0)


def estimates(problem: OverlapProblem, gpu: GPU | str, params: ContentionParams | None = None,
              candidates: tuple[str, ...] | None = None, power: str = "burst") -> list[Estimate]:
    """Estimates of every applicable, realizable schedule (only `candidates` when given), fastest first."""
    from c3kit.overlap.evaluate import check_fits, default_params

    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    check_fits(problem, g)
    p = params if params is not None else default_params(g.name)
    ctx = Ctx(problem, g, p, CostCache.shared(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic, power=power))
    whole = ctx.gemm("gemm", "compute", problem.m, grouped=problem.pattern == "moe").work
    engine = _serial_engine(ctx)
    out = []
    for name, spec in SCHEDULES.items():
        if check(spec, problem, g) is not None or not spec.realizable(problem.pattern):
            continue
        if candidates is not None and name not in candidates:
            continue
        tasks, streams = build(spec, ctx, engine)
        t, free = estimate_time(tasks, streams, ctx.res, p)
        sub = sum(x.work for x in tasks if x.category == "comp")
        ser = spec.family == "serial"
        out.append(Estimate(name, t, sub / whole - 1.0 if whole > 0 else 0.0, t / free - 1.0 if free > 0 else 0.0,
                            free - sub if ser else 0.0, sub if ser else 0.0))
    # exact ties (the walks saw no SM conflict, so priority changed nothing in the estimate) go to the
    # -prio variant: in the simulator a higher-priority transfer is never slower, and it is first in HBM
    # arbitration among transfers; then to the earlier name
    out.sort(key=lambda e: (e.time, not SCHEDULES[e.schedule].prio))
    return out


def pick(problem: OverlapProblem, gpu: GPU | str, params: ContentionParams | None = None,
         power: str = "burst", _ctx: Ctx | None = None, exclude: frozenset = frozenset()) -> str:
    """select()'s choice among every applicable schedule not in `exclude`, found with fewer estimates (branch and
    bound).

    A candidate's estimate is never below its critical path at the tasks' alone times (the walks only stretch
    tasks), so candidates are estimated in order of that bound and those whose bound exceeds the best estimate
    so far are skipped: the same choice as select(), ties included (a skipped bound is strictly larger).
    """
    from c3kit.overlap.evaluate import check_fits, default_params

    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    check_fits(problem, g)
    p = params if params is not None else default_params(g.name)
    ctx = _ctx or Ctx(problem, g, p, CostCache.shared(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic, power=power))
    engine = _serial_engine(ctx)
    cands = []
    alone = ctx.alone  # by task object: schedules share the Ctx's cached tasks
    walked: dict[tuple, tuple] = {}  # by task list: a -prio variant shares its twin's tasks (schedules.build)
    res = ctx.res
    derived = ctx.cache.derived
    fget = ctx.fid.get

    for order, name, spec, bkey in _candidates(ctx, engine, exclude):
        hit = walked.get(bkey)
        if hit is None:
            tasks, _ = build(spec, ctx, engine)
            ids = list(map(id, tasks))
            times = list(map(alone.get, ids))
            if None in times:  # tasks built outside the field caches (barriers, reductions, local copies)
                times = [alone_time(t, res) if v is None else v for t, v in zip(tasks, times)]
            # the graph (streams, dependencies) of a schedule depends on its pattern and GPU count, not on sizes
            lkey = ("walk-graph", bkey, problem.pattern, problem.gpus)
            links = derived.get(lkey)
            if links is None:
                links = derived[lkey] = _links_of(tasks, {t.name: i for i, t in enumerate(tasks)})
            walk = _walk_idx(links, times)
            # the tasks' field numbers: looked up only for the candidates the bound lets through (below)
            hit = walked[bkey] = [max(walk[1], default=0.0), times, links, walk, ids, None]
        cands.append((hit[0], order, name, spec, hit))
    if not cands:
        return "serial"
    cands.sort(key=lambda c: (c[0], c[1]))
    best = None
    memo = _task_memo(ctx)
    for free, order, name, spec, hit in cands:
        if best is not None and free > best[0]:
            break
        _, times, links, walk, ids, fids = hit
        if fids is None:
            fids = hit[5] = list(map(fget, ids))
        tasks, streams = build(spec, ctx, engine)
        t, _ = estimate_time(tasks, streams, res, p, _alone=times, _links=links, _walk0=walk, _fids=fids, _memo=memo)
        key = (t, not spec.prio, order)
        if best is None or key < best:
            best = key + (name,)
    return best[3]


def _candidates(ctx: Ctx, engine: str, exclude: frozenset) -> tuple:
    """(order in SCHEDULES, name, spec, build key) of every schedule pick() weighs for ctx's problem: those not
    excluded that check() lets run and that are realizable. check() reads the pattern, the GPU count and whether
    m divides by its square (the GPU is the cost cache's), so the list is kept per those in the cache."""
    prob = ctx.p
    key = ("pick-candidates", prob.pattern, prob.gpus, prob.m % (prob.gpus * prob.gpus) == 0, engine, exclude)
    hit = ctx.cache.derived.get(key)
    if hit is None:
        hit = ctx.cache.derived[key] = tuple(
            (order, name, spec, build_key(spec, engine)) for order, (name, spec) in enumerate(SCHEDULES.items())
            if name not in exclude and check(spec, prob, ctx.gpu) is None and spec.realizable(prob.pattern))
    return hit


def _serial_engine(ctx: Ctx) -> str:
    """The faster engine for the whole collective(s), by the alone times of their tasks."""
    from c3kit.overlap.schedules import comm_of

    from c3kit.overlap.evaluate import _sm_measured

    colls = tuple(comm_of(ctx.p))
    key = ("serial_engine", ctx.params, ctx.n, colls)
    hit = ctx.cache.derived.get(key)
    if hit is None:
        hit = ctx.cache.derived[key] = _faster_engine(ctx)
    return hit


def _faster_engine(ctx: Ctx) -> str:
    from c3kit.overlap.schedules import comm_of

    from c3kit.overlap.evaluate import _sm_measured

    if ctx.gpu.dma.engines == 0 or _sm_measured(ctx.p, ctx.gpu):
        return "sm"
    tot = {}
    for eng in ("sm", "dma"):
        s = 0.0
        for kind, nbytes in comm_of(ctx.p):
            tasks = ctx.collective(kind, nbytes, eng)
            s += estimate_time(tasks, [], ctx.res, ctx.params)[0]
        tot[eng] = s
    return "dma" if tot["dma"] < tot["sm"] else "sm"


def select(problem: OverlapProblem, gpu: GPU | str, params: ContentionParams | None = None,
           candidates: tuple[str, ...] | None = None, power: str = "burst") -> tuple[str, list[str]]:
    """(schedule name, reasons) chosen from M, N, K, bytes, GPU count and hardware alone.

    candidates: the schedules the caller can run (a runtime's implementations); serial is always one.
    """
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    if candidates is not None:
        from c3kit.overlap.schedules import get_schedule

        for c in candidates:
            get_schedule(c)
        candidates = tuple(dict.fromkeys(("serial", *candidates)))
    est = estimates(problem, g, params, candidates, power)
    if not est:
        return "serial", ["no schedule applies; serial"]
    top = est[0]
    serial = next((e for e in est if e.schedule == "serial"), None)
    reasons = [f"{problem.pattern} on {g.name} ({g.scaleup.topology}, {g.dma.engines} DMA engines): "
               f"lowest critical-path estimate among {len(est)} schedules"]
    if serial is not None:
        t_comp, t_comm = serial.comp, serial.comm
        cls = "G-long" if t_comp > 1.15 * t_comm else "C-long" if t_comm > 1.15 * t_comp else "GC-equal"
        reasons.append(f"T_comp {t_comp * 1e6:.1f} us, T_comm {t_comm * 1e6:.1f} us: {cls}, "
                       f"ideal speedup {(t_comp + t_comm) / max(t_comp, t_comm):.3f}x")
    for e in est[:3]:
        reasons.append(f"{e.schedule}: est. {e.time * 1e6:.1f} us (DIL {e.dil:+.1%}, contention stretch {e.stretch:+.1%})")
    if serial is not None and top.schedule != "serial":
        reasons.append(f"serial: est. {serial.time * 1e6:.1f} us -> estimated speedup {serial.time / top.time:.3f}x")
    reasons.append(f"-> {top.schedule}: {SCHEDULES[top.schedule].summary}")
    return top.schedule, reasons


# --- evaluation ------------------------------------------------------------------------------------------
def scenario_table(hw: tuple[str, ...] = ("MI300X", "H200"), held_out: float = 0.5, seed: int = 0,
                   models: tuple[str, ...] | None = None, tokens: tuple[int, ...] | None = None, progress=None):
    """Every eval scenario simulated: (scenario, {realizable schedule: speedup}, seconds spent simulating).

    progress(done, total), when given, is called after every scenario.
    """
    import time as _time

    from c3kit.overlap.evaluate import evaluate
    from c3kit.overlap.scenarios import EVAL_MODELS, EVAL_TOKENS, scenarios

    gpus = {h: get_gpu(h) for h in hw}
    for g in gpus.values():  # one-time set-up (cost-curve fits, imports) is not per-operator time
        evaluate(OverlapProblem("ag_gemm", 4096, 1024, 1024, gpus=min(8, g.gpus_per_node)), g)
    out = []
    todo = scenarios(hw=hw, models=models or EVAL_MODELS, tokens=tokens or EVAL_TOKENS, held_out=held_out, seed=seed)
    for sc in todo:
        g = gpus[sc.hw]
        t0 = _time.perf_counter()
        res = evaluate(sc.problem, g)
        dt = _time.perf_counter() - t0
        out.append((sc, {r.schedule: r.speedup for r in res if r.realizable}, dt))
        if progress is not None:
            progress(len(out), len(todo))
    return out


def evaluate_heuristic(hw: tuple[str, ...] = ("MI300X", "H200"), held_out: float = 0.5, seed: int = 0,
                       table=None, models: tuple[str, ...] | None = None,
                       tokens: tuple[int, ...] | None = None, progress=None) -> dict:
    """Compare select() with the simulated optimum on every scenario; report per split.

    optimal_share counts picks whose simulated speedup equals the optimum's (to 1e-9); within_1pct_share
    those within 1%; ratios are the pick's speedup / the optimum's.
    """
    import time as _time

    table = table if table is not None else scenario_table(hw, held_out, seed, models, tokens, progress)
    gpus = {h: get_gpu(h) for h in hw}
    stats = {s: {"n": 0, "exact": 0, "within1": 0, "ratios": []} for s in ("design", "held-out")}
    misses = []
    t_sim = t_sel = 0.0
    for sc, sp, dt in table:
        t_sim += dt
        t0 = _time.perf_counter()
        pick, _ = select(sc.problem, gpus[sc.hw])
        t_sel += _time.perf_counter() - t0
        top_name = max(sp, key=sp.get)
        ratio = sp[pick] / sp[top_name]
        st = stats[sc.split]
        st["n"] += 1
        st["ratios"].append(ratio)
        st["exact"] += ratio >= 1.0 - 1e-9
        st["within1"] += ratio >= 0.99
        if ratio < 1.0 - 1e-9:
            misses.append({"split": sc.split, "hw": sc.hw, "model": sc.model, "pair": sc.label,
                           "problem": sc.problem.label(), "best": top_name, "chosen": pick, "ratio": ratio})
    out: dict = {}
    for s, st in stats.items():
        r = st["ratios"]
        out[s] = {"scenarios": st["n"], "optimal_share": st["exact"] / max(1, st["n"]),
                  "within_1pct_share": st["within1"] / max(1, st["n"]), "mean_ratio": sum(r) / max(1, len(r)),
                  "worst_ratio": min(r, default=1.0)}
    out["misses"] = sorted(misses, key=lambda h: h["ratio"])
    out["held_out_models"] = sorted({sc.model for sc, *_ in table if sc.split == "held-out"})
    out["ms_per_operator"] = 1e3 * t_sim / max(1, len(table))
    out["ms_per_select"] = 1e3 * t_sel / max(1, len(table))
    return out
