"""step.policy.price_pair's auto path (selector and simulator on one shared context) against the plain path:
the selector's pick on its own context, then the simulator on a fresh one."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from c3kit.hw.catalog import get_gpu
from c3kit.overlap.evaluate import evaluate
from c3kit.overlap.heuristic import pick
from c3kit.overlap.problem import OverlapProblem
from c3kit.step.policy import AUTO_EXCLUDED, price_pair

GPUS = ("H200-SXM", "H100-SXM", "MI300X")


@settings(max_examples=12, deadline=None)
# the case where the plain selector's first choice is an excluded ring-dma schedule
@example(pattern="ag_gemm", r=2, m=5, n=12, k=11, gpu="H200-SXM", power="burst")
@given(pattern=st.sampled_from(["ag_gemm", "gemm_rs", "gemm_ar"]), r=st.sampled_from([2, 4, 8]),
       m=st.integers(0, 6), n=st.integers(8, 13), k=st.integers(8, 13), gpu=st.sampled_from(GPUS),
       power=st.sampled_from(["burst", "sustained"]))
def test_auto_price_is_the_plain_selector_then_simulator(pattern, r, m, n, k, gpu, power):
    g = get_gpu(gpu)
    prob = OverlapProblem(pattern, r * r * 2 ** (m + 4), 2 ** n, 2 ** k, "bf16", r)
    price_pair.cache_clear()
    got = price_pair(prob, g, "auto", power)
    chosen = pick(prob, g, power=power, exclude=AUTO_EXCLUDED)
    res = evaluate(prob, g, list(dict.fromkeys([chosen, "serial"])), power=power)
    top = res[0]
    hideable = top.serial - top.ideal
    assert got is not None
    assert got.schedule == top.schedule
    assert got.saved == ((top.serial - top.time) / hideable if hideable > 0 else 0.0)


def test_auto_price_of_a_group_larger_than_a_node_is_none():
    price_pair.cache_clear()
    assert price_pair(OverlapProblem("ag_gemm", 1024, 1024, 1024, "bf16", 16), get_gpu("H200-SXM"), "auto") is None


@settings(max_examples=40, deadline=None)
@given(pattern=st.sampled_from(["ag_gemm", "gemm_rs", "gemm_ar", "moe"]), r=st.sampled_from([2, 4, 8]),
       m=st.integers(0, 8), n=st.integers(6, 14), k=st.integers(6, 14), gpu=st.sampled_from((*GPUS, "B200")),
       engine=st.sampled_from(["sm", "dma"]))
def test_serial_floor_is_never_above_the_simulated_serial_schedule(pattern, r, m, n, k, gpu, engine):
    """price_pair skips simulating serial when the pick beats serial_floor: the floor must never exceed serial's
    simulated time (a chain of tasks alone), and is 0 where the collective's tasks overlap among themselves."""
    from c3kit.overlap.costs import CostCache
    from c3kit.overlap.evaluate import default_params
    from c3kit.overlap.schedules import SCHEDULES, Ctx, build
    from c3kit.sim.engine import makespan
    from c3kit.step.policy import serial_floor

    g = get_gpu(gpu)
    if r > g.gpus_per_node or (engine == "dma" and g.dma.engines == 0):
        return
    prob = OverlapProblem(pattern, r * 2 ** (m + 4), 2 ** n, 2 ** k, "bf16", r, experts=2 * r if pattern == "moe" else 0)
    p = default_params(g.name)
    ctx = Ctx(prob, g, p, CostCache.shared(g, p.tile_m, p.tile_n, p.gemm_hbm_traffic))
    tasks, streams = build(SCHEDULES["serial"], ctx, engine)
    floor = serial_floor(ctx, engine)
    assert 0.0 <= floor <= makespan(tasks, ctx.res, streams, p)
    chain = all(t.deps == (u.name,) for u, t in zip(tasks, tasks[1:]))
    assert (floor > 0) == (chain and not tasks[0].deps)
