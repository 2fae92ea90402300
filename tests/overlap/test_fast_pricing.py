"""The memoized pricing path (task fields, alone times, walk graphs, serial engines and collective baselines shared
by every pair shape of a cost cache; -prio twins sharing task lists; the selector's branch and bound) against the
plain scalar path: every schedule estimated on a fresh context whose cost cache has never seen another shape, by
the critical-path walks as first written (kept here verbatim as the reference), then the simulator on a fresh
context. Same chosen schedule, same times."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.hw.catalog import get_gpu
from c3kit.hw.future import project
from c3kit.overlap.costs import CostCache
from c3kit.overlap.evaluate import applicable, check_fits, default_params, evaluate
from c3kit.overlap.heuristic import PASSES, _pair_cost, _serial_engine, estimate_time, pick
from c3kit.overlap.problem import OverlapProblem
from c3kit.overlap.schedules import SCHEDULES, Ctx, build, check
from c3kit.sim.engine import alone_time
from c3kit.step.policy import AUTO_EXCLUDED, price_pair


def _gpu(name: str, gens: int, rule: str):
    g = get_gpu(name)
    return project(g, rule, gens) if gens else g


def _fresh_ctx(prob, g, power="burst"):
    """A context on a private cost cache: nothing memoized from other shapes."""
    p = default_params(g.name)
    return Ctx(prob, g, p, CostCache(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic, power=power))


def _ref_walk(tasks, dur, index):
    n = len(tasks)
    start, end, last = [0.0] * n, [0.0] * n, {}
    for i, t in enumerate(tasks):
        s0 = last.get(t.stream, 0.0)
        for d in t.deps:
            e = end[index[d]]
            if e > s0:
                s0 = e
        start[i] = s0
        end[i] = last[t.stream] = s0 + dur[i]
    return start, end


def _ref_estimate(tasks, streams, res, params):
    """heuristic.estimate_time as first written (one task list at a time, nothing shared)."""
    n = len(tasks)
    if n == 0:
        return 0.0, 0.0
    prio = {s.name: s.priority for s in streams}
    S, H = res.sms, res.hbm_bw
    share = params.noprio_comm_sm_share
    index = {t.name: i for i, t in enumerate(tasks)}
    alone = [alone_time(t, res) for t in tasks]
    work = [alone[i] - t.pre - t.post for i, t in enumerate(tasks)]
    start, end = _ref_walk(tasks, alone, index)
    free = max(end)
    hbm_use = [(t.work / work[i] * t.hbm if t.kind == "comm" else t.hbm) if work[i] > 0 else 0.0
               for i, t in enumerate(tasks)]
    rate = [t.work / work[i] if work[i] > 0 else 0.0 for i, t in enumerate(tasks)]
    all_links = (1 << res.links) - 1
    link_cap = [bin((t.links & all_links) or all_links).count("1") * res.link_bw / res.links for t in tasks]
    costs = {}
    for _ in range(PASSES - 1):
        order = sorted(range(n), key=lambda i: start[i])
        stretch = [0.0] * n
        for a_pos, i in enumerate(order):
            for j in order[a_pos + 1:]:
                if start[j] >= end[i]:
                    break
                ov = min(end[i], end[j]) - start[j]
                if ov <= 0:
                    continue
                for x, y in ((i, j), (j, i)):
                    if work[x] > 0:
                        c = costs.get((x, y))
                        if c is None:
                            c = costs[(x, y)] = _pair_cost(tasks[x], tasks[y], prio, S, H, share, params, hbm_use[y],
                                                           link_cap[x], rate[x], rate[y], res)
                        if end[y] <= end[x]:
                            c = c / (1.0 + c)
                        stretch[x] += ov / work[x] * c
        dur = [tasks[i].pre + tasks[i].post + work[i] * (1.0 + stretch[i]) for i in range(n)]
        start, end = _ref_walk(tasks, dur, {t.name: i for i, t in enumerate(tasks)})
    return max(end), free


def _ref_pick(prob, g, power="burst", exclude=frozenset()):
    """Every applicable, realizable schedule not in exclude estimated on its own fresh context; lowest (time, not prio,
    order)."""
    best = None
    for order, (name, spec) in enumerate(SCHEDULES.items()):
        if name in exclude or check(spec, prob, g) is not None or not spec.realizable(prob.pattern):
            continue
        ctx = _fresh_ctx(prob, g, power)
        tasks, streams = build(spec, ctx, _serial_engine(ctx))
        t, _ = _ref_estimate(tasks, streams, ctx.res, ctx.params)
        key = (t, not spec.prio, order, name)
        best = key if best is None or key < best else best
    return best[3] if best else "serial"


PROBLEM = dict(
    pattern=st.sampled_from(["ag_gemm", "gemm_rs", "gemm_ar", "moe"]), r=st.sampled_from([2, 4, 8]),
    m=st.integers(1, 96), n=st.integers(1, 64), k=st.integers(1, 64),
    gpu=st.sampled_from(["H200-SXM", "H100-SXM", "MI300X", "B200"]), gens=st.integers(0, 4),
    rule=st.sampled_from(["historical", "compute-heavy", "balanced"]))


def _problem(pattern, r, m, n, k):
    # rows a multiple of r*r (every family applies) or of r only (ficco / fused do not): both kinds of layout
    rows = (r * r if m % 3 else r) * 64 * m
    return OverlapProblem(pattern, rows, 128 * n, 128 * k, "bf16", r, experts=8 * r if pattern == "moe" else 0)


def _warm(g, power="burst"):
    """Price a few other shapes first so that the shared memos hold entries from shapes other than the one tested."""
    for pat, m in (("ag_gemm", 4096), ("gemm_rs", 8192), ("gemm_ar", 2048)):
        price_pair(OverlapProblem(pat, m, 4096, 2048, "bf16", 8 if g.gpus_per_node >= 8 else 2), g, "auto", power)


@settings(max_examples=30, deadline=None)
@given(**PROBLEM)
def test_shared_task_lists_equal_fresh_ones(pattern, r, m, n, k, gpu, gens, rule):
    g = _gpu(gpu, gens, rule)
    prob = _problem(pattern, r, m, n, k)
    if r > g.gpus_per_node:
        return
    _warm(g)
    p = default_params(g.name)
    shared = Ctx(prob, g, p, CostCache.shared(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic))
    fresh = _fresh_ctx(prob, g)
    assert _serial_engine(shared) == _serial_engine(fresh)
    eng = _serial_engine(fresh)
    for name in applicable(prob, g):
        got, got_streams = build(SCHEDULES[name], shared, eng)
        want, want_streams = build(SCHEDULES[name], _fresh_ctx(prob, g), eng)
        assert got == want and got_streams == want_streams, name
        assert [shared.alone.get(id(t), alone_time(t, shared.res)) for t in got] == \
            [alone_time(t, shared.res) for t in want]
        assert estimate_time(got, got_streams, shared.res, p) == _ref_estimate(want, want_streams, fresh.res, p)


@settings(max_examples=30, deadline=None)
@given(**PROBLEM, power=st.sampled_from(["burst", "sustained"]))
def test_fast_price_is_the_reference_selector_then_simulator(pattern, r, m, n, k, gpu, gens, rule, power):
    g = _gpu(gpu, gens, rule)
    prob = _problem(pattern, r, m, n, k)
    if r > g.gpus_per_node:
        return
    check_fits(prob, g)
    _warm(g, power)
    price_pair.cache_clear()
    got = price_pair(prob, g, "auto", power)
    assert pick(prob, g, power=power) == _ref_pick(prob, g, power)
    # auto never recommends an AUTO_EXCLUDED schedule (step.policy)
    chosen = _ref_pick(prob, g, power, AUTO_EXCLUDED)
    assert pick(prob, g, power=power, exclude=AUTO_EXCLUDED) == chosen
    res = evaluate(prob, g, list(dict.fromkeys([chosen, "serial"])), power=power, _ctx=_fresh_ctx(prob, g, power))
    top = res[0]
    hideable = top.serial - top.ideal
    assert got is not None and got.schedule == top.schedule
    assert got.saved == pytest.approx((top.serial - top.time) / hideable if hideable > 0 else 0.0, rel=1e-9, abs=1e-12)
    mine = evaluate(prob, g, [top.schedule, "serial"], power=power)
    for a in mine:
        b = next(x for x in res if x.schedule == a.schedule)
        assert a.time == pytest.approx(b.time, rel=1e-9) and a.serial == pytest.approx(b.serial, rel=1e-9)
        assert a.ideal == pytest.approx(b.ideal, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(pattern=st.sampled_from(["ag_gemm", "gemm_rs", "gemm_ar", "moe", "bulk"]), r=st.sampled_from([2, 4, 8]),
       m=st.integers(1, 300), n=st.integers(1, 64), k=st.integers(1, 64),
       gpu=st.sampled_from(["H200-SXM", "MI300X", "B200"]), excluded=st.booleans())
def test_kept_candidate_lists_equal_a_fresh_check(pattern, r, m, n, k, gpu, excluded):
    from c3kit.overlap.heuristic import _candidates

    g = get_gpu(gpu)
    # rows r x m: divisible by r^2 (every family applies) only when m is a multiple of r
    prob = OverlapProblem(pattern, r * m, 128 * n, 128 * k, "bf16", r, experts=r if pattern == "moe" else 0)
    _warm(g)  # the kept lists of other shapes (m a multiple of gpus^2) are in the shared cache
    p = default_params(g.name)
    ctx = Ctx(prob, g, p, CostCache.shared(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic))
    ex = AUTO_EXCLUDED if excluded else frozenset()
    eng = _serial_engine(ctx)
    want = [name for name, spec in SCHEDULES.items()
            if name not in ex and check(spec, prob, g) is None and spec.realizable(prob.pattern)]
    assert [c[1] for c in _candidates(ctx, eng, ex)] == want
