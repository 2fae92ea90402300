"""EP all-to-all overlap across micro-batches (Parallelism.moe_a2a_overlap, Megatron-Core
overlap_moe_expert_parallel_comm): the plan's pairing, hand-checked exposure and bad layouts."""

import numpy as np
import pytest

from c3kit.errors import WorkloadError
from c3kit.step.plan import evaluate, make_plan
from c3kit.step.policy import SimpleOverlap
from c3kit.workload.graph import build_step
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import Parallelism

MOE = ModelConfig("tinymoe", hidden=512, layers=4, heads=8, vocab=1024, n_experts=8, top_k=2, moe_ffn_hidden=256)


def graph(**kw):
    p = Parallelism(**{"dp": 2, "ep": 2, "micro_batch": 1, "global_batch": 4, **kw})
    return build_step(MOE, p, "train", 256, "bf16", 8)


def ep_blocking(plan, g, ph):
    return [b for b in plan.layer[ph].blocking if g.nodes[b.node].stream == "ep"]


def test_ep_collectives_pair_with_the_other_phase():
    g = graph(moe_a2a_overlap=True)
    plan = make_plan(g)
    for ph, other in (("fwd", "bwd"), ("bwd", "fwd")):
        eps = ep_blocking(plan, g, ph)
        assert len(eps) == (3 if ph == "fwd" else 2)  # counts gather, dispatch, combine / combine, dispatch
        dealt = [i for b in eps for i in b.partners]
        assert len(dealt) == len(set(dealt))  # no compute hides two collectives
        assert set(dealt) <= set(plan.layer[other].compute) and not any(b.dependent for b in eps)
        assert set(dealt) == set(plan.layer[other].compute)  # tp 1: every compute op of the other phase is free
    base = make_plan(graph())
    for ph in ("fwd", "bwd"):  # without the option they pair inside their own phase
        for b in ep_blocking(base, g, ph):
            assert set(b.partners) <= set(base.layer[ph].compute)


def test_exposure_hand_checked():
    # every compute op 1 ms, every collective 10 ms: each EP collective is exposed by 10 ms minus its partners
    g = graph(moe_a2a_overlap=True)
    plan = make_plan(g)
    t = np.where([n.stream == "compute" for n in g.nodes], 1e-3, 10e-3)
    tl = evaluate(plan, t, SimpleOverlap())
    for ph in ("fwd", "bwd"):
        for b in ep_blocking(plan, g, ph):
            per_run = 10e-3 - 1e-3 * len(b.partners)
            assert tl.exposed[b.node, 0] == pytest.approx(per_run * plan.multiplicity[b.node])
    # with room to hide (collectives 1 us) nothing of the EP stream is exposed; without the option some is
    t = np.where([n.stream == "compute" for n in g.nodes], 1e-3, 1e-6)
    ep = [i for i, n in enumerate(g.nodes) if n.stream == "ep"]
    assert evaluate(plan, t, SimpleOverlap()).exposed[ep].sum() == 0.0
    plain = graph()
    t0 = np.where([n.stream == "compute" for n in plain.nodes], 1e-3, 1e-6)
    ep0 = [i for i, n in enumerate(plain.nodes) if n.stream == "ep"]
    assert evaluate(make_plan(plain), t0, SimpleOverlap()).exposed[ep0].sum() > 0.0


@pytest.mark.parametrize("bad", [dict(ep=1, dp=2), dict(pp=2, dp=1, global_batch=4),
                                 dict(recompute="full")])
def test_layouts_megatron_refuses(bad):
    with pytest.raises(WorkloadError, match="moe_a2a_overlap"):
        Parallelism(**{"dp": 2, "ep": 2, "micro_batch": 1, "global_batch": 4, "moe_a2a_overlap": True, **bad})


def test_resolve_carries_the_option_and_searches_only_layouts_megatron_accepts():
    from c3kit.step.config import resolve

    cfg = resolve(model="mixtral", hw="H100-SXM", gpus=16, tp=1, dp=8, ep=8, pp=2, vpp=4, seq=4096, batch=128,
                  micro_batch=1, dtype="fp8", recompute="none", dist_optimizer=True, moe_a2a_overlap=True)
    assert cfg.par.moe_a2a_overlap and cfg.graph.par.moe_a2a_overlap
    plan = make_plan(cfg.graph)
    for ph, other in (("fwd", "bwd"), ("bwd", "fwd")):
        for b in ep_blocking(plan, cfg.graph, ph):
            assert set(b.partners) <= set(plan.layer[other].compute)


@pytest.mark.parametrize("args, msg", [
    (["--ep", "1"], "use it with --ep > 1"),
    (["--ep", "8", "--recompute", "full"], "full recomputation"),
    (["--ep", "8", "--pp", "2"], "--vpp > 1"),
])
def test_cli_refuses_bad_requests(args, msg, capsys, tmp_path):
    from c3kit.cli.main import main

    out = tmp_path / "o"
    assert main(["analyze", "--model", "mixtral", "--hw", "H100-SXM", "--gpus", "16", "--moe-a2a-overlap",
                 "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and msg in err[0]
    assert not out.exists()
