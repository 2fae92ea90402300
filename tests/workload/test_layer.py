"""The one description of a layer: hand-checked shapes, ints and arrays agree, and every consumer reads it."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from c3kit.errors import OverlapError
from c3kit.workload.graph import build_step
from c3kit.workload.layer import (AttnShape, CollShape, Dims, GemmShape, MemShape, Structure, comm_gemm_pairs,
                                  describe, describe_tokens, evaluate, flops_bytes, weights)
from c3kit.workload.model import ModelConfig, get_model
from c3kit.workload.ops import Collective
from c3kit.workload.parallel import Parallelism

L70 = get_model("Llama-3-70B")


def shape(layer, name):
    return layer.op(name).shape


def test_llama70b_tp8_sp_hand_checked():
    layer = describe(L70, Parallelism(tp=8, sp=True, dp=4, dist_optimizer=True), "train", 8192)
    T = 8192
    assert layer.tokens == T
    # qkv: (64/8 + 2 x 8/8) heads x 128 = 1280 columns per GPU
    assert shape(layer, "qkv") == GemmShape(T, 1280, 8192)
    assert shape(layer, "proj") == GemmShape(T, 8192, 1024)  # 64/8 x 128 = 1024
    assert shape(layer, "fc1") == GemmShape(T, 2 * 28672 // 8, 8192)  # gated: 7168
    assert shape(layer, "fc2") == GemmShape(T, 8192, 3584)
    assert shape(layer, "fc1.dgrad") == GemmShape(T, 8192, 7168)
    assert shape(layer, "fc1.wgrad") == GemmShape(8192, 7168, T)
    assert shape(layer, "lm_head") == GemmShape(T, 16032, 8192)  # ceil(128256 / 8)
    assert shape(layer, "attn") == AttnShape(1, 8, 1, T, T, 128, True, False)
    ag = shape(layer, "attn_in.ag")
    assert (ag.kind, ag.bytes, ag.ranks, ag.group, ag.block) == ("all_gather", T * 8192 * 2, 8, "tp", 8)
    assert shape(layer, "proj.rs").kind == "reduce_scatter"
    e = 1024 * 8192  # Tsp = 8192 / 8 rows of H
    assert shape(layer, "attn_norm") == MemShape(4 * e * 2, 5 * e, (("residual_add_cold", e, 8192), ("rmsnorm_cold", e, 8192)))
    # RoPE on this GPU's 8 query and 1 KV heads of all 8192 tokens (SP gathers them before QKV)
    assert shape(layer, "rope").parts == (("rope_cold", 8192 * 8 * 128, 128), ("rope_cold", 8192 * 1 * 128, 128))
    assert shape(layer, "rope.bwd").parts == (("rope.bwd", 8192 * 8 * 128, 128), ("rope.bwd", 8192 * 1 * 128, 128))
    assert shape(layer, "mlp_norm.bwd").parts == (("rmsnorm.bwd", e, 8192), ("residual_add", e, 8192))
    # the default glue "split": SwiGLU over the two strided halves of the one gate+up GEMM output
    assert shape(layer, "act").parts == (("swiglu_chunked_cold", 8192 * 28672 // 8, 28672 // 8),)
    sep = describe(L70, Parallelism(tp=8, sp=True), "train", 8192, glue="separate")
    assert shape(sep, "act").parts == (("swiglu", 8192 * 28672 // 8, 28672 // 8),)
    assert shape(sep, "act.bwd").parts == (("swiglu.bwd", 8192 * 28672 // 8, 28672 // 8),)
    # per-rank weights of one layer: 8192 x 1280 + 1024 x 8192 + 2 x 8192 (RMSNorm) + 3 x 8192 x 3584
    assert layer.weights.layer == 10485760 + 8388608 + 16384 + 88080384 == 106971136
    dpg = shape(layer, "layer.dp_grad")
    assert (dpg.kind, dpg.bytes, dpg.ranks, dpg.block) == ("reduce_scatter", 106971136 * 4, 4, 32)
    assert layer.op("layer.dp_grad").count == 1 and layer.op("qkv").count == 1


def test_kv_heads_replicated_beyond_tp():
    layer = describe(L70, Parallelism(tp=16, sp=True), "train", 4096)
    assert shape(layer, "qkv").n == (64 // 16 + 2 * 1) * 128 == 768


def test_moe_expert_parallel_hand_checked():
    mix = get_model("Mixtral-8x7B")
    layer = describe(mix, Parallelism(tp=8, sp=True, ep=8, dp=1), "train", 4096)
    # each TP rank routes 4096 / 8 = 512 tokens x top-2 = 1024 rows to 8 / 8 = 1 local expert
    assert shape(layer, "expert_fc1") == GemmShape(1024, 2 * 14336, 4096, 1)
    assert shape(layer, "ep_dispatch").bytes == 1024 * 4096 * 2
    assert shape(layer, "router") == GemmShape(512, 8, 4096)
    moe = [p for p in comm_gemm_pairs(layer) if p.pattern == "moe"]
    assert [(p.gemm.name, p.m, p.n, p.k) for p in moe] == [("expert_fc1", 1024, 28672, 4096),
                                                           ("expert_fc2.dgrad", 1024, 14336, 4096),
                                                           ("expert_fc2.wgrad", 1024, 4096, 1024)]


def test_decode_shapes():
    layer = describe(L70, Parallelism(tp=8, micro_batch=4), "decode", 2048)
    assert layer.tokens == 4
    assert shape(layer, "qkv") == GemmShape(4, 1280, 8192)
    assert shape(layer, "attn") == AttnShape(4, 8, 1, 1, 2048, 128, True, False)
    # K and V written by one index_copy kernel each: read and write 4 tokens x 1 head x 128 each, 2 bytes; the
    # rows are 1 KV head x 128 wide
    kv = 4 * 1 * 128
    assert shape(layer, "kv_write") == MemShape(2 * 2 * kv * 2, 0, (("index_copy", kv, 128), ("index_copy", kv, 128)))
    # greedy sampling: one argmax over the 4 sequences' logits, the whole vocabulary (128256), 2-byte logits
    assert shape(layer, "sample") == MemShape(4 * 128256 * 2, 4 * 128256, (("argmax", 4 * 128256, 128256),))


def test_prefill_writes_kv_by_index_copy_and_training_samples_nothing():
    pre = describe(L70, Parallelism(tp=8, micro_batch=1), "prefill", 1024)
    kv = 1024 * 1 * 128
    assert shape(pre, "kv_write") == MemShape(2 * 2 * kv * 2, 0, (("index_copy", kv, 128), ("index_copy", kv, 128)))
    assert shape(pre, "sample").parts == (("argmax", 128256, 128256),)  # the last position of one sequence
    train = describe(L70, Parallelism(tp=8), "train", 1024)
    assert "sample" not in train.by_name() and "kv_write" not in train.by_name()


def test_pairs_of_llama_tp8():
    layer = describe_tokens(L70, Parallelism(tp=8, sp=True), 8192)
    got = {(p.pattern, p.coll.name, p.gemm.name): (p.m, p.n, p.k) for p in comm_gemm_pairs(layer)}
    assert got[("ag_gemm", "attn_in.ag", "qkv")] == (8192, 1280, 8192)
    assert got[("gemm_rs", "proj.rs", "proj")] == (8192, 8192, 1024)
    assert got[("ag_gemm", "mlp_out.bwd.ag", "fc2.dgrad")] == (8192, 3584, 8192)
    assert got[("gemm_rs", "qkv.dgrad.rs", "qkv.dgrad")] == (8192, 8192, 1280)


# ---- the same description over ints and over arrays ----

@st.composite
def scenario(draw):
    heads = draw(st.sampled_from([8, 16, 32]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, heads) if heads % k == 0]))
    hd = draw(st.sampled_from([64, 128]))
    experts = draw(st.sampled_from([1, 1, 8]))
    m = ModelConfig(name="p", hidden=heads * hd, layers=draw(st.sampled_from([4, 8, 12])), heads=heads, kv_heads=kv,
                    ffn_hidden=draw(st.sampled_from([3, 4])) * heads * hd, vocab=draw(st.sampled_from([32000, 50257])),
                    gated_mlp=draw(st.booleans()), norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
                    tied_embeddings=draw(st.booleans()), n_experts=experts, top_k=2 if experts > 1 else 1)
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if heads % t == 0]))
    dp = draw(st.sampled_from([1, 2, 4]))
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8) if experts % e == 0 and (tp * dp) % e == 0])) if experts > 1 else 1
    mb = draw(st.sampled_from([1, 2]))
    par = Parallelism(tp=tp, sp=draw(st.booleans()), dp=dp, pp=draw(st.sampled_from([p for p in (1, 2, 4)
                                                                                      if m.layers % p == 0])),
                      ep=ep, fsdp=draw(st.booleans()), dist_optimizer=draw(st.booleans()), micro_batch=mb,
                      global_batch=mb * dp * draw(st.sampled_from([1, 3])),
                      recompute=draw(st.sampled_from(["none", "selective", "full"])))
    return m, par, draw(st.sampled_from(["train", "prefill", "decode"])), draw(st.sampled_from([128, 1024]))


def _stack(dims_list):
    """Dims whose fields are arrays over the given scalar Dims."""
    return Dims(**{f.name: np.array([getattr(d, f.name) for d in dims_list])
                   for f in dataclasses.fields(Dims)})


def _values(sh):
    """Every size of a shape, memory-bound parts flattened to their kinds' elements and widths."""
    out = []
    for f in dataclasses.fields(sh):
        v = getattr(sh, f.name)
        if f.name == "parts":
            out += [x for _, e, w in v for x in (e, w)]
        else:
            out.append(v)
    return out


