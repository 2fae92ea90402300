"""Step graph: hand-checked shapes, FLOPs and collective bytes (docs/workload.md worked example)."""

import pytest

from c3kit.errors import WorkloadError
from c3kit.workload.graph import NODE_PHASES, ROLES, SCOPES, STREAMS, build_step, span_of
from c3kit.workload.model import ModelConfig, get_model
from c3kit.workload.ops import Attention, Collective, Gemm
from c3kit.workload.parallel import Parallelism

L70 = get_model("Llama-3-70B")


def one(g, name):
    (n,) = [n for n in g.nodes if n.name == name]
    return n


def test_llama70b_tp8_worked_example():
    g = build_step(L70, Parallelism(tp=8), "train", seq=8192)
    assert (g.layers_per_stage, g.micro_batches, g.tokens_per_micro) == (80, 1, 8192)
    shapes = {n.name: (n.op.m, n.op.n, n.op.k) for n in g.layer_nodes() if isinstance(n.op, Gemm)}
    assert shapes["qkv"] == (8192, 1280, 8192)  # (64/8 + 2 * 8/8) * 128
    assert shapes["proj"] == (8192, 8192, 1024)
    assert shapes["fc1"] == (8192, 7168, 8192)  # SwiGLU: 2 * 28672 / 8
    assert shapes["fc2"] == (8192, 8192, 3584)
    assert shapes["fc1.dgrad"] == (8192, 8192, 7168)
    assert shapes["fc1.wgrad"] == (8192, 7168, 8192)
    assert shapes["proj.dgrad"] == (8192, 1024, 8192)
    assert shapes["proj.wgrad"] == (1024, 8192, 8192)
    att = one(g, "attn").op
    assert (att.batch, att.heads, att.kv_heads, att.q_len, att.kv_len, att.head_dim) == (1, 8, 1, 8192, 8192, 128)
    assert att.flops == 4 * 8 * 8192 * 8192 * 128 / 2 == 137_438_953_472
    fwd_gemm = sum(n.op.flops for n in g.layer_nodes("fwd") if isinstance(n.op, Gemm))
    assert fwd_gemm == 2 * 8192 * 8192 * (1280 + 1024 + 7168 + 3584) == 1_752_346_656_768
    bwd_gemm = sum(n.op.flops for n in g.layer_nodes("bwd") if isinstance(n.op, Gemm))
    assert bwd_gemm == 2 * fwd_gemm
    tp = [n for n in g.layer_nodes() if n.stream == "tp"]
    assert [n.name for n in tp] == ["proj.ar", "fc2.ar", "fc1.dgrad.ar", "qkv.dgrad.ar"]
    for n in tp:
        assert (n.op.kind, n.op.bytes, n.op.ranks, n.op.group, n.op.span) == \
            ("all_reduce", 8192 * 8192 * 2, 8, "tp", "intra")
    assert not [n for n in g.nodes if n.stream in ("dp", "pp", "ep")]
    head = one(g, "lm_head").op
    assert (head.m, head.n, head.k) == (8192, 128256 // 8, 8192)
    (opt,) = g.by_role("optimizer")
    assert opt.scope == "step" and opt.phase == "opt"
    # per rank: 80 layers x (8192 * 1280 + 1024 * 8192 + 2 * 8192 + 3 * 8192 * 3584) + 2 * 16032 * 8192 (embed, head)
    assert opt.op.bytes == 30 * (80 * 106_971_136 + 2 * 16032 * 8192) == 264_610_775_040


def test_gpt_forward_flops_24TH2_over_tp():
    m = ModelConfig(name="gpt", hidden=4096, layers=4, heads=32, vocab=51200)
    for tp in (1, 2, 4, 8):
        g = build_step(m, Parallelism(tp=tp), "train", seq=2048)
        T, H = 2048, 4096
        gemm = sum(n.op.flops for n in g.layer_nodes("fwd") if isinstance(n.op, Gemm))
        assert gemm == 24 * T * H * H / tp
        att = sum(n.op.flops for n in g.layer_nodes("fwd") if isinstance(n.op, Attention))
        assert att == 4 * T * 2048 * H / tp / 2  # causal: half of 4 T S H / tp


def test_sequence_parallel_collectives():
    g = build_step(L70, Parallelism(tp=8, sp=True), "train", seq=4096)
    fwd = [(n.name, n.op.kind) for n in g.layer_nodes("fwd") if n.stream == "tp"]
    assert fwd == [("attn_in.ag", "all_gather"), ("proj.rs", "reduce_scatter"),
                   ("mlp_in.ag", "all_gather"), ("fc2.rs", "reduce_scatter")]
    bwd = [(n.name, n.op.kind) for n in g.layer_nodes("bwd") if n.stream == "tp"]
    assert bwd == [("mlp_out.bwd.ag", "all_gather"), ("mlp_in.bwd.ag", "all_gather"),
                   ("fc1.dgrad.rs", "reduce_scatter"), ("attn_out.bwd.ag", "all_gather"),
                   ("attn_in.bwd.ag", "all_gather"), ("qkv.dgrad.rs", "reduce_scatter")]
    assert all(n.op.bytes == 4096 * 8192 * 2 for n in g.comm_nodes() if n.role in ("tp_ag", "tp_rs"))
    norm = one(g, "attn_norm").op
    assert norm.bytes == 4 * (4096 // 8) * 8192 * 2  # norms run on the 1/tp sequence shard


def test_dp_gradients_and_spans():
    g = build_step(L70, Parallelism(tp=8, dp=4, micro_batch=1, global_batch=16), "train", seq=4096)
    assert g.micro_batches == 4
    (dpg,) = [n for n in g.layer_nodes() if n.role == "dp_grad"]
    assert dpg.count == 1 and g.repeats(dpg) == 80  # once per step per layer bucket
    assert dpg.op.kind == "all_reduce" and dpg.op.ranks == 4 and dpg.op.span == "inter"
    assert dpg.op.bytes == (855_654_400 - 2 * 8192) // 8 * 4 + 2 * 8192 * 4  # fp32 grads of the TP shard
    # the reduction waits for the wgrads and for their accumulation into .grad (4 micro-batches, eager default)
    assert set(dpg.deps) == {n.id for n in g.layer_nodes("bwd") if n.grad == "wgrad" or n.name == "layer.grad_acc"}
    fwd = [n for n in g.layer_nodes("fwd") if n.role == "fc1"]
    assert fwd[0].count == 4 and g.repeats(fwd[0]) == 320
    assert one(g, "proj.ar").op.span == "intra"
    g2 = build_step(L70, Parallelism(tp=2, dp=4), "train", seq=4096)
    assert one(g2, "layer.dp_grad").op.span == "intra"  # tp * dp = 8 fits one node


def test_fsdp_and_distributed_optimizer():
    g = build_step(L70, Parallelism(tp=8, dp=2, fsdp=True), "train", seq=2048)
    roles = [n.role for n in g.layer_nodes() if n.stream == "dp"]
    assert roles == ["fsdp_ag", "fsdp_ag", "fsdp_rs"]
    ag = g.layer_nodes()[0]
    assert ag.op.kind == "all_gather" and ag.op.bytes == (855_654_400 - 2 * 8192) // 8 * 2 + 2 * 8192 * 2
    assert one(g, "qkv").deps[-1] == ag.id
    full = build_step(L70, Parallelism(tp=8, dp=2), "train", seq=2048)
    assert one(g, "optimizer").op.bytes == pytest.approx(one(full, "optimizer").op.bytes / 2)
    d = build_step(L70, Parallelism(tp=8, dp=2, dist_optimizer=True), "train", seq=2048)
    assert one(d, "layer.dp_grad").op.kind == "reduce_scatter"
    assert d.by_role("dp_param_ag")[0].op.kind == "all_gather"


def test_pipeline_send_recv():
    g = build_step(L70, Parallelism(tp=8, pp=4, micro_batch=1, global_batch=8), "train", seq=4096)
    assert g.layers_per_stage == 20 and g.micro_batches == 8
    f, b = g.by_role("pp_fwd")[0], g.by_role("pp_bwd")[0]
    assert f.op.kind == "send_recv" and f.op.bytes == 4096 * 8192 * 2 and f.count == 8 and f.scope == "micro"
    assert f.op.span == "inter" and b.phase == "bwd"
    gv = build_step(L70, Parallelism(tp=8, pp=4, vpp=2, micro_batch=1, global_batch=8), "train", seq=4096)
    assert gv.by_role("pp_fwd")[0].count == 16
    gs = build_step(L70, Parallelism(tp=8, sp=True, pp=4, global_batch=8), "train", seq=4096)
    assert gs.by_role("pp_fwd")[0].op.bytes == 4096 // 8 * 8192 * 2


def test_moe_expert_parallel():
    mx = get_model("Mixtral-8x7B")
    g = build_step(mx, Parallelism(tp=1, dp=8, ep=8), "train", seq=4096)
    d = one(g, "ep_dispatch").op
    assert (d.kind, d.ranks, d.group, d.bytes) == ("all_to_all", 8, "ep", 4096 * 2 * 4096 * 2)
    e1 = one(g, "expert_fc1").op
    assert (e1.m, e1.n, e1.k, e1.batch) == (4096 * 2, 2 * 14336, 4096, 1)
    (r,) = [n for n in g.layer_nodes("fwd") if n.role == "router" and n.op.name == "router"]
    assert (r.op.m, r.op.n, r.op.k) == (4096, 8, 4096)
    dpg = [n for n in g.layer_nodes() if n.role == "dp_grad"]
    assert [n.op.ranks for n in dpg] == [8]  # experts are not replicated: only dense grads reduced
    g1 = build_step(mx, Parallelism(tp=8), "train", seq=4096)
    e = one(g1, "expert_fc1").op
    assert (e.m, e.n, e.k, e.batch) == (4096 * 2 // 8, 2 * 14336 // 8, 4096, 8)
    assert not [n for n in g1.nodes if n.stream == "ep"]
    assert g1.by_role("experts")


def test_inference_phases():
    p = Parallelism(tp=8, micro_batch=4)
    pre = build_step(L70, p, "prefill", seq=2048)
    assert {n.phase for n in pre.nodes} == {"fwd"}
    assert one(pre, "qkv").op.m == 4 * 2048
    assert one(pre, "lm_head").op.m == 4  # last position only
    dec = build_step(L70, p, "decode", seq=2048)
    assert dec.tokens_per_micro == 4
    assert one(dec, "qkv").op.m == 4
    a = one(dec, "attn").op
    assert (a.q_len, a.kv_len, a.batch) == (1, 2048, 4)
    assert one(dec, "proj.ar").op.bytes == 4 * 8192 * 2
    assert dec.by_role("kv_cache")


def test_recompute_nodes():
    none = build_step(L70, Parallelism(tp=8), "train", seq=2048)
    sel = build_step(L70, Parallelism(tp=8, recompute="selective"), "train", seq=2048)
    full = build_step(L70, Parallelism(tp=8, recompute="full"), "train", seq=2048)
    assert [n.role for n in sel.nodes if n.role.startswith("re_")] == ["re_attn"]
    re_full = [n.role for n in full.nodes if n.role.startswith("re_")]
    assert "re_qkv" in re_full and "re_fc2" in re_full and "re_tp_ar" not in re_full
    assert sum(1 for n in full.layer_nodes("bwd") if n.stream == "tp") == 4  # 2 recomputed + 2 backward
    assert none.total_flops() < sel.total_flops() < full.total_flops()


def test_graph_wellformed_everywhere():
    cases = [(L70, Parallelism(tp=8, sp=True, dp=2, fsdp=True, pp=2, global_batch=4, recompute="full")),
             (get_model("Mixtral-8x7B"), Parallelism(tp=4, sp=True, dp=2, ep=4, recompute="selective")),
             (get_model("PaLM-540B"), Parallelism(tp=16, pp=2, dp=2, dist_optimizer=True, global_batch=8))]
    for m, p in cases:
        for phase in ("train", "prefill", "decode"):
            g = build_step(m, p, phase, seq=1024)
            for i, n in enumerate(g.nodes):
                assert n.id == i
                assert all(0 <= d < i for d in n.deps)
                assert n.phase in NODE_PHASES and n.scope in SCOPES and n.stream in STREAMS
                assert n.role in ROLES or n.role.removeprefix("re_") in ROLES
                assert (n.stream == "compute") != isinstance(n.op, Collective)
                if isinstance(n.op, Collective):
                    assert n.op.group == n.stream


def test_span():
    assert span_of(8, 8) == "intra" and span_of(16, 8) == "inter" and span_of(3, 8) == "inter"


def test_bad_phase_seq():
    with pytest.raises(WorkloadError, match="phase"):
        build_step(L70, Parallelism(tp=8), "inference")
    with pytest.raises(WorkloadError, match="sequence length"):
        build_step(L70, Parallelism(tp=8), "train", seq=0)
    with pytest.raises(WorkloadError, match="cannot fill pp 81"):
        build_step(L70, Parallelism(pp=81))


@pytest.mark.parametrize("rc,passes", [("none", 72), ("selective", 72), ("full", 96)])
def test_narayanan_gemm_flops_per_step(rc, passes):
    # Narayanan et al. 2021 (Megatron-LM at scale), Sec. 5.1: GEMM FLOPs per iteration
    # 72 B s l h^2 (1 + V / (12 l h)) without recomputation, 96 B s l h^2 (1 + V / (16 l h)) with it
    m = get_model("GPT-175B")
    B, s, l, h, V = 8, 2048, 96, 12288, 51200
    g = build_step(m, Parallelism(micro_batch=1, global_batch=B, recompute=rc), "train", seq=s)
    gemm = sum(n.op.flops * g.repeats(n) for n in g.nodes if isinstance(n.op, Gemm))
    lm_head_share = V / (12 * l * h) if passes == 72 else V / (16 * l * h)
    assert gemm == pytest.approx(passes * B * s * l * h * h * (1 + lm_head_share), rel=1e-12)
