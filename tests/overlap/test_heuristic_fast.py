"""The selector's fast paths (estimate_time, pick, price_pair) give exactly what the plain scalar estimate gives.

_reference_estimate is the one-at-a-time estimate as first written (a dict of pair costs, attribute reads per task,
a fresh walk per pass): estimate_time must equal it to the last bit on every schedule of random pair shapes, and
pick / price_pair must choose as the reference estimates rank."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.hw import get_gpu
from c3kit.hw.future import project as project_gpu
from c3kit.overlap import OverlapProblem
from c3kit.overlap.costs import CostCache
from c3kit.overlap.evaluate import default_params, fastest
from c3kit.overlap.heuristic import _pair_cost, _serial_engine, estimate_time, pick
from c3kit.overlap.schedules import SCHEDULES, Ctx, build, check
from c3kit.sim.engine import alone_time
from c3kit.step.policy import AUTO_EXCLUDED, price_pair

PASSES = 3


def _ref_walk(tasks, dur):
    index = {t.name: i for i, t in enumerate(tasks)}
    start, end, last = [0.0] * len(tasks), [0.0] * len(tasks), {}
    for i, t in enumerate(tasks):
        s0 = last.get(t.stream, 0.0)
        for d in t.deps:
            s0 = max(s0, end[index[d]])
        start[i] = s0
        end[i] = last[t.stream] = s0 + dur[i]
    return start, end


def _reference_estimate(tasks, streams, res, params):
    n = len(tasks)
    if n == 0:
        return 0.0, 0.0
    prio = {s.name: s.priority for s in streams}
    S, H = res.sms, res.hbm_bw
    share = params.noprio_comm_sm_share
    alone = [alone_time(t, res) for t in tasks]
    work = [alone[i] - t.pre - t.post for i, t in enumerate(tasks)]
    start, end = _ref_walk(tasks, alone)
    free = max(end)
    hbm_use = [(t.work / work[i] * t.hbm if t.kind == "comm" else t.hbm) if work[i] > 0 else 0.0
               for i, t in enumerate(tasks)]
    rate = [t.work / work[i] if work[i] > 0 else 0.0 for i, t in enumerate(tasks)]
    every = (1 << res.links) - 1
    link_cap = [bin((t.links & every) or every).count("1") * res.link_bw / res.links for t in tasks]
    costs = {}
    for _ in range(PASSES - 1):
        order = sorted(range(n), key=lambda i: start[i])
        stretch = [0.0] * n
        for a, i in enumerate(order):
            for j in order[a + 1:]:
                if start[j] >= end[i]:
                    break
                ov = min(end[i], end[j]) - start[j]
                if ov <= 0:
                    continue
                for x, y in ((i, j), (j, i)):
                    if work[x] > 0:
                        if (x, y) not in costs:
                            costs[(x, y)] = _pair_cost(tasks[x], tasks[y], prio, S, H, share, params, hbm_use[y],
                                                       link_cap[x], rate[x], rate[y], res)
                        c = costs[(x, y)]
                        if end[y] <= end[x]:
                            c = c / (1.0 + c)
                        stretch[x] += ov / work[x] * c
        dur = [t.pre + t.post + work[i] * (1.0 + stretch[i]) for i, t in enumerate(tasks)]
        start, end = _ref_walk(tasks, dur)
    return max(end), free


def _gpu(name):
    if name.startswith("g"):  # a projected generation, as benchmarks/bench_scale.py sweeps them
        g, road = name[1:].split("-", 1)
        return project_gpu(get_gpu("H200-SXM"), road, int(g))
    return get_gpu(name)


GPUS = ["H200-SXM", "H100-SXM", "MI300X", "g2-balanced", "g4-compute-heavy", "g3-historical"]
problems = st.builds(
    lambda pat, r, em, en, ek: (pat, r, 1 << em, 1 << en, 1 << ek),
    st.sampled_from(["ag_gemm", "gemm_rs", "gemm_ar"]), st.sampled_from([2, 4, 8]),
    st.integers(6, 17), st.integers(8, 16), st.integers(8, 16))


@settings(max_examples=40, deadline=None)
@given(problems, st.sampled_from(GPUS))
def test_estimate_time_equals_the_reference_on_every_schedule(shape, hw):
    pat, r, m, n, k = shape
    g = _gpu(hw)
    prob = OverlapProblem(pat, m, n, k, "bf16", r)
    p = default_params(g.name)
    ctx = Ctx(prob, g, p, CostCache.shared(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic))
    engine = _serial_engine(ctx)
    seen = 0
    for spec in SCHEDULES.values():
        if check(spec, prob, g) is not None:
            continue
        tasks, streams = build(spec, ctx, engine)
        got = estimate_time(tasks, streams, ctx.res, p)
        want = _reference_estimate(tasks, streams, ctx.res, p)
        assert got == want, spec.name  # exact: the same floating-point operations in the same order
        seen += 1
    assert seen >= 2


def _reference_pick(prob, g):
    p = default_params(g.name)
    ctx = Ctx(prob, g, p, CostCache.shared(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic))
    engine = _serial_engine(ctx)
    best = None
    for order, (name, spec) in enumerate(SCHEDULES.items()):
        if name in AUTO_EXCLUDED or check(spec, prob, g) is not None or not spec.realizable(prob.pattern):
            continue
        tasks, streams = build(spec, ctx, engine)
        key = (_reference_estimate(tasks, streams, ctx.res, p)[0], not spec.prio, order, name)
        best = key if best is None or key < best else best
    return best[3]


@settings(max_examples=40, deadline=None)
@given(problems, st.sampled_from(GPUS))
def test_pick_and_price_equal_the_reference_ranking(shape, hw):
    pat, r, m, n, k = shape
    g = _gpu(hw)
    prob = OverlapProblem(pat, m, n, k, "bf16", r)
    if r > g.gpus_per_node:
        return
    want = _reference_pick(prob, g)
    assert pick(prob, g, exclude=AUTO_EXCLUDED) == want
    base, name, t = fastest(prob, g, list(dict.fromkeys([want, "serial"])))
    hide = base.serial - base.ideal
    saved = (base.serial - t) / hide if hide > 0 else 0.0
    price = price_pair(prob, g, "auto")
    assert price.schedule == name and (price.saved == saved or (math.isnan(saved) and math.isnan(price.saved)))
