"""MoE parts of the layer description: token counts per expert, router top-k, permute / unpermute and chunk
sorts, the FP8 recipe's op dtypes and BF16 activations (hand-checked on Qwen3-30B-A3B's published shape)."""

import pytest
from hypothesis import given, settings, strategies as st

from c3kit.workload.graph import build_step
from c3kit.workload.layer import FP8_GEMM_ROLES, GemmShape, MemShape, activation_dtype, comm_gemm_pairs, describe
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import Parallelism

# Qwen/Qwen3-30B-A3B config.json: hidden 2048, 48 layers, 32 heads, 4 KV heads, head_dim 128, 128 experts, top-8,
# moe_intermediate_size 768, vocab 151936
QWEN3 = ModelConfig("qwen3-30b-a3b", hidden=2048, layers=48, heads=32, kv_heads=4, head_dim=128, ffn_hidden=6144,
                    vocab=151936, n_experts=128, top_k=8, moe_ffn_hidden=768, max_seq=4096, position="rope",
                    gated_mlp=True, norm="rmsnorm")


def shape(layer, name):
    return layer.op(name).shape


def test_qwen3_ep8_token_counts_hand_checked():
    # Megatron-Bridge H100 layout: tp 1, ep 8, micro-batch 2 x 4096 tokens
    layer = describe(QWEN3, Parallelism(tp=1, dp=8, ep=8, micro_batch=2), "train", 4096)
    T = 2 * 4096
    # 8192 tokens x top-8 = 65536 routed rows; 128 / 8 = 16 local experts; balanced: 65536 / 16 = 4096 rows each
    assert shape(layer, "expert_fc1") == GemmShape(4096, 2 * 768, 2048, 16)
    assert shape(layer, "expert_fc2") == GemmShape(4096, 2048, 768, 16)
    assert shape(layer, "ep_dispatch").bytes == T * 8 * 2048 * 2
    assert shape(layer, "router") == GemmShape(T, 128, 2048)
    top = shape(layer, "router_topk")
    assert top == MemShape(3 * T * 128 * 4, 5 * T * 128, (("cross_entropy", T * 128, 128),))
    for name in ("moe_permute", "moe_unpermute", "moe_sort", "moe_unsort", "moe_permute.bwd", "moe_unpermute.bwd",
                 "moe_sort.bwd", "moe_unsort.bwd"):
        el = T * 8 * 2048
        assert shape(layer, name) == MemShape(2 * el * 2, 0, (("embedding", el, 2048),)), name
        assert layer.op(name).role == "permute"
    names = [o.name for o in layer.ops]
    assert names.index("router") < names.index("router_topk") < names.index("moe_permute") < names.index(
        "ep_dispatch") < names.index("moe_sort") < names.index("expert_fc1")
    assert names.index("expert_fc2") < names.index("moe_unsort") < names.index("ep_combine") < names.index(
        "moe_unpermute")
    # the all-to-all -> grouped GEMM pairs stay visible to the overlap engine
    assert [p.gemm.name for p in comm_gemm_pairs(layer) if p.pattern == "moe"] == [
        "expert_fc1", "expert_fc2.dgrad", "expert_fc2.wgrad"]


def test_one_local_expert_has_no_chunk_sort():
    m = ModelConfig("m8", hidden=1024, layers=2, heads=8, vocab=1000, n_experts=8, top_k=2, moe_ffn_hidden=512)
    layer = describe(m, Parallelism(tp=1, dp=8, ep=8), "train", 1024)
    names = [o.name for o in layer.ops]
    assert "moe_sort" not in names and "moe_permute" in names
    assert shape(layer, "expert_fc1") == GemmShape(1024 * 2, 512, 1024, 1)  # not gated: g = 1