@settings(max_examples=25)
@given(scenario(), st.lists(st.integers(0, 3), min_size=1, max_size=3))
def test_arrays_evaluate_like_ints(sc, scale):
    """One Structure, several Dims that differ in sizes: the array evaluation equals each int evaluation."""
    m, par, phase, seq = sc
    base = describe(m, par, phase, seq)
    variants = [dataclasses.replace(m, hidden=m.hidden * (1 + s), head_dim=m.head_dim * (1 + s),
                                    ffn_hidden=m.ffn_hidden * (1 + s), moe_ffn_hidden=m.moe_ffn_hidden * (1 + s))
                for s in scale]
    ints = [base] + [describe(v, par, phase, seq * (1 + s)) for v, s in zip(variants, scale)]
    arr = evaluate(_stack([x.dims for x in ints]), base.structure)
    assert [o.name for o in arr.ops] == [o.name for o in base.ops]
    for j, op in enumerate(arr.ops):
        for i, one in enumerate(ints):
            ref = one.ops[j]
            assert (ref.name, ref.role, ref.deps, ref.phase, ref.scope, ref.stream) == \
                   (op.name, op.role, op.deps, op.phase, op.scope, op.stream)
            for a, b in zip(_values(op.shape), _values(ref.shape)):
                assert np.broadcast_to(a, (len(ints),))[i] == b, (op.name, i)
            if not isinstance(ref.shape, CollShape):
                fa, ba = flops_bytes(op, arr.dims.b)
                fr, br = flops_bytes(ref, one.dims.b)
                assert np.broadcast_to(fa, (len(ints),))[i] == pytest.approx(fr, rel=1e-12)
                assert np.broadcast_to(ba, (len(ints),))[i] == pytest.approx(br, rel=1e-12)


