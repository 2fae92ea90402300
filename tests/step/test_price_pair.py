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
