"""Queueing behaviour under load: Little's law, TTFT rising with rate, throughput saturating."""

import numpy as np
import pytest

from c3kit.serve.metrics import SLO, compute, parse_slo, time_in_system, weighted_percentile
from c3kit.serve.scheduler import SchedulerConfig
from c3kit.serve.sim import simulate
from c3kit.serve.workload import ServeError, poisson
from tests.serve.conftest import StubPricer

CFG = SchedulerConfig(kv_blocks=4000, block_size=16, max_batched_tokens=2048, max_seqs=64)


def run(rate, n=1500, seed=1):
    return simulate(poisson(rate, n, "uniform:50:300", "uniform:20:120", seed), StubPricer(0.004, 2e-5), CFG)


def test_littles_law():
    r = run(8.0, n=3000)
    L, _ = time_in_system(r)  # time-average of waiting + running, sampled per iteration
    m = compute(r)
    lam = r.n / m.duration_s
    assert L == pytest.approx(lam * m.mean_e2e, rel=0.05)


def test_ttft_rises_with_rate():
    ttft = [compute(run(rate)).ttft["p90"] for rate in (2, 10, 25, 60)]
    assert all(a < b for a, b in zip(ttft, ttft[1:]))


def test_throughput_saturates():
    tp = {rate: compute(run(rate, n=2000)).output_tps for rate in (2, 400, 800)}
    low = compute(run(2, n=2000))
    assert low.throughput_rps == pytest.approx(2.0, rel=0.1)  # below capacity: served = offered
    assert tp[800] == pytest.approx(tp[400], rel=0.05)  # above it: a plateau
    assert tp[400] > 5 * tp[2]


def test_goodput_and_slo():
    r = run(10.0)
    loose, tight = parse_slo("ttft=10s,tpot=1s"), parse_slo("ttft=1us,attain=0.5")
    assert compute(r, loose).slo_met and compute(r, loose).goodput_rps == pytest.approx(compute(r).throughput_rps)
    m = compute(r, tight)
    assert m.slo_met is False and m.goodput_rps == 0.0


@pytest.mark.parametrize("text", ["", "ttft", "ttft=fast", "ttft=-1s", "foo=1s", "ttft=1s,ttft=2s", "attain=0.5",
                                  "ttft=1s,attain=2"])
def test_bad_slo(text):
    with pytest.raises(ServeError):
        parse_slo(text)


def test_slo_units():
    s = parse_slo("ttft=2s,tpot=100ms,e2e=250us,attain=0.99")
    assert (s.ttft, s.tpot, s.e2e, s.attainment) == (2.0, 0.1, 250e-6, 0.99)


def test_weighted_percentile_by_hand():
    v, w = np.array([3.0, 1.0, 2.0]), np.array([1, 2, 1])  # 1, 1, 2, 3
    assert weighted_percentile(v, w, 50) == 1.0
    assert weighted_percentile(v, w, 100) == 3.0
    assert weighted_percentile(v, w, 0) == 1.0


def test_replicas_double_saturated_throughput():
    w = poisson(float("inf"), 1200, "uniform:50:300", "uniform:20:120", 3)
    one = compute(simulate(w, StubPricer(0.004, 2e-5), CFG, replicas=1))
    two = compute(simulate(w, StubPricer(0.004, 2e-5), CFG, replicas=2))
    assert two.requests == one.requests == 1200
    assert two.throughput_rps == pytest.approx(2 * one.throughput_rps, rel=0.1)


def test_bad_replicas():
    with pytest.raises(ServeError):
        simulate(poisson(1.0, 10, "10", "10"), StubPricer(), CFG, replicas=0)