# ---- every consumer agrees with the description ----

@settings(max_examples=30)
@given(scenario(), st.sampled_from([4, 8]))
def test_graph_nodes_are_the_description(sc, gpn):
    m, par, phase, seq = sc
    layer = describe(m, par, phase, seq, gpus_per_node=gpn)
    g = build_step(m, par, phase, seq, gpus_per_node=gpn)
    assert [n.name for n in g.nodes] == [o.name for o in layer.ops]
    for n, o in zip(g.nodes, layer.ops):
        assert [g.nodes[d].name for d in n.deps] == list(o.deps)
        assert (n.phase, n.scope, n.stream, n.count, n.role, n.grad) == (o.phase, o.scope, o.stream, o.count, o.role,
                                                                         o.grad)
        if isinstance(n.op, Collective):
            sh = o.shape
            assert (n.op.kind, n.op.bytes, n.op.ranks, n.op.group) == (sh.kind, sh.bytes, sh.ranks, sh.group)
        else:
            f, b = flops_bytes(o, layer.dims.b)
            assert (n.op.flops, n.op.bytes) == pytest.approx((f, b), rel=1e-12)


def test_fast_path_per_op_equals_graph():
    """The vectorized sweep's per-node sizes (the description over arrays) equal each scenario's graph nodes."""
    import sys
    from pathlib import Path

    from c3kit.step import fast

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "step"))
    from test_fast import random_scenarios

    df = random_scenarios(3, 40)
    df["gpn"] = 8
    for code in np.unique(fast._structure(df)):
        rows = df[fast._structure(df) == code]
        cols = {k: rows[k].to_numpy() for k in rows.columns if k != "gpu"}
        m0, p0 = fast.scenario_objects(rows.iloc[0])
        sh = fast._Shapes(cols, Structure.of(m0, p0, "train"))
        for i, (_, row) in enumerate(rows.iterrows()):
            m, p = fast.scenario_objects(row)
            g = build_step(m, p, "train", int(row["seq"]), "bf16", 8)
            for n in g.nodes:
                if isinstance(n.op, Collective):
                    nbytes, ranks, intra, _ = sh.collective(n.name)
                    assert (nbytes[i], ranks[i], bool(intra[i])) == (n.op.bytes, n.op.ranks, n.op.span == "intra")
                else:
                    (f, b), _ = sh.compute(n.name)
                    assert (f[i], b[i]) == pytest.approx((n.op.flops, n.op.bytes), rel=1e-12)


