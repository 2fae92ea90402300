"""Exact step projections of small hand-built graphs: serial sums, exposure, DP hiding, PP bubble."""

import pytest

from c3kit.hw import get_gpu
from c3kit.step import SerialOverlap, SlowdownOverlap, make_plan, project
from c3kit.step.plan import StepError
from c3kit.workload.graph import Node, StepGraph
from c3kit.workload.model import ModelConfig
from c3kit.workload.ops import Collective, Gemm
from c3kit.workload.parallel import Parallelism

HW = get_gpu("H200-SXM")
MODEL = ModelConfig(name="tiny", hidden=64, layers=4, heads=4)


def gemm(name):
    return Gemm(name, 8, 8, 8)


def coll(name, kind="all_reduce", group="tp"):
    return Collective(name, kind, 1024.0, 2, group)


def graph(nodes, layers=4, micro=1, par=None, phase="train"):
    par = par or Parallelism(micro_batch=1, global_batch=micro)
    return StepGraph(MODEL, par, phase, 16, tuple(nodes), layers, micro, 16)


def timer_from(times):
    return lambda op, hw: times[op.name]


def test_serial_tp_chain_is_fully_exposed():
    nodes = [Node(0, gemm("a"), (), "fwd", "layer", "compute", 1, "qkv"),
             Node(1, coll("ar"), (0,), "fwd", "layer", "tp", 1, "tp_ar"),
             Node(2, gemm("b"), (1,), "fwd", "layer", "compute", 1, "fc1")]
    r = project(graph(nodes, layers=3), HW, timer=timer_from({"a": 1.0, "ar": 0.5, "b": 2.0}))
    assert r.totals.step_time == pytest.approx(3 * 3.5)
    assert r.totals.compute == pytest.approx(9.0)
    assert r.totals.comm == pytest.approx(1.5)
    assert r.totals.exposed == pytest.approx(1.5)
    assert r.totals.hidden == pytest.approx(0.0)
    assert sum(row.share for row in r.rows) == pytest.approx(1.0)
    ar = next(row for row in r.rows if row.role == "tp_ar")
    assert ar.runs == 3 and ar.exposed_s == pytest.approx(1.5)


def test_comm_hides_behind_independent_compute():
    # input-gradient all-reduce overlaps the weight-gradient GEMM that does not need it
    nodes = [Node(0, gemm("dgrad"), (), "bwd", "layer", "compute", 1, "fc1", "dgrad"),
             Node(1, gemm("wgrad"), (), "bwd", "layer", "compute", 1, "fc1", "wgrad"),
             Node(2, coll("ar"), (0,), "bwd", "layer", "tp", 1, "tp_ar"),
             Node(3, gemm("norm"), (2,), "bwd", "layer", "compute", 1, "norm")]
    t = {"dgrad": 1.0, "wgrad": 0.5, "ar": 0.8, "norm": 0.1}
    r = project(graph(nodes, layers=2), HW, timer=timer_from(t))
    assert r.totals.exposed == pytest.approx(2 * 0.3)
    assert r.totals.step_time == pytest.approx(2 * (1.6 + 0.3))
    r = project(graph(nodes, layers=2), HW, timer=timer_from(t), policy=SerialOverlap())
    assert r.totals.exposed == pytest.approx(2 * 0.8)


def test_dp_gradient_hides_behind_lower_layers():
    nodes = [Node(0, gemm("g"), (), "bwd", "layer", "compute", 2, "fc1", "wgrad"),
             Node(1, coll("dp", group="dp"), (0,), "bwd", "layer", "dp", 1, "dp_grad")]
    # 2 micro-batches, 4 layers: gradients reduced once, during the last backward
    r = project(graph(nodes, layers=4, micro=2), HW, timer=timer_from({"g": 2.0, "dp": 1.0}))
    assert r.totals.exposed == pytest.approx(1.0)  # only the last layer's (layer 0's) is exposed
    assert r.totals.step_time == pytest.approx(16.0 + 1.0)
    assert r.totals.comm == pytest.approx(4.0)
    r = project(graph(nodes, layers=4, micro=2), HW, timer=timer_from({"g": 2.0, "dp": 3.0}))
    # comm-bound: 2 + 3 * max(2, 3) + 3 = 14 for the last backward instead of 8
    assert r.totals.exposed == pytest.approx(6.0)
    assert r.totals.step_time == pytest.approx(16.0 + 6.0)


