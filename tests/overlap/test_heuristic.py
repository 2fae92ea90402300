"""The selector: its estimate is exact where nothing overlaps, and its picks are close to the simulated optimum."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.overlap import OverlapProblem, best, evaluate, select
from c3kit.overlap.heuristic import estimates

CASES = [
    ("ag_gemm", 8192, 1280, 8192, 0), ("gemm_rs", 8192, 8192, 1024, 0), ("gemm_ar", 4096, 8192, 3584, 0),
    ("moe", 4096, 14336, 4096, 8), ("bulk", 8192, 8192, 8192, 0), ("ag_gemm", 1024, 512, 4096, 0),
]


def test_known_weak_spot_many_small_experts():
    # 64 experts of 2048 columns with a near-zero no-priority SM share (H200 calibration): the estimate
    # over-counts dispatch/combine sharing and, since partitioned GEMMs are priced by the measured
    # green-context rule (2026-12-02), under-counts ficco-sm-part (est. 730 us, simulated 820 us); the
    # pick is 78% of the optimum (outside the eval set; it was 88% before the partition pricing)
    p = OverlapProblem("moe", 16384, 2048, 4096, experts=64)
    res = evaluate(p, "H200")
    name, _ = select(p, "H200")
    assert next(r for r in res if r.schedule == name).speedup >= 0.75 * best(res).speedup


@pytest.mark.parametrize("hw", ["H200", "MI300X"])
@pytest.mark.parametrize("pattern, m, n, k, e", CASES)
def test_serial_estimate_is_exact_and_picks_are_near_optimal(hw, pattern, m, n, k, e):
    p = OverlapProblem(pattern, m, n, k, experts=e)
    res = evaluate(p, hw)
    est = {x.schedule: x for x in estimates(p, hw)}
    sim = {r.schedule: r for r in res}
    assert est["serial"].time == pytest.approx(sim["serial"].time, rel=1e-9)
    assert set(est) == {r.schedule for r in res if r.realizable}
    name, reasons = select(p, hw)
    assert name == min(est.values(), key=lambda x: x.time).schedule
    assert sim[name].speedup >= 0.95 * best(res).speedup
    assert any(name in r for r in reasons)


@settings(max_examples=25, deadline=None)
@given(pattern=st.sampled_from(["ag_gemm", "gemm_rs", "gemm_ar", "moe"]), m=st.sampled_from([512, 2048, 8192, 32768]),
       n=st.sampled_from([1024, 4096, 16384]), k=st.sampled_from([1024, 4096, 16384]),
       hw=st.sampled_from(["H200-SXM", "H100-SXM", "MI300X"]))
def test_pick_is_select_with_fewer_estimates(pattern, m, n, k, hw):
    from c3kit.overlap.heuristic import pick

    prob = OverlapProblem(pattern, m, n, k, "bf16", 8, experts=64 if pattern == "moe" else 0)
    assert pick(prob, hw) == select(prob, hw)[0]
