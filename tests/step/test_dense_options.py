"""Parallelism.dp_overlap and pp_p2p_overlap on whole step graphs: direction, exposure and the trace."""

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from c3kit.errors import C3kitError
from c3kit.hw import get_gpu
from c3kit.step import project
from c3kit.workload.graph import build_step
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import Parallelism

H200 = get_gpu("H200-SXM")
M = ModelConfig("t8", hidden=512, layers=8, heads=8, vocab=1024)


def step(par):
    return build_step(M, par, "train", 512, "bf16", 8)


@settings(max_examples=20, deadline=None)
@given(dp=st.sampled_from([2, 4]), pp=st.sampled_from([1, 2, 4]), vpp=st.sampled_from([1, 2]),
       zero=st.booleans(), m=st.sampled_from([1, 2, 4]))
def test_reducing_after_the_backward_exposes_every_reduction(dp, pp, vpp, zero, m):
    if pp == 1:
        vpp = 1
    par = Parallelism(dp=dp, pp=pp, vpp=vpp, dist_optimizer=zero, micro_batch=1, global_batch=dp * m * pp)
    on, off = project(step(par), H200), project(step(replace(par, dp_overlap=False)), H200)
    rows = [r for r in off.rows if r.stream == "dp" and r.role == "dp_grad"]
    assert rows and all(r.exposed_s == pytest.approx(r.comm_s) for r in rows)
    assert off.totals.step_time >= on.totals.step_time - 1e-15
    assert off.totals.step_time - on.totals.step_time == pytest.approx(
        sum(r.hidden_s for r in on.rows if r.role == "dp_grad"), rel=1e-9, abs=1e-15)


@settings(max_examples=20, deadline=None)
@given(pp=st.sampled_from([2, 4]), vpp=st.sampled_from([1, 2]), m=st.sampled_from([4, 8]))
def test_p2p_overlap_hides_exactly_the_sends(pp, vpp, m):
    par = Parallelism(pp=pp, vpp=vpp, micro_batch=1, global_batch=m)
    off, on = project(step(par), H200), project(step(replace(par, pp_p2p_overlap=True)), H200)
    sends = [r for r in on.rows if r.stream == "pp"]
    assert sends and all(r.exposed_s == 0.0 and r.hidden_s == pytest.approx(r.comm_s) for r in sends)
    exposed = sum(r.exposed_s for r in off.rows if r.stream == "pp")
    assert exposed > 0
    # the sends leave every micro-batch, the bubble's included: step - (m + (pp - 1) / vpp) x the sends of one
    assert on.totals.step_time < off.totals.step_time
    assert on.totals.comm == pytest.approx(off.totals.comm)


def test_trace_of_a_step_with_hidden_sends(tmp_path):
    from c3kit.step.trace import write_trace

    g = step(Parallelism(pp=2, micro_batch=1, global_batch=4, pp_p2p_overlap=True))
    path = tmp_path / "t.json"
    write_trace(path, g, H200)
    assert json.loads(path.read_text())


@pytest.mark.parametrize("bad", [dict(dp=2, fsdp=True, dp_overlap=False), dict(dp_overlap=0),
                                 dict(pp=2, pp_p2p_overlap="yes")])
def test_bad_flags(bad):
    with pytest.raises(C3kitError):
        Parallelism(**bad)
