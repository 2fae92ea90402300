"""The step-model pricer: exact parts by hand, interpolation error bound, monotonicity, the per-iteration hook."""

from dataclasses import replace

import pytest

from c3kit import cost
from c3kit.hw.catalog import get_gpu
from c3kit.serve.kv import kv_capacity
from c3kit.serve.pricing import StepPricer, price_iteration
from c3kit.serve.workload import ServeError
from c3kit.step import project
from c3kit.workload.graph import build_step
from c3kit.workload.model import get_model
from c3kit.workload.ops import Attention
from c3kit.workload.parallel import Parallelism

M = get_model("Llama-3-8B")
HW = get_gpu("H200-SXM")


@pytest.fixture(scope="module")
def pricer():
    return StepPricer(M, HW, tp=2, cost_model="roofline")


def test_dense_part_is_the_projection_without_attention_and_head(pricer):
    g = build_step(M, Parallelism(tp=2, micro_batch=1), "prefill", 40)
    full = project(g, HW, cost_model="roofline").totals.step_time
    attn = next(n.op for n in g.nodes if isinstance(n.op, Attention))
    head = next(n.op for n in g.nodes if n.role == "lm_head")
    sample = next(n.op for n in g.nodes if n.role == "sample")
    expect = full - M.layers * cost.time(attn, HW) - cost.time(head, HW) - cost.time(sample, HW)
    assert pricer.dense_time(40) == pytest.approx(expect, rel=1e-9)
    # the head part: LM head and sampling of the one prompt's last position
    assert pricer.head_time(1) == pytest.approx(cost.time(head, HW) + cost.time(sample, HW), rel=1e-12)
    # one 40-token prompt from scratch prices as the prefill step of 40 tokens
    assert pricer([(40, 0)], 0, 0) == pytest.approx(full, rel=1e-9)


def test_decode_batch_matches_the_decode_step(pricer):
    g = build_step(M, Parallelism(tp=2, micro_batch=8), "decode", 1000)
    full = project(g, HW, cost_model="roofline").totals.step_time
    # 8 requests each attending 1000 tokens: the decode graph's attention has kv_len = seq = 1000
    exact = StepPricer(M, HW, tp=2, cost_model="roofline", exact=True)
    # (the graph's final norm covers 1 row in a 1-sequence prefill graph, 8 in the decode graph: 1e-5 of the step)
    assert exact([], 8, 8000) == pytest.approx(full, rel=1e-4)
    assert exact([], 8, 8000) != pytest.approx(full * 1.001, rel=1e-4)
    assert pricer([], 8, 8000) == pytest.approx(full, rel=1e-3)  # the KV-length grid


def test_interpolation_error_is_small():
    p = StepPricer(M, HW, tp=1, cost_model="efficiency")
    assert p.interpolation_error(range(65, 8192, 331)) < 0.02


def test_decode_attention_grid_error_is_small(pricer):
    exact = StepPricer(M, HW, tp=2, cost_model="roofline", exact=True)
    for d, kv in ((1, 100), (7, 7 * 3333), (64, 64 * 1500), (200, 200 * 31000)):
        assert pricer.attn_decode_time(d, kv) == pytest.approx(exact.attn_decode_time(d, kv), rel=0.01)


def test_chunk_attention_counts_causal_pairs(pricer):
    a = next(n.op for n in build_step(M, Parallelism(tp=2), "prefill", 8).nodes if isinstance(n.op, Attention))
    t = pricer.attn_prefill_time([(100, 300)])
    assert t == pytest.approx(M.layers * cost.time(replace(a, batch=1, q_len=100, kv_len=350), HW, "roofline"))


def test_time_grows_with_tokens_and_kv(pricer):
    assert pricer([], 8, 8 * 4000) > pricer([], 8, 8 * 100)
    assert pricer([(512, 0)], 8, 800) > pricer([(128, 0)], 8, 800)


def test_price_iteration_hook():
    p = price_iteration("Llama-3-8B", "H200-SXM", [512, 100], [1000] * 16, tp=1, prefill_cached=[0, 900])
    assert p.tokens == 612 + 16
    assert p.total == pytest.approx(p.dense + p.attn_prefill + p.attn_decode + p.lm_head)
    assert p.attn_decode > 0 and p.attn_prefill > 0
    with pytest.raises(Exception):
        price_iteration("Llama-3-8B", "H200-SXM", [0], [])


def test_kv_capacity_by_hand():
    kv = kv_capacity(M, HW, tp=1, max_batched_tokens=8192)
    # Llama-3-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 131072 B per token
    assert kv.kv_per_token == 32 * 8 * 128 * 2 * 2
    # budget: 0.9 of the 143771 MiB the driver reports on an H200 (not the datasheet's 141 GB)
    assert kv.budget == pytest.approx(0.9 * 143771 * 2**20)
    assert kv.blocks == int((0.9 * 143771 * 2**20 - kv.weights - kv.activations) // (16 * kv.kv_per_token))
    with pytest.raises(ServeError, match="no room"):
        kv_capacity(get_model("Llama-3-70B"), HW, tp=1)
    # TensorRT-LLM's fraction: of the memory left after weights and activations
    free = kv_capacity(M, HW, tp=1, max_batched_tokens=8192, of_free=True)
    assert free.blocks == int(0.9 * (143771 * 2**20 - kv.weights - kv.activations) // (16 * kv.kv_per_token))
    assert free.blocks > kv.blocks


def test_engines_price_the_activation_their_code_runs():
    # serving engines run a fused gated activation; the bare PyTorch loop splits the gate+up output into views
    def act_kind(engine):
        p = StepPricer(M, HW, tp=1, cost_model="roofline", engine=engine)
        g = p._build(M, p.par, "prefill", 16, "bf16", HW.gpus_per_node)
        return next(n.op.parts[0][0] for n in g.nodes if n.role == "act")
    assert act_kind("vllm-v0") == act_kind("none") == "swiglu"
    assert act_kind("loop") == act_kind("loop-eager") == "swiglu_chunked_cold"
