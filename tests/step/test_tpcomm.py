"""Transformer Engine's userbuffers TP overlap in the step (step/tpcomm.py, Parallelism.tp_comm_overlap)."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.errors import WorkloadError
from c3kit.hw import get_gpu
from c3kit.overlap.costs import CostCache
from c3kit.overlap.evaluate import fastest
from c3kit.overlap.problem import OverlapProblem
from c3kit.overlap.schedules import Ctx
from c3kit.sim.engine import alone_time
from c3kit.sim.params import ContentionParams
from c3kit.step import project
from c3kit.step.policy import PairPrice, policy_for
from c3kit.step.project import node_times
from c3kit.step.tpcomm import SCHEDULE_OF, TPCommOverlap, te_pairs
from c3kit.workload.graph import build_step
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import TP_COMM_OVERLAP_METHODS, TP_COMM_OVERLAPS, Parallelism

H100 = get_gpu("H100-SXM")
MODEL = ModelConfig(name="m", hidden=2048, layers=2, heads=16, gated_mlp=True, norm="rmsnorm")


def _graph(overlap="ring_exchange", tp=4, recompute="none", model=MODEL, seq=2048, dtype="bf16"):
    par = Parallelism(tp=tp, sp=True, micro_batch=1, global_batch=2, recompute=recompute, tp_comm_overlap=overlap)
    return build_step(model, par, "train", seq, dtype)


def test_every_te_gemm_of_a_layer_is_paired_with_its_method_and_partner():
    g = _graph("pipeline_margin")
    got = te_pairs(g, TP_COMM_OVERLAP_METHODS["pipeline_margin"])
    names = {v[0]: (v[1], g.nodes[v[2].gemm]) for v in got.values()}
    assert set(names) == set(TP_COMM_OVERLAP_METHODS["pipeline_margin"])  # all ten TE GEMM names
    assert names["qkv_fprop"][0] == names["fc2_dgrad"][0] == "ring-dma-prio"  # ring_exchange: copy engines
    assert names["proj_fprop"][0] == names["fc2_fprop"][0] == "ficco-sm-part"  # pipeline with set_sm_margin
    assert names["fc1_dgrad"][0] == names["qkv_wgrad"][0] == "bulk-sm-prio"
    # bulk: the re-gathered input beside the input-gradient GEMM, the reduce-scatter beside the weight gradient
    assert (names["fc1_dgrad"][1].role, names["fc1_dgrad"][1].grad) == ("fc1", "dgrad")
    assert (names["fc1_wgrad"][1].role, names["fc1_wgrad"][1].grad) == ("fc1", "wgrad")
    assert (names["qkv_wgrad"][1].role, names["qkv_wgrad"][1].grad) == ("qkv", "wgrad")
    bulk = [v[3] for v in got.values() if v[0] == "qkv_wgrad"][0]
    assert bulk.pattern == "bulk" and bulk.collective == "reduce_scatter"


def test_recomputed_forwards_run_the_forward_methods():
    g = _graph("ring_exchange", recompute="full")
    names = [v[0] for v in te_pairs(g, TP_COMM_OVERLAP_METHODS["ring_exchange"]).values()]
    assert names.count("qkv_fprop") == 2 and names.count("fc2_fprop") == 2  # forward and its recomputation


def test_methods_map_to_the_engines_schedules():
    for methods in TP_COMM_OVERLAP_METHODS.values():
        for m in methods.values():
            assert m in SCHEDULE_OF
    assert SCHEDULE_OF[("pipeline", False)] == "ficco-sm-prio" and SCHEDULE_OF[("bulk", True)] == "bulk-sm-part"


def test_forced_ring_schedule_on_a_small_pair_is_the_hand_sum():
    # 2 GPUs, no contention: the local half's GEMM runs while the copy engine brings the other half, whose GEMM
    # follows: max(half GEMM, copy) + half GEMM
    prob = OverlapProblem("ag_gemm", 1024, 512, 256, "bf16", 2)
    p = ContentionParams.ideal()
    ctx = Ctx(prob, H100, p, CostCache.shared(H100, p.tile_m, p.tile_n, p.gemm_hbm_traffic))
    half = alone_time(ctx.gemm("x", "compute", 512), ctx.res)
    copy = alone_time(ctx.comm("c", "comm", 512 * 256 * 2, 1, "dma"), ctx.res)
    _, name, t = fastest(prob, H100, ["ring-dma-prio"], params=p)
    assert name == "ring-dma-prio"
    assert t == pytest.approx(max(half, copy) + half, rel=1e-12)


@pytest.mark.parametrize("saved, share", [(0.5, 0.5), (-0.3, 0.0), (1.0, 1.0)])
def test_a_te_pair_is_exposed_by_the_engines_share_never_above_serial(monkeypatch, saved, share):
    import c3kit.step.policy as policy

    monkeypatch.setattr(policy, "price_pair", lambda prob, gpu, mode, power="burst": PairPrice(mode, saved))
    g = _graph("ring_exchange")
    r = project(g, H100, policy=policy_for("none"))
    t = node_times(g, H100)
    pairs = te_pairs(g, TP_COMM_OVERLAP_METHODS["ring_exchange"])
    rows = {row.id: row for row in r.rows}
    for i, (_, schedule, pr, _) in pairs.items():
        m, gm = t[i], t[pr.gemm]
        runs = rows[g.nodes[i].id].runs
        assert rows[g.nodes[i].id].exposed_s == pytest.approx(runs * (m - share * min(gm, m)), rel=1e-9)
        assert rows[g.nodes[i].id].schedule == schedule


def test_off_leaves_the_step_as_it_was():
    on, off = _graph("ring_exchange"), _graph("none")
    pol = policy_for("contended")
    a, b = project(off, H100, policy=pol), project(on, H100, policy=pol)
    assert b.totals.step_time < a.totals.step_time
    assert not any(r.schedule == "ring-dma-prio" for r in a.rows)
    same = [(x.compute_s, x.exposed_s) for x in a.rows if x.stream not in ("tp",)]
    assert same == [(x.compute_s, x.exposed_s) for x in b.rows if x.stream not in ("tp",)]


def test_engine_modes_keep_their_prices_for_other_pairs():
    g = _graph("ring_exchange")
    r = project(g, H100, policy=policy_for("auto"))
    scheds = {row.schedule for row in r.rows if row.stream == "tp"}
    assert "ring-dma-prio" in scheds and "bulk-sm-prio" in scheds
    assert TPCommOverlap(policy_for("contended"), "pipeline").name == "contended"


def test_parallelism_option_is_checked():
    with pytest.raises(WorkloadError, match="tp_comm_overlap 'x'"):
        Parallelism(tp=2, sp=True, tp_comm_overlap="x")
    with pytest.raises(WorkloadError, match="needs sequence parallelism"):
        Parallelism(tp=2, sp=False, tp_comm_overlap="pipeline")
    assert Parallelism(tp=1, tp_comm_overlap="pipeline").tp_comm_overlap == "none"  # nothing to overlap
    assert set(TP_COMM_OVERLAPS) == {"none", "pipeline", "pipeline_margin", "ring_exchange"}


@settings(max_examples=12, deadline=None)
@given(overlap=st.sampled_from(TP_COMM_OVERLAPS[1:]), tp=st.sampled_from([2, 4, 8]),
       heads=st.sampled_from([16, 32]), head_dim=st.sampled_from([64, 128]), seq=st.sampled_from([512, 2048]),
       mode=st.sampled_from(["none", "contended", "simple"]), dtype=st.sampled_from(["bf16", "fp8"]),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_tp_overlap_is_never_slower_than_no_overlap(overlap, tp, heads, head_dim, seq, mode, dtype, recompute):
    model = ModelConfig(name="m", hidden=heads * head_dim, layers=2, heads=heads, gated_mlp=True, norm="rmsnorm")
    on = _graph(overlap, tp=tp, recompute=recompute, model=model, seq=seq, dtype=dtype)
    off = build_step(model, replace(on.par, tp_comm_overlap="none"), "train", seq, dtype)
    serial = project(off, H100, policy=policy_for("none")).totals.step_time
    with_te = project(on, H100, policy=policy_for(mode))
    assert with_te.totals.step_time <= serial * (1 + 1e-12)
    for row in with_te.rows:
        assert row.exposed_s <= row.comm_s * (1 + 1e-12) + 1e-15
    assert np.isfinite(with_te.totals.step_time)


def test_the_ring_exchange_schedule_is_the_plain_copy_engine_ring():
    # TE's ring_exchange has no symmetric-memory barriers or second compute stream (PyTorch async TP's ring-dma)
    from c3kit.overlap.evaluate import default_params
    from c3kit.overlap.schedules import SCHEDULES, build

    p = default_params(H100.name)
    for pattern in ("ag_gemm", "gemm_rs"):
        prob = OverlapProblem(pattern, 4096, 1024, 1024, "bf16", 4)
        ctx = Ctx(prob, H100, p, CostCache.shared(H100, p.tile_m, p.tile_n, p.gemm_hbm_traffic))
        tasks, _ = build(SCHEDULES[SCHEDULE_OF[("ring_exchange", False)]], ctx, "sm")
        assert not any("barrier" in t.name for t in tasks)
        assert {t.stream for t in tasks if t.kind == "compute" and t.category == "comp"} == {"compute"}
        assert all(t.engines > 0 and t.sms == 0 for t in tasks if t.kind == "comm")
        assert sum(t.kind == "comm" for t in tasks) == 3  # tp - 1 point-to-point steps