def test_overlap_scenarios_read_the_description():
    from c3kit.overlap.scenarios import model_pairs

    for name, tp, ep, sp in (("Llama-3-70B", 8, 0, True), ("Llama-3-8B", 16, 0, False), ("PaLM-540B", 8, 0, True),
                             ("Mixtral-8x7B", 4, 4, True), ("Mixtral-8x7B", 2, 0, True)):
        pairs = model_pairs(name, tp=tp, ep=ep, tokens=4096, sp=sp)
        m = get_model(name)
        use_ep = ep if ep > 1 else 1
        layer = describe_tokens(m, Parallelism(tp=tp, sp=sp, ep=use_ep, dp=max(1, use_ep // tp)), 4096)
        ops = layer.by_name()
        for pr in pairs:
            gemm = {"fwd qkv": "qkv", "fwd attn-out": "proj", "fwd fc1": "fc1", "fwd fc2": "fc2",
                    "bwd qkv dgrad": "qkv.dgrad", "bwd attn-out dgrad": "proj.dgrad", "bwd fc1 dgrad": "fc1.dgrad",
                    "bwd fc2 dgrad": "fc2.dgrad", "fwd moe up": "expert_fc1",
                    "bwd moe down dgrad": "expert_fc2.dgrad"}[pr.label.split(" (")[0]]
            op = ops.get(gemm) or ops["expert_" + gemm]
            assert (pr.problem.n, pr.problem.k) == (op.shape.n, op.shape.k), (name, pr.label)
            assert pr.problem.m == (4096 // tp * m.top_k if pr.problem.pattern == "moe" else 4096)
            assert pr.count == m.layers
    # PaLM's single KV head is replicated on every TP rank: (48/8 + 2) x 256 columns, not (48 + 2) x 256 / 8
    palm = model_pairs("PaLM-540B", tp=8, tokens=4096)
    assert palm[0].label == "fwd qkv (AG->GEMM)" and palm[0].problem.n == 2048
    with pytest.raises(OverlapError, match="heads"):
        model_pairs("T-NLG-17B", tp=8, tokens=4096)  # 28 heads do not split over 8 GPUs


def test_c3_and_scaling_read_the_description():
    from c3kit.studies.c3 import gemm_cases
    from c3kit.studies.scaling import HEAD_DIM, VOCAB, params_of

    for case in gemm_cases():
        name, label, t = case.name.rsplit(" ", 2)
        sh = describe_tokens(get_model(name), Parallelism(tp=8, sp=True), int(t[2:])).op(label).shape
        assert (case.m, case.n, case.k) == (sh.m, sh.n, sh.k)
    assert gemm_cases()[0] == type(gemm_cases()[0])("Llama-3-70B qkv T=2048", 2048, 1280, 8192)
    hidden, layers = np.array([4096, 8192, 12288]), np.array([32, 64, 96])
    for h, L, p in zip(hidden, layers, params_of(hidden, layers)):
        m = ModelConfig(name="f", hidden=int(h), layers=int(L), heads=int(h) // HEAD_DIM, vocab=VOCAB,
                        position="rope")
        assert p == m.param_count() - int(h) * 2  # the family omits the final norm
        assert p == L * (12 * h * h + 4 * h) + 2 * VOCAB * h


def test_runtime_benchmark_shapes_read_the_description():
    from c3kit.runtime.bench.overlap import case_shape

    assert case_shape("llama3-70b", "ag", 8, 8192) == (8192, 7168, 8192, 0)  # fused gate + up: 2 x 28672 / 8
    assert case_shape("llama3-70b", "rs", 8, 8192) == (8192, 8192, 3584, 0)
    assert case_shape("mixtral-8x7b", "moe", 8, 8192) == (2048, 28672, 4096, 1)  # 8192 / 8 x top-2 rows
    assert case_shape("tiny", "moe", 2, 32) == (32, 128, 64, 2)


def test_weights_match_param_counts():
    for name in ("Llama-3-70B", "GPT-3-175B", "Mixtral-8x7B", "PaLM-540B"):
        m = dataclasses.replace(get_model(name), bias=False)  # the description leaves out (tiny) biases
        w = weights(Dims.of(m, Parallelism(), 2048), Structure.of(m, Parallelism()))
        assert w.layer == m.layer_params()
        assert w.emb_params == m.vocab * m.hidden * (1 if m.tied_embeddings else 2)


def test_bad_input():
    from c3kit.errors import WorkloadError

    with pytest.raises(WorkloadError, match="phase"):
        describe(L70, Parallelism(tp=8), "serve", 128)
    with pytest.raises(WorkloadError, match="sequence"):
        describe(L70, Parallelism(tp=8), "train", 0)
    with pytest.raises(WorkloadError, match="heads"):
        describe(L70, Parallelism(tp=3), "train", 128)
    with pytest.raises(WorkloadError, match="no op"):
        describe(L70, Parallelism(tp=8), "train", 128).op("nope")


# ---- workload features: context parallelism, uneven pipeline stages, ZeRO-2, MoE capacity and imbalance ----

def test_context_parallel_ring_attention_hand_checked():
    seq, cp = 32768, 4
    layer = describe(L70, Parallelism(tp=8, sp=True, cp=cp, dp=2), "train", seq)
    T = seq // cp  # 8192 tokens of each sequence on this GPU
    assert layer.tokens == T and shape(layer, "qkv") == GemmShape(T, 1280, 8192)
    att = shape(layer, "attn")
    assert (att.q_len, att.kv_len, att.balanced) == (T, seq, True)
    # load-balanced causal chunks: this GPU does 1/cp of the full causal attention
    full = describe(L70, Parallelism(tp=8, sp=True), "train", seq)
    assert flops_bytes(layer.op("attn"), 2)[0] * cp == flops_bytes(full.op("attn"), 2)[0]
    # KV exchange: cp - 1 = 3 ring steps of this GPU's K and V chunk (2 x 1 KV head x 8192 tokens x 128 x 2 B)
    kv = shape(layer, "attn.cp_kv")
    chunk = 2 * 1 * 1 * T * 128 * 2
    assert (kv.kind, kv.bytes, kv.group, kv.block) == ("send_recv", 3 * chunk, "cp", 32)
    assert shape(layer, "attn.bwd.cp_kv").bytes == 2 * 3 * chunk  # K, V forward and dK, dV back
    assert layer.op("attn.cp_kv").stream == "cp" and "attn.cp_kv" in layer.op("proj").deps
    # weights are shared by dp x cp = 8 ranks: the gradient reduction spans tp x cp x dp = 64 ranks
    dpg = shape(layer, "layer.dp_grad")
    assert (dpg.ranks, dpg.block) == (8, 64)
    assert Parallelism(tp=8, cp=4, dp=2).gpus == 64
    g = build_step(L70, Parallelism(tp=8, sp=True, cp=cp, dp=2), "train", seq)
    assert g.by_role("cp_kv")[0].op.span == "inter" and g.tokens_per_micro == T


def test_context_parallel_bad_input():
    from c3kit.errors import WorkloadError

    with pytest.raises(WorkloadError, match="load-balanced"):
        describe(L70, Parallelism(tp=8, cp=4), "train", 4100)
    with pytest.raises(WorkloadError, match="decode"):
        describe(L70, Parallelism(tp=8, cp=2), "decode", 4096)
    with pytest.raises(WorkloadError, match="expert parallelism"):
        describe(get_model("Mixtral-8x7B"), Parallelism(tp=2, cp=2, ep=2), "train", 4096)
    with pytest.raises(WorkloadError, match="cp"):
        Parallelism(cp=0)


def test_uneven_pipeline_stages_price_the_slowest():
    l405 = get_model("Llama-3-405B")  # 126 layers on 16 stages: ceil = 8 on the fullest stage
    g = build_step(l405, Parallelism(tp=8, sp=True, pp=16, dp=1, global_batch=16), "train", 8192)
    assert g.layers_per_stage == 8
    even = build_step(l405, Parallelism(tp=8, sp=True, pp=14, dp=1, global_batch=14), "train", 8192)
    assert even.layers_per_stage == 9
    from c3kit.workload.memory import memory_report

    r = memory_report(l405, 1e15, par=Parallelism(tp=8, sp=True, pp=16, global_batch=16), seq=8192)
    r8 = memory_report(dataclasses.replace(l405, layers=128), 1e15,
                       par=Parallelism(tp=8, sp=True, pp=16, global_batch=16), seq=8192)
    assert r.activations == r8.activations  # 8 layers on the fullest stage either way


def test_fast_sweep_agrees_on_uneven_stages():
    from c3kit.hw import get_gpu
    from c3kit.step import project
    from c3kit.step.fast import model_columns, par_columns, project_many

    gpu = get_gpu("H200-SXM")
    m = ModelConfig(name="u", hidden=1024, layers=7, heads=8, vocab=32000)
    rows = []
    for pp in (2, 3, 4):
        par = Parallelism(tp=2, sp=True, pp=pp, dp=2, global_batch=8)
        rows.append({**model_columns(m), **par_columns(par, 1024), "gpu": "H200-SXM"})
        t = project(build_step(m, par, "train", 1024), gpu).totals
        got = project_many(pd.DataFrame([rows[-1]]), {"H200-SXM": gpu})
        assert got["step_time"][0] == pytest.approx(t.step_time, rel=1e-9)


def test_zero2_communication_like_zero1_gradients_sharded():
    from c3kit.workload.memory import memory_report

    par1 = Parallelism(tp=8, dp=8, dist_optimizer=True)
    par2 = Parallelism(tp=8, dp=8, zero2=True)
    a, b = describe(L70, par1, "train", 4096), describe(L70, par2, "train", 4096)
    assert [(o.name, o.shape) for o in a.ops] == [(o.name, o.shape) for o in b.ops]
    assert shape(b, "layer.dp_grad").kind == "reduce_scatter"
    m1 = memory_report(L70, 1e15, par=par1, seq=4096)
    m2 = memory_report(L70, 1e15, par=par2, seq=4096)
    assert m2.gradients == pytest.approx(m1.gradients / 8) and m2.optimizer == m1.optimizer


def test_moe_capacity_and_imbalance_token_counts():
    mix = get_model("Mixtral-8x7B")

    def rows(**kw):
        return shape(describe(mix, Parallelism(tp=1, dp=8, ep=8, **kw), "train", 4096), "expert_fc1").m

    # 4096 tokens x top-2 on one rank to 8 / 8 = 1 local expert: 8192 rows when routing is balanced
    assert rows() == 8192
    assert rows(moe_imbalance=1.25) == 10240  # the busiest expert gets 1.25x its share
    assert rows(moe_imbalance=1.25, moe_capacity=1.1) == 9012  # capped at ceil(1.1 x 8192) = 9012 (rest dropped)
    assert rows(moe_capacity=2.0) == 8192  # capacity above the load changes nothing
    two = describe(mix, Parallelism(tp=1, dp=8, ep=4, moe_imbalance=1.5), "train", 4096)
    assert shape(two, "expert_fc1") == GemmShape(6144, 28672, 4096, 2)  # ceil(8192 x 1.5 / 2 local experts)
    from c3kit.errors import WorkloadError

    with pytest.raises(WorkloadError, match="moe_imbalance"):
        Parallelism(moe_imbalance=0.9)
    with pytest.raises(WorkloadError, match="moe_capacity"):
        Parallelism(moe_capacity=0.5)


def test_eager_norm_rope_prices_the_fp32_passes():
    from c3kit.workload.layer import NORM_ROPE
    from c3kit.workload.memops import MEMOP_KINDS

    assert NORM_ROPE == ("fused", "eager")
    fused = describe(L70, Parallelism(tp=8, sp=True), "train", 4096)
    eager = describe(L70, Parallelism(tp=8, sp=True), "train", 4096, norm_rope="eager")
    f, e = shape(fused, "attn_norm"), shape(eager, "attn_norm")
    # residual add + norm over the Tsp x H activation: kinds swapped, bytes grow by the eager passes (18 - 2)
    assert [k for k, _, _ in f.parts] == ["residual_add_cold", "rmsnorm_cold"]
    assert [k for k, _, _ in e.parts] == ["residual_add_cold", "rmsnorm_eager"]
    el = 4096 // 8 * 8192
    assert e.bytes - f.bytes == (MEMOP_KINDS["rmsnorm_eager"][0] - MEMOP_KINDS["rmsnorm"][0]) * el * 2
    assert [k for k, _, _ in shape(eager, "rope").parts] == ["rope_complex", "rope_complex"]
    assert [k for k, _, _ in shape(eager, "final_norm.bwd").parts] == ["rmsnorm_eager.bwd"]


def test_unknown_norm_rope_is_refused():
    import pytest

    from c3kit.errors import WorkloadError

    with pytest.raises(WorkloadError, match="norm/RoPE"):
        describe(L70, Parallelism(tp=8), "train", 4096, norm_rope="triton")


def test_fp8_inference_reads_an_fp8_kv_cache_and_trains_attention_in_bf16():
    from c3kit.workload.ops import Attention

    par = Parallelism(tp=8, micro_batch=4)
    dec = build_step(L70, par, "decode", 2048, "fp8")
    trn = build_step(L70, Parallelism(tp=8, sp=True), "train", 4096, "fp8")
    assert {n.op.dtype for n in dec.nodes if isinstance(n.op, Attention)} == {"fp8"}
    assert {n.op.dtype for n in trn.nodes if isinstance(n.op, Attention)} == {"bf16"}