def test_dp_reduce_after_backward_is_serial():
    # Parallelism.dp_overlap False: the 4 layers' reductions run after the last backward, 4 x 1.0 exposed
    nodes = [Node(0, gemm("g"), (), "bwd", "layer", "compute", 2, "fc1", "wgrad"),
             Node(1, coll("dp", group="dp"), (0,), "bwd", "layer", "dp", 1, "dp_grad")]
    par = Parallelism(dp=2, micro_batch=1, global_batch=4, dp_overlap=False)
    r = project(graph(nodes, layers=4, micro=2, par=par), HW, timer=timer_from({"g": 2.0, "dp": 1.0}))
    assert r.totals.step_time == pytest.approx(16.0 + 4.0)
    assert r.totals.exposed == pytest.approx(4.0)
    assert r.totals.hidden == pytest.approx(0.0)
    with pytest.raises(Exception, match="dp_overlap"):
        Parallelism(dp=2, fsdp=True, dp_overlap=False)


def test_pp_p2p_overlap_hides_the_sends():
    nodes = [Node(0, gemm("f"), (), "fwd", "layer", "compute", 4, "fc1"),
             Node(1, gemm("b"), (0,), "bwd", "layer", "compute", 4, "fc1"),
             Node(2, coll("send", "send_recv", "pp"), (0,), "fwd", "micro", "pp", 4, "pp_fwd")]
    par = Parallelism(pp=4, vpp=1, micro_batch=1, global_batch=4, pp_p2p_overlap=True)
    r = project(graph(nodes, layers=2, micro=4, par=par), HW, timer=timer_from({"f": 1.0, "b": 2.0, "send": 0.5}))
    assert r.totals.step_time == pytest.approx((4 + 3) * 6.0)  # test_pipeline_bubble without the 0.5 per micro-batch
    assert r.totals.exposed == pytest.approx(0.0)
    assert r.totals.comm == pytest.approx(4 * 0.5)
    assert not Parallelism(pp_p2p_overlap=True).pp_p2p_overlap  # no pipeline: nothing to overlap


def test_fsdp_all_gather_prefetches_behind_previous_layer():
    nodes = [Node(0, coll("ag", "all_gather", "dp"), (), "fwd", "layer", "dp", 1, "fsdp_ag"),
             Node(1, gemm("f"), (0,), "fwd", "layer", "compute", 1, "fc1")]
    r = project(graph(nodes, layers=5), HW, timer=timer_from({"ag": 1.0, "f": 2.0}))
    assert r.totals.exposed == pytest.approx(1.0)  # the first layer's gather
    assert r.totals.step_time == pytest.approx(11.0)
    alpha = SlowdownOverlap(0.5)
    r = project(graph(nodes, layers=5), HW, timer=timer_from({"ag": 1.0, "f": 2.0}), policy=alpha)
    assert r.totals.step_time == pytest.approx(1 + 2 + 4 * 2.5)


def test_pipeline_bubble():
    par = Parallelism(pp=4, micro_batch=1, global_batch=4)
    nodes = [Node(0, gemm("f"), (), "fwd", "layer", "compute", 4, "fc1"),
             Node(1, gemm("b"), (0,), "bwd", "layer", "compute", 4, "fc1"),
             Node(2, coll("send", "send_recv", "pp"), (0,), "fwd", "micro", "pp", 4, "pp_fwd")]
    r = project(graph(nodes, layers=2, micro=4, par=par), HW, timer=timer_from({"f": 1.0, "b": 2.0, "send": 0.5}))
    t_micro = 2 * 3.0 + 0.5
    assert r.totals.bubble == pytest.approx(3 * t_micro)
    assert r.totals.step_time == pytest.approx((4 + 3) * t_micro)
    assert r.totals.bubble / r.totals.step_time == pytest.approx(3 / (4 + 4 - 1))
    assert sum(row.share for row in r.rows) == pytest.approx(1.0)


def test_step_nodes_are_serial():
    nodes = [Node(0, gemm("f"), (), "fwd", "layer", "compute", 1, "fc1"),
             Node(1, coll("emb", group="dp"), (), "bwd", "step", "dp", 1, "dp_grad"),
             Node(2, gemm("opt"), (1,), "opt", "step", "compute", 1, "optimizer")]
    r = project(graph(nodes, layers=2), HW, timer=timer_from({"f": 1.0, "emb": 0.25, "opt": 0.5}))
    assert r.totals.step_time == pytest.approx(2.75)
    assert r.totals.exposed == pytest.approx(0.25)


def test_bad_graphs():
    with pytest.raises(StepError):
        make_plan(graph([Node(0, gemm("a"), (5,), "fwd", "layer", "compute", 1, "x")]))
    with pytest.raises(StepError):
        make_plan(graph([Node(0, gemm("a"), (), "fwd", "layer", "nvlink", 1, "x")]))
    with pytest.raises(StepError):
        make_plan(graph([Node(0, gemm("a"), (), "sideways", "layer", "compute", 1, "x")]))
