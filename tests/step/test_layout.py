"""Interleaved pipeline bubbles and warm-up, hand-checked; the auto-layout's choices on small cases."""

import pytest

from c3kit.errors import MemoryFitError
from c3kit.hw import get_gpu
from c3kit.step import project
from c3kit.step.config import resolve
from c3kit.step.plan import bubble_micro_batches, warmup_chunks
from c3kit.workload.graph import Node, StepGraph
from c3kit.workload.model import ModelConfig
from c3kit.workload.ops import Collective, Gemm
from c3kit.workload.parallel import Parallelism

HW = get_gpu("H200-SXM")
MODEL = ModelConfig(name="tiny", hidden=64, layers=8, heads=4)


def pipeline_graph(pp, vpp, m, layers):
    par = Parallelism(pp=pp, vpp=vpp, micro_batch=1, global_batch=m)
    nodes = [Node(0, Gemm("f", 8, 8, 8), (), "fwd", "layer", "compute", m, "fc1"),
             Node(1, Gemm("b", 8, 8, 8), (0,), "bwd", "layer", "compute", m, "fc1"),
             Node(2, Collective("send", "send_recv", 1024.0, 2, "pp"), (0,), "fwd", "micro", "pp", m * vpp, "pp_fwd")]
    return StepGraph(MODEL, par, "train", 16, tuple(nodes), layers, m, 16)


@pytest.mark.parametrize("pp, vpp, m, layers", [(4, 1, 8, 2), (4, 2, 8, 2), (8, 3, 24, 1), (2, 4, 4, 4)])
def test_interleaved_bubble_hand_checked(pp, vpp, m, layers):
    times = {"f": 1.0, "b": 2.0, "send": 0.25}
    r = project(pipeline_graph(pp, vpp, m, layers), HW, timer=lambda op, hw: times[op.name])
    t_micro = layers * 3.0 + vpp * 0.25  # every chunk boundary sends once per micro-batch
    assert r.totals.bubble == pytest.approx((pp - 1) / vpp * t_micro)
    # bubble / ideal time = (p - 1) / (v m)
    assert r.totals.bubble / (m * t_micro) == pytest.approx((pp - 1) / (vpp * m))
    assert r.totals.step_time == pytest.approx((m + (pp - 1) / vpp) * t_micro)


def test_bubble_values():
    assert bubble_micro_batches(4, 1) == 3
    assert bubble_micro_batches(4, 2) == 1.5
    assert bubble_micro_batches(8, 3) == pytest.approx(7 / 3)
    assert bubble_micro_batches(1, 1) == 0


def test_warmup_chunks_hand_checked():
    assert warmup_chunks(4, 1, 8) == 3 and warmup_chunks(4, 1, 8, rank=3) == 0
    assert warmup_chunks(4, 1, 2) == 2  # fewer micro-batches than stages
    assert warmup_chunks(4, 2, 8) == 3 * 2 + 1 * 4
    assert warmup_chunks(4, 2, 8, rank=3) == 4
    assert warmup_chunks(8, 3, 24) == 7 * 2 + 2 * 8
    assert warmup_chunks(4, 2, 1) == 2  # capped at m x vpp


@pytest.mark.parametrize("pp, vpp", [(4, 1), (4, 2), (8, 3), (12, 8)])
def test_warmup_matches_the_memory_models_in_flight_activations(pp, vpp):
    # rank 0 holds warmup + 1 chunks of 1/vpp of its layers: pp (1 + (pp - 1) / (pp vpp)) micro-batches
    held = (warmup_chunks(pp, vpp, 10 * pp) + 1) / vpp
    expect = pp * (1 + (pp - 1) / (pp * vpp)) if vpp > 1 else pp
    assert held == pytest.approx(expect)


def test_auto_layout_tries_pipeline_stages_for_405b():
    cfg = resolve(model="llama-3-405b")
    assert any(c.pp > 1 for c in cfg.tried)
    assert cfg.memory.fits
    assert sum(c.verdict == "chosen" for c in cfg.tried) == 1
    chosen = next(c for c in cfg.tried if c.verdict == "chosen")
    assert (chosen.pp, chosen.gpus) == (cfg.par.pp, cfg.par.gpus)


def test_auto_layout_prefers_zero1_without_recompute_when_faster():
    cfg = resolve(model="llama-3-405b", gpus=576, tp=8, pp=9)
    assert cfg.par.dist_optimizer and not cfg.par.fsdp and cfg.par.recompute == "none"
    by = {(c.sharding, c.recompute): c for c in cfg.tried}
    full = by[("ddp", "full")]
    assert full.verdict.startswith("slower")
    assert by[("zero1", "none")].seconds_per_sequence < full.seconds_per_sequence
    assert by[("ddp", "none")].verdict.startswith("does not fit")