def test_expert_tp_path_token_counts():
    layer = describe(QWEN3, Parallelism(tp=2, sp=True, dp=1), "train", 4096)
    # ep 1: every expert's 1/tp slice sees ceil(4096 x 8 / 128) = 256 rows
    assert shape(layer, "expert_fc1") == GemmShape(256, 2 * 768 // 2, 2048, 128)
    assert shape(layer, "moe_permute").parts == (("embedding", 4096 * 8 * 2048, 2048),)
    assert "moe_sort" not in [o.name for o in layer.ops]


@settings(max_examples=25, deadline=None)
@given(mb=st.integers(1, 4), k=st.sampled_from([1, 2, 8]), ep=st.sampled_from([2, 4, 8]))
def test_routed_rows_are_conserved(mb, k, ep):
    m = ModelConfig("m", hidden=512, layers=2, heads=8, vocab=1000, n_experts=16, top_k=k, moe_ffn_hidden=256)
    layer = describe(m, Parallelism(tp=1, dp=ep, ep=ep, micro_batch=mb), "train", 256)
    e1 = shape(layer, "expert_fc1")
    # balanced routing: the local experts' rows are this rank's tokens x top_k
    assert e1.m * e1.batch == mb * 256 * k
    assert shape(layer, "moe_permute").parts[0][1] == mb * 256 * k * 512


def test_fp8_op_dtypes_and_bf16_activations():
    g8 = build_step(QWEN3, Parallelism(tp=1, dp=8, ep=8), "train", 4096, "fp8")
    g16 = build_step(QWEN3, Parallelism(tp=1, dp=8, ep=8), "train", 4096, "bf16")
    gemm_dtypes = {n.role.removeprefix("re_"): n.op.dtype for n in g8.nodes if type(n.op).__name__ == "Gemm"}
    assert gemm_dtypes == {**{r: "fp8" for r in ("qkv", "proj", "experts")}, "router": "bf16", "lm_head": "bf16"}
    assert set(FP8_GEMM_ROLES) >= {"qkv", "proj", "experts", "fc1", "fc2"}
    assert [n.op.bytes for n in g8.comm_nodes()] == [n.op.bytes for n in g16.comm_nodes()]
    assert activation_dtype("fp8", "train") == "bf16" and activation_dtype("fp8", "decode") == "fp8"
    assert activation_dtype("bf16", "train") == "bf16"
    with pytest.raises(Exception):
        describe(QWEN3, Parallelism(tp=1, dp=8, ep=3), "train", 4096)


def test_expert_tp_reductions_keep_their_gemm_pairs():
    layer = describe(QWEN3, Parallelism(tp=2, sp=True, dp=1), "train", 4096)
    pairs = {(p.pattern, p.coll.name): p.gemm.name for p in comm_gemm_pairs(layer)}
    assert pairs[("gemm_rs", "expert_fc2.rs")] == "expert_fc2"
    assert pairs[("gemm_rs", "fc1.dgrad.rs")] == "expert_fc1.dgrad"
    # the router's input gradient (sequence-parallel rows) joins after the reduction
    assert set(layer.op("mlp_norm.bwd").deps) == {"fc1.dgrad.rs", "router.dgrad"}


def test_token_count_gather_and_aux_loss_hand_checked():
    # Megatron-Core's alltoall dispatcher all-gathers every rank's int64 count per expert over the EP group before the
    # permute; the load-balancing loss scores the T x E logits a second time, forward and backward (training only)
    layer = describe(QWEN3, Parallelism(tp=1, dp=8, ep=8, micro_batch=1), "train", 4096)
    cnt = layer.op("moe_counts.ag")
    assert cnt.shape.kind == "all_gather" and cnt.shape.bytes == 128 * 8 * 8 and cnt.shape.ranks == 8
    assert cnt.stream == "ep" and cnt.role == "moe_counts" and cnt.phase == "fwd"
    assert set(cnt.deps) == {"router_topk", "router_aux"}
    assert "moe_counts.ag" in layer.op("moe_permute").deps
    el = 4096 * 128
    assert shape(layer, "router_aux") == MemShape(3 * el * 4, 5 * el, (("cross_entropy", el, 128),))
    assert shape(layer, "router_aux.bwd") == MemShape(3 * el * 4, 2 * el, (("cross_entropy.bwd", el, 128),))
    assert "router_aux.bwd" in layer.op("router.dgrad").deps
    assert not any(o.name.startswith("moe_counts") for o in layer.ops if o.phase == "bwd" and "re." not in o.name)
    # recomputed forward gathers the counts again; inference has no aux loss; ep 1 has no all-to-all to size
    full = describe(QWEN3, Parallelism(tp=1, dp=8, ep=8, micro_batch=1, recompute="full"), "train", 4096)
    assert {"re.moe_counts.ag", "re.router_aux"} <= {o.name for o in full.ops}
    pre = describe(QWEN3, Parallelism(tp=1, dp=8, ep=8, micro_batch=1), "prefill", 4096)
    assert "router_aux" not in {o.name for o in pre.ops} and "moe_counts.ag" in {o.name for o in pre.ops}
    assert "moe_counts.ag" not in {o.name for o in describe(QWEN3, Parallelism(tp=2, sp=True), "train", 4096).ops}
