"""Invariants of the step projection on real step graphs (hypothesis)."""

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from c3kit.hw import get_gpu
from c3kit.step import project
from c3kit.workload.graph import build_step
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import Parallelism

H200 = get_gpu("H200-SXM")


@st.composite
def scenarios(draw):
    heads = draw(st.sampled_from([8, 16, 32]))
    hidden = heads * draw(st.sampled_from([64, 128]))
    layers = draw(st.sampled_from([4, 8, 12]))
    model = ModelConfig(name="m", hidden=hidden, layers=layers, heads=heads,
                        gated_mlp=draw(st.booleans()), norm="rmsnorm")
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 4]))
    dp = draw(st.sampled_from([1, 2, 4]))
    mb = draw(st.sampled_from([1, 2]))
    accum = draw(st.sampled_from([1, 2, 4]))
    par = Parallelism(tp=tp, sp=draw(st.booleans()), dp=dp, pp=pp, fsdp=draw(st.booleans()) and dp > 1,
                      micro_batch=mb, global_batch=mb * dp * accum,
                      recompute=draw(st.sampled_from(["none", "selective", "full"])))
    seq = draw(st.sampled_from([256, 1024, 4096]))
    phase = draw(st.sampled_from(["train", "train", "prefill", "decode"]))
    return build_step(model, par, phase, seq)


def faster_links(gpu, f):
    return gpu.with_(scaleup=replace(gpu.scaleup, bw=gpu.scaleup.bw * f), scaleout_bw=gpu.scaleout_bw * f)


def faster_math(gpu, f):
    return gpu.with_(flops={k: v * f for k, v in gpu.flops.items()})


@given(scenarios(), st.sampled_from([None, "efficiency"]))
def test_invariants(g, cost_model):
    r = project(g, H200, cost_model=cost_model)
    t = r.totals
    assert t.step_time > 0 and t.compute > 0
    assert all(row.time_each >= 0 for row in r.rows)
    assert all(row.time_each > 0 for row in r.rows if row.stream == "compute")
    assert -1e-12 <= t.exposed <= t.comm * (1 + 1e-12) + 1e-15
    assert t.step_time >= t.compute * (1 - 1e-12)
    assert t.step_time <= (t.compute + t.comm + t.bubble) * (1 + 1e-9)
    assert abs(sum(row.share for row in r.rows) - 1.0) < 1e-9
    if g.par.tp == 1:
        assert not any(row.stream == "tp" for row in r.rows)


@given(scenarios(), st.floats(1.5, 8.0))
def test_comm_falls_as_bandwidth_grows(g, f):
    slow, fast = project(g, H200).totals, project(g, faster_links(H200, f)).totals
    assert fast.comm <= slow.comm
    if slow.comm > 0:
        assert fast.comm < slow.comm
    assert fast.exposed <= slow.exposed + 1e-12
    assert fast.compute == slow.compute


@given(scenarios(), st.floats(1.5, 8.0))
def test_compute_falls_as_flops_grow(g, f):
    slow, fast = project(g, H200).totals, project(g, faster_math(H200, f)).totals
    assert fast.compute <= slow.compute
    assert fast.step_time <= slow.step_time * (1 + 1e-12)
    assert fast.comm == slow.comm
