"""FSDP that gathers parameters and reduce-scatters gradients once per step (Parallelism.fsdp_sync "step")."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.errors import WorkloadError
from c3kit.hw import get_gpu
from c3kit.step import project
from c3kit.step.policy import policy_for
from c3kit.workload.graph import build_step
from c3kit.workload.layer import describe
from c3kit.workload.memory import memory_report
from c3kit.workload.model import get_model
from c3kit.workload.parallel import FSDP_SYNC, FSDP_SYNC_SOURCES, Parallelism

M = get_model("Llama-3-8B")


def _par(sync: str, pp: int = 2, global_batch: int = 32, **kw) -> Parallelism:
    return Parallelism(tp=2, dp=4, pp=pp, fsdp=True, micro_batch=1, global_batch=global_batch, fsdp_sync=sync, **kw)


def test_choices_sources_and_bad_values():
    assert FSDP_SYNC == ("micro", "step") and set(FSDP_SYNC_SOURCES) == set(FSDP_SYNC)
    assert Parallelism().fsdp_sync == "micro"
    with pytest.raises(WorkloadError, match="fsdp_sync 'layer'"):
        Parallelism(fsdp=True, dp=2, fsdp_sync="layer")
    # nothing sharded: nothing to gather once per step
    assert Parallelism(dp=2, fsdp_sync="step").fsdp_sync == "micro"


def test_ops_and_counts_hand_checked():
    micro = describe(M, _par("micro"), seq=2048).by_name()
    step = describe(M, _par("step"), seq=2048).by_name()
    mb = 8  # 32 sequences / (1 x dp 4)
    assert micro["layer.fsdp_ag"].count == mb and micro["layer.fsdp_ag.bwd"].count == mb
    assert micro["layer.fsdp_rs"].count == mb and micro["embed.fsdp_ag"].scope == "micro"
    # once per step: one gather in the forward, none in the backward, one reduce-scatter of the whole stage
    assert step["layer.fsdp_ag"].count == 1 and step["layer.fsdp_ag"].shape == micro["layer.fsdp_ag"].shape
    assert "layer.fsdp_ag.bwd" not in step and "layer.fsdp_rs" not in step
    layer_params = micro["layer.fsdp_ag"].shape.bytes / 2  # bf16 parameters of one layer on this TP rank
    rs = step["stage.fsdp_rs"]
    assert (rs.scope, rs.phase, rs.count, rs.shape.kind, rs.shape.ranks) == ("step", "bwd", 1, "reduce_scatter", 4)
    assert rs.shape.bytes == 16 * layer_params * 4  # 32 layers / pp 2, fp32 gradients
    assert step["embed.fsdp_ag"].scope == "step" and step["embed.fsdp_ag"].count == 1
    assert step["embed.fsdp_rs"].scope == "step" and step["embed.fsdp_rs"].count == 1
    # gradients accumulate unsharded between the micro-batches (FSDP2's unsharded_accumulated_grad): dp x the adds
    assert step["layer.grad_acc"].shape.bytes == pytest.approx(4 * micro["layer.grad_acc"].shape.bytes)


def test_data_parallel_bytes_per_step():
    # once per step: the same bytes whatever the micro-batch count; per micro-batch: proportional to it
    step = [build_step(M, _par("step", global_batch=gb), "train", 2048).total_comm_bytes("dp") for gb in (4, 8, 32)]
    micro = [build_step(M, _par("micro", global_batch=gb), "train", 2048).total_comm_bytes("dp") for gb in (4, 8, 32)]
    assert step[0] == pytest.approx(step[1]) == pytest.approx(step[2])
    assert micro[1] == pytest.approx(2 * micro[0]) and micro[2] == pytest.approx(8 * micro[0])
    layer_b = describe(M, _par("micro"), seq=2048).op("layer.fsdp_ag").shape.bytes
    assert micro[0] - step[0] == pytest.approx(16 * layer_b)  # one micro-batch: only the backward gathers go


def test_serial_policy_exposes_each_gather_once():
    # overlap "none": the first micro-batch's forward carries every layer's gather, all exposed, once per step
    gpu = get_gpu("H200-SXM")
    r = project(build_step(M, _par("step"), "train", 2048), gpu, policy=policy_for("none"))
    rows = {x.name: x for x in r.rows}
    ag = rows["layer.fsdp_ag"]
    assert ag.exposed_s == pytest.approx(ag.comm_s, rel=1e-12) and ag.comm_s > 0
    assert rows["stage.fsdp_rs"].exposed_s == pytest.approx(rows["stage.fsdp_rs"].comm_s, rel=1e-12)
    micro = project(build_step(M, _par("micro"), "train", 2048), gpu, policy=policy_for("none")).totals
    assert r.totals.comm < micro.comm / 4


def test_one_micro_batch_prices_the_same_gathers():
    # with one micro-batch both choices gather once in the forward; "step" skips the backward gather
    gpu = get_gpu("H200-SXM")
    a = project(build_step(M, _par("micro", pp=1, global_batch=4), "train", 2048), gpu)
    b = project(build_step(M, _par("step", pp=1, global_batch=4), "train", 2048), gpu)
    ra, rb = {x.name: x for x in a.rows}, {x.name: x for x in b.rows}
    assert rb["layer.fsdp_ag"].comm_s == pytest.approx(ra["layer.fsdp_ag"].comm_s)
    assert "layer.fsdp_ag.bwd" not in rb


def test_memory_keeps_the_stage_unsharded():
    gpu = get_gpu("H200-SXM")
    a = memory_report(M, gpu, par=_par("micro"), seq=2048)
    b = memory_report(M, gpu, par=_par("step"), seq=2048)
    full_w = a.weights * 4  # dp 4 shards
    assert b.weights == pytest.approx(a.weights + full_w)
    assert b.gradients == pytest.approx(a.gradients + full_w * 2)  # fp32 accumulation over 8 micro-batches
    assert b.buffers < a.buffers  # no separate gather buffers: the unsharded copy is kept
    one = memory_report(M, gpu, par=_par("step", global_batch=4), seq=2048)
    one_a = memory_report(M, gpu, par=_par("micro", global_batch=4), seq=2048)
    assert one.gradients == pytest.approx(one_a.gradients + full_w)  # bf16 gradients, one micro-batch
    assert b.optimizer == a.optimizer


@settings(max_examples=25, deadline=None)
@given(pp=st.sampled_from([1, 2, 4]), acc=st.sampled_from([1, 2, 3, 8]), rc=st.sampled_from(["none", "full"]),
       dp=st.sampled_from([2, 4, 16]))
def test_property_once_per_step_never_moves_more_bytes(pp, acc, rc, dp):
    par = Parallelism(tp=2, dp=dp, pp=pp, fsdp=True, micro_batch=1, global_batch=dp * acc, recompute=rc)
    g_micro = build_step(M, par, "train", 1024)
    g_step = build_step(M, replace(par, fsdp_sync="step"), "train", 1024)
    assert g_step.total_comm_bytes("dp") < g_micro.total_comm_bytes("dp")
    t = project(g_step, get_gpu("H200-SXM")).totals
    assert 0 <= t.exposed <= t.comm + 1e-12
