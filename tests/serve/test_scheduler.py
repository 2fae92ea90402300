"""The scheduler and event loop: a hand-checked two-request case, preemption, KV bookkeeping invariants."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.serve.scheduler import DECODE, Scheduler, SchedulerConfig
from c3kit.serve.sim import simulate
from c3kit.serve.workload import ServeError, Workload
from tests.serve.conftest import StubPricer


def wl(arrival, prompt, output):
    return Workload(np.array(arrival, float), np.array(prompt), np.array(output), "test")


def test_two_requests_by_hand(stub):
    # A: t=0, prompt 4, output 3; B: t=0.005, prompt 2, output 2; iteration = 10 ms + 1 ms per token.
    # it1 @0:      prefill A (4)             -> 14 ms, A first token at 0.014
    # it2 @0.014:  decode A + prefill B (2)  -> 13 ms, B first token at 0.027
    # it3 @0.027:  decode A, B               -> 12 ms, both finish at 0.039
    cfg = SchedulerConfig(kv_blocks=100, block_size=2)
    r = simulate(wl([0.0, 0.005], [4, 2], [3, 2]), stub, cfg)
    assert stub.calls == [([(4, 0)], 0, 0), ([(2, 0)], 1, 5), ([], 2, 9)]
    np.testing.assert_allclose(r.first_token, [0.014, 0.027])
    np.testing.assert_allclose(r.finish, [0.039, 0.039])
    it = r.iteration_frame()
    assert it["kv_blocks_used"].tolist() == [2, 4, 5]  # A 2 blocks; +1 for A's 5th token and 1 for B; +1 for B's 3rd
    np.testing.assert_allclose(it["dur_s"], [0.014, 0.013, 0.012])
    from c3kit.serve.metrics import compute

    m = compute(r)
    assert m.ttft["p50"] == pytest.approx((0.014 + 0.022) / 2)
    assert m.mean_tpot == pytest.approx((0.0125 + 0.012) / 2)
    assert m.duration_s == pytest.approx(0.039)
    assert m.mean_itl == pytest.approx((0.013 + 2 * 0.012) / 3)  # A after it2 and it3, B after it3
    assert m.output_tps == pytest.approx(5 / 0.039)


def test_no_chunked_prefill_runs_prefill_alone(stub):
    cfg = SchedulerConfig(kv_blocks=100, block_size=2, chunked_prefill=False, max_batched_tokens=16, max_seqs=4)
    simulate(wl([0.0, 0.005], [4, 2], [3, 2]), stub, cfg)
    # it2 prefills B alone (prefill first), it3 decodes A and B, it4 decodes A
    assert stub.calls == [([(4, 0)], 0, 0), ([(2, 0)], 0, 0), ([], 2, 5 + 3), ([], 1, 6)]


def test_mixed_batches_run_whole_prompts_beside_the_decode_batch(stub):
    cfg = SchedulerConfig(kv_blocks=100, block_size=2, chunked_prefill=False, mixed_batches=True,
                          max_batched_tokens=16, max_seqs=4)
    simulate(wl([0.0, 0.005], [4, 2], [3, 2]), stub, cfg)
    # as the hand-checked chunked case: B's whole prompt joins A's decode in it2
    assert stub.calls == [([(4, 0)], 0, 0), ([(2, 0)], 1, 5), ([], 2, 9)]
    # a prompt that does not fit the budget left after the decode batch waits
    stub.calls.clear()
    cfg = SchedulerConfig(kv_blocks=100, block_size=2, chunked_prefill=False, mixed_batches=True,
                          max_batched_tokens=6, max_seqs=4, reserve_kv=True)
    simulate(wl([0.0, 0.005], [4, 6], [3, 2]), stub, cfg)
    assert stub.calls == [([(4, 0)], 0, 0), ([], 1, 5), ([], 1, 6), ([(6, 0)], 0, 0), ([], 1, 7)]


def test_reserved_kv_admits_only_whole_lives_and_never_preempts(stub):
    # 6 blocks of 4 tokens: each request needs ceil((8 + 10 - 1) / 4) = 5 blocks for its life, so only one runs
    cfg = SchedulerConfig(kv_blocks=6, block_size=4, max_batched_tokens=64, max_seqs=8, reserve_kv=True)
    r = simulate(wl([0.0, 0.0], [8, 8], [10, 10]), stub, cfg)
    assert r.preemptions.sum() == 0
    assert [c[0] for c in stub.calls if c[0]] == [[(8, 0)], [(8, 0)]]
    assert r.first_token[1] >= r.finish[0]  # B starts when A has finished and freed its reservation
    it = r.iteration_frame()
    assert it["kv_blocks_used"].tolist()[:2] == [2, 3]  # blocks written, not the reservation


def test_chunked_prefill_splits_long_prompt(stub):
    cfg = SchedulerConfig(kv_blocks=100, block_size=4, max_batched_tokens=8, max_seqs=4)
    simulate(wl([0.0], [20], [2]), stub, cfg)
    assert [c[0] for c in stub.calls] == [[(8, 0)], [(8, 8)], [(4, 16)], []]
    assert stub.calls[-1][1:] == (1, 21)


def test_preemption_by_recompute_frees_and_finishes():
    # 6 blocks of 4 tokens = 24 tokens; two requests growing to 10 + 9 tokens each cannot both stay
    cfg = SchedulerConfig(kv_blocks=6, block_size=4, max_batched_tokens=64, max_seqs=8)
    p = StubPricer()
    r = simulate(wl([0.0, 0.0], [8, 8], [10, 10]), p, cfg)
    assert r.preemptions.sum() >= 1
    assert np.isfinite(r.finish).all()
    assert r.iteration_frame()["kv_blocks_used"].max() <= 6
    # a preempted request recomputes its prompt and generated tokens as one prefill later on
    assert any(c for calls in p.calls for c in calls[0] if c[0] > 8)


def test_one_request_too_long_for_kv_is_an_error(stub):
    with pytest.raises(ServeError, match="one request needs"):
        simulate(wl([0.0], [100], [10]), stub, SchedulerConfig(kv_blocks=4, block_size=16))


def test_budget_below_max_seqs_is_an_error():
    with pytest.raises(ServeError, match="max-batched-tokens"):
        SchedulerConfig(kv_blocks=10, max_batched_tokens=8, max_seqs=16)


def _drive(w, cfg, pricer):
    """The sim loop with a KV check after every iteration: lazy decode bookkeeping == explicit block counts."""
    s = Scheduler(w, cfg)
    now, nxt, n = 0.0, 0, w.n
    arrival = w.arrival.tolist()
    for _ in range(100000):
        if s.done == n:
            return s
        while nxt < n and arrival[nxt] <= now:
            s.arrive(nxt)
            nxt += 1
        if s.idle:
            now = arrival[nxt]
            continue
        b = s.schedule(now)
        assert not b.empty
        assert 0 <= s.free <= cfg.kv_blocks
        assert b.tokens <= cfg.max_batched_tokens or not (cfg.chunked_prefill or cfg.mixed_batches)
        assert len(s.running) <= cfg.max_seqs
        assert not (cfg.reserve_kv and b.preempted)
        assert not (b.decode and b.prefill) or cfg.chunked_prefill or cfg.mixed_batches
        now += pricer(b.prefill, b.decode, b.decode_kv)
        s.complete(b, now)
        held = sum(s.blocks_held(r) for r in s.running)
        assert held == cfg.kv_blocks - s.free - s.reserved == s.used_blocks
        assert s.reserved >= 0 and (cfg.reserve_kv or s.reserved == 0)
        dec = [r for r in s.running if s.status[r] == DECODE]
        assert len(dec) == s.D
    raise AssertionError("did not finish")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 0.2), st.integers(1, 40), st.integers(1, 30)), min_size=1, max_size=12),
       st.integers(1, 8), st.integers(0, 30), st.booleans(), st.integers(1, 6), st.booleans(), st.booleans())
def test_kv_capacity_never_exceeded(reqs, bs, extra_blocks, chunked, max_seqs, mixed, reserve):
    reqs = sorted(reqs)
    w = wl([a for a, _, _ in reqs], [p for _, p, _ in reqs], [o for _, _, o in reqs])
    need = max(-(-(p + o - 1) // bs) for _, p, o in reqs)
    budget = max(max_seqs, 16) if chunked else max(p + o for _, p, o in reqs) + max_seqs
    cfg = SchedulerConfig(kv_blocks=need + extra_blocks, block_size=bs, max_seqs=max_seqs,
                          max_batched_tokens=budget, chunked_prefill=chunked, mixed_batches=mixed, reserve_kv=reserve)
    s = _drive(w, cfg, StubPricer())
    assert s.free == cfg.kv_blocks
    fin, first = np.array(s.finish), np.array(s.first)
    assert np.isfinite(fin).all() and (first >= w.arrival).all() and (fin >= first).all()
    # a request's tokens after the first each take at least one iteration (>= 10 ms)
    assert (fin - first >= (w.output - 1) * 0.01 - 1e-9).all()