def test_auto_layout_keeps_the_least_recompute_that_fits_per_layout():
    cfg = resolve(model="llama-3-70b", gpus=16, tp=8, seq=4096)
    for c in cfg.tried:
        if not c.verdict.startswith("does not fit"):
            less = [d for d in cfg.tried if (d.pp, d.sharding) == (c.pp, c.sharding)
                    and ["none", "selective", "full"].index(d.recompute) < ["none", "selective", "full"].index(c.recompute)]
            assert all(d.verdict.startswith("does not fit") for d in less)


def test_given_sharding_and_recompute_are_kept():
    cfg = resolve(model="llama-3-70b", gpus=16, tp=8, pp=1, dist_optimizer=True, recompute="full")
    assert cfg.par.dist_optimizer and cfg.par.recompute == "full" and len(cfg.tried) == 1
    with pytest.raises(MemoryFitError):
        resolve(model="llama-3-70b", gpus=8, tp=8, pp=1, recompute="none", fsdp=False, dist_optimizer=False)


def test_analyze_reports_the_layouts_it_tried(tmp_path, capsys):
    import json

    from c3kit.cli.main import main

    assert main(["analyze", "--model", "llama-3-405b", "--gpus", "576", "--tp", "8", "--pp", "9",
                 "--out", str(tmp_path / "a"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["dist_optimizer"] and doc["config"]["recompute"] == "none"
    verdicts = {(c["sharding"], c["recompute"]): c["verdict"] for c in doc["tried"]}
    assert verdicts[("zero1", "none")] == "chosen" and verdicts[("ddp", "full")].startswith("slower")
    assert (tmp_path / "a" / "layouts_tried.csv").is_file()


# ---- uneven splits (issue 13: 126 layers over pp 8 x vpp 2 / 8) ----

from c3kit.errors import WorkloadError  # noqa: E402
from c3kit.step.plan import pipeline_bubble  # noqa: E402
from c3kit.workload.parallel import rank_layer_counts, stage_layer_counts  # noqa: E402


def test_torchtitan_split_of_405b_hand_checked():
    # generate_split_points: 16 stages, base 7, 14 extra layers to the middle stages, the last the rest
    assert stage_layer_counts(126, 8, 2, "torchtitan") == (7,) + (8,) * 14 + (7,)
    assert rank_layer_counts(126, 8, 2, "torchtitan") == (15,) + (16,) * 6 + (15,)  # stages r and r + 8
    assert stage_layer_counts(126, 8, 1, "torchtitan") == (15,) + (16,) * 6 + (15,)


def test_megatron_embedding_loss_split_hand_checked():
    # (126 + 2) / 64 = 2 slots per virtual stage; the first and last give one slot to embedding / loss
    counts = stage_layer_counts(126, 8, 8, "embedding_loss")
    assert counts == (1,) + (2,) * 62 + (1,) and sum(counts) == 126
    assert rank_layer_counts(126, 8, 8, "embedding_loss") == (15,) + (16,) * 6 + (15,)
    assert stage_layer_counts(14, 2, 2, "embedding_loss") == (3, 4, 4, 3)


def test_llama3_split_hand_checked():
    # Llama 3 Sec. 3.3.2: 126 + 2 slots over pp 16 x vpp 8 = 1 per chunk; the first chunk holds only the embedding,
    # the last only the loss; ranks 7 / 8 x 14 / 7
    counts = stage_layer_counts(126, 16, 8, "llama3")
    assert counts == (0,) + (1,) * 126 + (0,)
    assert rank_layer_counts(126, 16, 8, "llama3") == (7,) + (8,) * 14 + (7,)
    assert stage_layer_counts(14, 2, 2, "llama3") == stage_layer_counts(14, 2, 2, "embedding_loss") == (3, 4, 4, 3)
    with pytest.raises(WorkloadError, match="embedding_loss"):
        stage_layer_counts(126, 16, 8, "embedding_loss")  # Megatron-Core's rule keeps a layer in every chunk
    with pytest.raises(WorkloadError, match="llama3"):
        stage_layer_counts(125, 16, 8, "llama3")  # 127 slots do not divide by 128
    with pytest.raises(WorkloadError, match="llama3"):
        stage_layer_counts(2, 4, 1, "llama3")  # the first rank would hold the embedding alone


def test_even_split_hand_checked_and_refusals():
    assert stage_layer_counts(80, 4, 5) == (4,) * 20
    assert rank_layer_counts(80, 3) == (26, 27, 27)  # no interleaving: the remainder goes to the middle
    with pytest.raises(WorkloadError, match="pp 8 x vpp 2"):
        stage_layer_counts(126, 8, 2)  # Megatron-Core refuses an uneven interleaved split
    with pytest.raises(WorkloadError, match="embedding_loss"):
        stage_layer_counts(125, 8, 2, "embedding_loss")  # 127 slots do not divide by 16
    with pytest.raises(WorkloadError, match="pp_split"):
        Parallelism(pp_split="zigzag")
    with pytest.raises(WorkloadError, match="pipeline stages"):
        stage_layer_counts(10, 8, 2, "torchtitan")


def test_even_embedding_loss_split_accepts_405b_on_pp8_vpp8():
    big = ModelConfig(name="l405", hidden=16384, layers=126, heads=128, kv_heads=8, ffn_hidden=53248)
    p = Parallelism(tp=8, pp=8, vpp=8, dp=1, global_batch=64, pp_split="embedding_loss").validate(big)
    assert max(p.rank_layers(126)) == 16
    with pytest.raises(WorkloadError, match="126 layers"):
        Parallelism(tp=8, pp=8, vpp=8, dp=1, global_batch=64).validate(big)


def test_pipeline_bubble_hand_checked():
    # even ranks: (pp - 1) / vpp micro-batch times
    assert pipeline_bubble(9.0, 1.0, (4, 4, 4, 4), 2) == pytest.approx(3 * 10.0 / 2)
    # 405B torchtitan interleaved: others = (126 - 16) / 16 = 6.875 of the fullest rank's layer time
    assert pipeline_bubble(16.0, 1.0, (15,) + (16,) * 6 + (15,), 2) == pytest.approx((110.0 + 7.0) / 2)


def uneven_graph(layers, pp, vpp, m, split):
    model = ModelConfig(name="tiny", hidden=64, layers=layers, heads=4)
    par = Parallelism(pp=pp, vpp=vpp, micro_batch=1, global_batch=m, pp_split=split)
    L = max(par.rank_layers(layers))
    nodes = [Node(0, Gemm("f", 8, 8, 8), (), "fwd", "layer", "compute", m, "fc1"),
             Node(1, Gemm("b", 8, 8, 8), (0,), "bwd", "layer", "compute", m, "fc1"),
             Node(2, Collective("send", "send_recv", 1024.0, 2, "pp"), (0,), "fwd", "micro", "pp", m * vpp, "pp_fwd")]
    return StepGraph(model, par, "train", 16, tuple(nodes), L, m, 16)


@pytest.mark.parametrize("layers, pp, vpp, split, L, bubble", [
    (10, 4, 1, "even", 3, 7 / 3 * 9 + 3 * 0.25),  # ranks 2, 3, 3, 2
    (9, 2, 2, "torchtitan", 5, (0.8 * 15 + 1 * 0.5) / 2),  # stages 2, 3, 2, 2: ranks 4, 5
    (8, 4, 2, "even", 2, 3 * (6 + 0.5) / 2),  # even ranks: (pp - 1) / vpp micro-batches
])
def test_uneven_pipeline_projection_hand_checked(layers, pp, vpp, split, L, bubble):
    times = {"f": 1.0, "b": 2.0, "send": 0.25}
    m = 2 * pp
    g = uneven_graph(layers, pp, vpp, m, split)
    assert g.layers_per_stage == L
    r = project(g, HW, timer=lambda op, hw: times[op.name])
    t_micro = L * 3.0 + vpp * 0.25
    assert r.totals.bubble == pytest.approx(bubble)
    assert r.totals.step_time == pytest.approx(m * t_micro + bubble)


from hypothesis import assume, given, settings, strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(layers=st.integers(1, 160), pp=st.integers(1, 16), vpp=st.integers(1, 8),
       split=st.sampled_from(["even", "torchtitan", "embedding_loss", "llama3"]))
def test_every_split_places_every_layer_once(layers, pp, vpp, split):
    try:
        counts = stage_layer_counts(layers, pp, vpp, split)
    except WorkloadError:
        return  # a split the framework refuses
    assert len(counts) == pp * vpp and sum(counts) == layers and min(counts) >= 0
    ranks = rank_layer_counts(layers, pp, vpp, split)
    assert len(ranks) == pp and sum(ranks) == layers
    if split not in ("embedding_loss", "llama3"):
        assert max(counts) - min(counts) <= 1 and min(counts) >= 1
    if pp > 1:
        assert min(ranks) >= 1


@settings(max_examples=100, deadline=None)
@given(layers=st.integers(2, 160), pp=st.integers(2, 16), vpp=st.integers(1, 4),
       t_layers=st.floats(1e-3, 10.0), t_other=st.floats(0.0, 1.0))
def test_uneven_bubble_never_exceeds_even_ranks_of_the_fullest(layers, pp, vpp, t_layers, t_other):
    assume(pp * vpp <= layers)
    ranks = rank_layer_counts(layers, pp, vpp, "torchtitan")
    b = pipeline_bubble(t_layers, t_other, ranks, vpp)
    even = (pp - 1) * (t_layers + t_other) / vpp  # every rank as full as the fullest
    assert 0 <= b <= even * (1 + 1e-12)
