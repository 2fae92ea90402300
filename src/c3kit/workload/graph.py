"""The operator graph of one training or inference step, compact: one layer's nodes with a repeat count.

Multiplicity rule: a node runs `count * (layers_per_stage if scope == "layer" else 1)` times per
step on each GPU (StepGraph.repeats). Layer nodes of fwd/bwd carry count = micro_batches; the DP
gradient all-reduce of a layer bucket carries count = 1 (once per step). Dependencies between two
layer nodes refer to the same layer instance; layer instance i + 1 starts (in fwd) after instance
i's last fwd node and (in bwd) after its last bwd compute node; a dependency from a layer node to a
step node (or back) means the first (or last) layer instance. See docs/workload.md for shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from c3kit.errors import WorkloadError
from c3kit.hw.model import dtype_bytes
from c3kit.workload.model import ModelConfig
from c3kit.workload.ops import Attention, Collective, Gemm, MemOp, Op
from c3kit.workload.parallel import Parallelism

PHASES = ("train", "prefill", "decode")
NODE_PHASES = ("fwd", "bwd", "opt")
SCOPES = ("layer", "step", "micro")
STREAMS = ("compute", "tp", "dp", "ep", "pp")
# Roles (Node.role). Recomputed forward nodes (recompute="full"/"selective") carry "re_" + role.
ROLES = ("embed", "norm", "qkv", "attn", "proj", "fc1", "act", "fc2", "router", "experts", "lm_head",
         "loss", "kv_cache", "optimizer", "tp_ar", "tp_rs", "tp_ag", "loss_ar", "ep_dispatch",
         "ep_combine", "dp_grad", "dp_param_ag", "fsdp_ag", "fsdp_rs", "pp_fwd", "pp_bwd")

ADAM_BYTES_PER_PARAM = 30  # read fp32 master, grad, m, v (16 B); write master, m, v (12 B) and bf16 weight (2 B)
ADAM_FLOPS_PER_PARAM = 12


@dataclass(frozen=True, slots=True)
class Node:
    """One op of the step graph. grad is "dgrad" / "wgrad" for backward GEMMs, else ""."""

    id: int
    op: Op
    deps: tuple[int, ...]
    phase: str  # "fwd" | "bwd" | "opt"
    scope: str  # "layer" (per layer) | "step" (once per step) | "micro" (once per micro-batch)
    stream: str  # "compute" | "tp" | "dp" | "ep" | "pp"
    count: int = 1
    role: str = ""
    grad: str = ""

    @property
    def name(self) -> str:
        """The op's name."""
        return self.op.name

    @property
    def is_comm(self) -> bool:
        """True for collectives."""
        return self.stream != "compute"


@dataclass(frozen=True)
class StepGraph:
    """One step on one GPU: the layer body (scope "layer") repeated layers_per_stage times plus step nodes."""

    model: ModelConfig
    par: Parallelism
    phase: str
    seq: int
    nodes: tuple[Node, ...]
    layers_per_stage: int
    micro_batches: int
    tokens_per_micro: int
    dtype: str = "bf16"
    gpus_per_node: int = 8

    def layer_nodes(self, phase: str | None = None) -> tuple[Node, ...]:
        """Nodes of one layer (optionally only phase "fwd" or "bwd")."""
        return tuple(n for n in self.nodes if n.scope == "layer" and (phase is None or n.phase == phase))

    def step_nodes(self) -> tuple[Node, ...]:
        """Nodes outside the layer body (scope "step" or "micro")."""
        return tuple(n for n in self.nodes if n.scope != "layer")

    def by_role(self, role: str) -> tuple[Node, ...]:
        """Nodes with this role."""
        return tuple(n for n in self.nodes if n.role == role)

    def node(self, node_id: int) -> Node:
        """The node with this id."""
        return self.nodes[node_id]

    def repeats(self, node: Node) -> int:
        """How many times the node runs per step on one GPU."""
        return node.count * (self.layers_per_stage if node.scope == "layer" else 1)

    def comm_nodes(self) -> tuple[Node, ...]:
        """The collectives."""
        return tuple(n for n in self.nodes if n.stream != "compute")

    def total_flops(self) -> float:
        """FLOPs per GPU per step (all repetitions)."""
        return sum(n.op.flops * self.repeats(n) for n in self.nodes)

    def total_comm_bytes(self, stream: str | None = None) -> float:
        """Collective bytes (nccl-tests S) per GPU per step, optionally for one stream."""
        return sum(n.op.bytes * self.repeats(n) for n in self.nodes
                   if n.stream != "compute" and (stream is None or n.stream == stream))


def span_of(block: int, gpus_per_node: int) -> str:
    """"intra" when a group of consecutive ranks of this size fits in (aligned) nodes, else "inter"."""
    if block <= gpus_per_node and gpus_per_node % block == 0:
        return "intra"
    return "inter"


def build_step(model: ModelConfig, par: Parallelism, phase: str = "train", seq: int | None = None,
               dtype: str = "bf16", gpus_per_node: int = 8, grad_dtype: str = "fp32") -> StepGraph:
    """The operator graph of one step (phase "train", "prefill" or "decode"; decode: KV cache of length seq)."""
    if seq is None:
        seq = model.max_seq
    return _build(model, par, phase, seq, dtype, gpus_per_node, grad_dtype)


class _Builder:
    __slots__ = ("nodes",)

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def add(self, op: Op, deps, phase: str, scope: str, stream: str, count: int, role: str, grad: str = "") -> int:
        """Append a node and return its id."""
        i = len(self.nodes)
        if None in deps:
            deps = tuple(d for d in deps if d is not None)
        self.nodes.append(Node(i, op, deps, phase, scope, stream, count, role, grad))
        return i


@lru_cache(maxsize=4096)
def _build(model: ModelConfig, par: Parallelism, phase: str, seq: int, dtype: str, gpn: int,
           grad_dtype: str) -> StepGraph:
    if phase not in PHASES:
        raise WorkloadError(f"unknown phase {phase!r}: use one of {', '.join(PHASES)}")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq <= 0:
        raise WorkloadError(f"sequence length must be a positive integer, got {seq!r}")
    if not isinstance(gpn, int) or gpn <= 0:
        raise WorkloadError(f"gpus_per_node must be a positive integer, got {gpn!r}")
    par.validate(model)
    m, p = model, par
    b = dtype_bytes(dtype)
    gb = dtype_bytes(grad_dtype)
    train = phase == "train"
    decode = phase == "decode"
    tp, dp, ep = p.tp, p.dp, p.ep
    mb = p.grad_accum  # micro-batches per step per DP rank
    T = p.micro_batch * (1 if decode else seq)
    Tsp = -(-T // tp) if p.sp else T
    H = m.hidden
    hd = m.head_dim
    qn = m.heads // tp
    kvn = max(1, m.kv_heads // tp)  # KV heads are replicated when tp > kv_heads
    n_qkv = (qn + 2 * kvn) * hd
    k_proj = qn * hd
    g = 2 if m.gated_mlp else 1
    sp = p.sp
    tp_span = span_of(tp, gpn)
    dp_span = span_of(tp * dp, gpn)
    ep_span = span_of(ep, gpn)
    act_bytes = T * H * b  # one T x H activation, the size every TP collective moves

    B = _Builder()
    add = B.add
    L = "layer"

    def tp_after(name: str, dep: int, ph: str, scope: str = L, cnt: int = mb) -> int | None:
        """TP reduction of a row-parallel output: all-reduce, or reduce-scatter with SP."""
        if tp == 1:
            return None
        if sp:
            return add(Collective(name + ".rs", "reduce_scatter", act_bytes, tp, "tp", tp_span),
                       (dep,), ph, scope, "tp", cnt, "tp_rs")
        return add(Collective(name + ".ar", "all_reduce", act_bytes, tp, "tp", tp_span), (dep,), ph, scope, "tp", cnt, "tp_ar")

    def tp_gather(name: str, dep: int | None, ph: str, scope: str = L, cnt: int = mb) -> int | None:
        """SP all-gather of a sequence-sharded activation before a column-parallel GEMM."""
        if tp == 1 or not sp:
            return None
        return add(Collective(name + ".ag", "all_gather", act_bytes, tp, "tp", tp_span), (dep,), ph, scope, "tp", cnt, "tp_ag")

    # Per-rank parameter counts of one layer (for FSDP / DP gradient traffic).
    attn_w = H * n_qkv + k_proj * H + 2 * H * (2 if m.norm == "layernorm" else 1)
    if m.is_moe:
        F = m.moe_ffn_hidden
        if ep == 1:
            expert_w = m.n_experts * (g + 1) * H * (F // tp)
        else:
            expert_w = (m.n_experts // ep) * (g + 1) * H * F
        dense_w = attn_w + H * m.n_experts
    else:
        F = m.ffn_hidden
        expert_w = 0
        dense_w = attn_w + (g + 1) * H * (F // tp)
    edp = (tp * dp) // ep if (m.is_moe and ep > 1) else dp  # ranks that share one expert's weights
    layer_w = dense_w + expert_w
    Fl = F // tp

    def layer_forward(ph: str, re: bool, fsdp_dep: int | None, entry: int | None) -> None:
        """One layer's forward ops (re: recomputed inside backward); entry: the step node the first layer waits for."""
        r = "re_" if re else ""
        pre = "re." if re else ""
        n1 = add(MemOp(pre + "attn_norm", 4 * Tsp * H * b, 5 * Tsp * H), (entry,), ph, L, "compute", mb, r + "norm")
        ag = tp_gather(pre + "attn_in", n1, ph)
        qkv = add(Gemm(pre + "qkv", T, n_qkv, H, dtype), (ag if ag is not None else n1, fsdp_dep), ph, L, "compute", mb, r + "qkv")
        last = qkv
        if not train:
            last = add(MemOp("kv_write", 2 * T * kvn * hd * b), (qkv,), ph, L, "compute", mb, "kv_cache")
        at = add(Attention(pre + "attn", p.micro_batch, qn, kvn, 1 if decode else seq, seq, hd, dtype, True),
                 (last,), ph, L, "compute", mb, r + "attn")
        pr = add(Gemm(pre + "proj", T, H, k_proj, dtype), (at,), ph, L, "compute", mb, r + "proj")
        c = tp_after(pre + "proj", pr, ph)
        n2 = add(MemOp(pre + "mlp_norm", 4 * Tsp * H * b, 5 * Tsp * H), (c if c is not None else pr,), ph, L,
                 "compute", mb, r + "norm")
        if not m.is_moe:
            ag = tp_gather(pre + "mlp_in", n2, ph)
            f1 = add(Gemm(pre + "fc1", T, g * Fl, H, dtype), (ag if ag is not None else n2,), ph, L, "compute", mb, r + "fc1")
            a = add(MemOp(pre + "act", (g + 1) * T * Fl * b, 8 * g * T * Fl), (f1,), ph, L, "compute", mb, r + "act")
            f2 = add(Gemm(pre + "fc2", T, H, Fl, dtype), (a,), ph, L, "compute", mb, r + "fc2")
            tp_after(pre + "fc2", f2, ph)
            return
        E, k = m.n_experts, m.top_k
        rt = add(Gemm(pre + "router", Tsp, E, H, dtype), (n2,), ph, L, "compute", mb, r + "router")
        if ep == 1:
            ag = tp_gather(pre + "mlp_in", n2, ph)
            me = -(-T * k // E)
            e1 = add(Gemm(pre + "expert_fc1", me, g * Fl, H, dtype, E), (rt, ag), ph, L, "compute", mb, r + "experts")
            a = add(MemOp(pre + "act", (g + 1) * me * E * Fl * b, 8 * g * me * E * Fl), (e1,), ph, L, "compute", mb, r + "act")
            e2 = add(Gemm(pre + "expert_fc2", me, H, Fl, dtype, E), (a,), ph, L, "compute", mb, r + "experts")
            tp_after(pre + "expert_fc2", e2, ph)
            return
        tl = -(-T // tp)  # each TP rank routes its own 1/tp of the tokens
        el = E // ep
        a2a = tl * k * H * b
        d = add(Collective(pre + "ep_dispatch", "all_to_all", a2a, ep, "ep", ep_span), (rt,), ph, L, "ep", mb, "ep_dispatch")
        me = -(-tl * k // el)
        e1 = add(Gemm(pre + "expert_fc1", me, g * F, H, dtype, el), (d,), ph, L, "compute", mb, r + "experts")
        a = add(MemOp(pre + "act", (g + 1) * me * el * F * b, 8 * g * me * el * F), (e1,), ph, L, "compute", mb, r + "act")
        e2 = add(Gemm(pre + "expert_fc2", me, H, F, dtype, el), (a,), ph, L, "compute", mb, r + "experts")
        cb = add(Collective(pre + "ep_combine", "all_to_all", a2a, ep, "ep", ep_span), (e2,), ph, L, "ep", mb, "ep_combine")
        if tp > 1 and not sp:
            add(Collective(pre + "moe_out.ag", "all_gather", act_bytes, tp, "tp", tp_span), (cb,), ph, L, "tp", mb, "tp_ag")

    def bwd_gemm(name: str, fwd_m: int, fwd_n: int, fwd_k: int, deps, role: str, batch: int = 1) -> tuple[int, int]:
        """dgrad (M x K from M x N and N x K) and wgrad (K x N over M tokens) of a forward GEMM."""
        dg = add(Gemm(name + ".dgrad", fwd_m, fwd_k, fwd_n, dtype, batch), deps, "bwd", L, "compute", mb, role, "dgrad")
        wg = add(Gemm(name + ".wgrad", fwd_k, fwd_n, fwd_m, dtype, batch), deps, "bwd", L, "compute", mb, role, "wgrad")
        return dg, wg

    fsdp_bytes = layer_w * b
    stage_layers = m.layers // p.pp

    # ---- once per micro-batch: embedding (first stage) ----
    emb_fsdp = None
    emb_w = -(-m.vocab // tp) * H  # vocab-parallel embedding shard
    if p.fsdp and dp > 1:
        emb_fsdp = add(Collective("embed.fsdp_ag", "all_gather", emb_w * b * (1 if m.tied_embeddings else 2), dp,
                                  "dp", dp_span), (), "fwd", "micro", "dp", mb, "fsdp_ag")
    emb = add(MemOp("embed", 2 * T * H * b), (emb_fsdp,), "fwd", "micro", "compute", mb, "embed")
    emb_c = tp_after("embed", emb, "fwd", "micro", mb)

    # ---- one layer, forward ----
    fsdp_f = None
    if p.fsdp and dp > 1:
        fsdp_f = add(Collective("layer.fsdp_ag", "all_gather", fsdp_bytes, dp, "dp", dp_span), (), "fwd", L, "dp", mb, "fsdp_ag")
    layer_forward("fwd", False, fsdp_f, emb_c if emb_c is not None else emb)
    last_fwd = len(B.nodes) - 1

    pp_bytes = (T // tp if sp else T) * H * b
    pp_span = span_of(tp * dp * p.pp, gpn)
    if p.pp > 1:
        add(Collective("pp.fwd", "send_recv", pp_bytes, 2, "pp", pp_span), (last_fwd,), "fwd", "micro", "pp",
            mb * p.vpp, "pp_fwd")

    # ---- head (last stage) ----
    T_out = T if train else p.micro_batch  # inference computes logits of the last position only
    Vl = -(-m.vocab // tp)
    fn = add(MemOp("final_norm", 2 * (Tsp if train else T_out) * H * b), (last_fwd,), "fwd", "micro", "compute", mb, "norm")
    hag = tp_gather("lm_head_in", fn, "fwd", "micro", mb) if train else None
    head = add(Gemm("lm_head", T_out, Vl, H, dtype), (hag if hag is not None else fn,), "fwd", "micro", "compute", mb, "lm_head")
    if not train:
        return StepGraph(m, p, phase, seq, tuple(B.nodes), stage_layers, mb, T, dtype, gpn)

    loss = add(MemOp("loss", 3 * T * Vl * 4, 5 * T * Vl), (head,), "fwd", "micro", "compute", mb, "loss")
    if tp > 1:
        add(Collective("loss.ar", "all_reduce", 2 * T * 4, tp, "tp", tp_span), (head,), "fwd", "micro", "tp", mb, "loss_ar")
    lb = add(MemOp("loss.bwd", 2 * T * Vl * b, 2 * T * Vl), (loss,), "bwd", "micro", "compute", mb, "loss")
    hd_dg = add(Gemm("lm_head.dgrad", T, H, Vl, dtype), (lb,), "bwd", "micro", "compute", mb, "lm_head", "dgrad")
    hd_wg = add(Gemm("lm_head.wgrad", H, Vl, T, dtype), (lb,), "bwd", "micro", "compute", mb, "lm_head", "wgrad")
    hc = tp_after("lm_head.dgrad", hd_dg, "bwd", "micro", mb)
    fnb = add(MemOp("final_norm.bwd", 4 * Tsp * H * b), (hc if hc is not None else hd_dg,), "bwd", "micro", "compute", mb, "norm")

    # ---- one layer, backward (reverse order) ----
    fsdp_b = None
    if p.fsdp and dp > 1:
        fsdp_b = add(Collective("layer.fsdp_ag.bwd", "all_gather", fsdp_bytes, dp, "dp", dp_span), (), "bwd", L, "dp", mb, "fsdp_ag")
    if p.recompute == "full":
        layer_forward("bwd", True, fsdp_b, fnb)
    wgrads: list[int] = []
    start = len(B.nodes) - 1 if p.recompute == "full" else fnb
    if m.is_moe and ep > 1:
        E, k = m.n_experts, m.top_k
        el = E // ep
        tl = -(-T // tp)
        me = -(-tl * k // el)
        a2a = tl * k * H * b
        cb = add(Collective("ep_combine.bwd", "all_to_all", a2a, ep, "ep", ep_span), (start, fsdp_b), "bwd", L, "ep", mb, "ep_combine")
        dg, wg = bwd_gemm("expert_fc2", me, H, F, (cb,), "experts", el)
        wgrads.append(wg)
        ab = add(MemOp("act.bwd", (2 * g + 1) * me * el * F * b, 8 * g * me * el * F), (dg,), "bwd", L, "compute", mb, "act")
        dg, wg = bwd_gemm("expert_fc1", me, g * F, H, (ab,), "experts", el)
        wgrads.append(wg)
        d = add(Collective("ep_dispatch.bwd", "all_to_all", a2a, ep, "ep", ep_span), (dg,), "bwd", L, "ep", mb, "ep_dispatch")
        dg, wg = bwd_gemm("router", Tsp, E, H, (d,), "router")
        wgrads.append(wg)
        mlp_end = dg
        if tp > 1 and not sp:
            mlp_end = add(Collective("moe_in.ag.bwd", "all_gather", act_bytes, tp, "tp", tp_span), (d,), "bwd", L, "tp", mb, "tp_ag")
    else:
        gag = tp_gather("mlp_out.bwd", start, "bwd")
        first_dep = (gag if gag is not None else start, fsdp_b)
        if m.is_moe:
            E, k = m.n_experts, m.top_k
            me = -(-T * k // E)
            dg, wg = bwd_gemm("expert_fc2", me, H, Fl, first_dep, "experts", E)
            wgrads.append(wg)
            ab = add(MemOp("act.bwd", (2 * g + 1) * me * E * Fl * b, 8 * g * me * E * Fl), (dg,), "bwd", L, "compute", mb, "act")
            iag = tp_gather("mlp_in.bwd", ab, "bwd")
            dg, wg = bwd_gemm("expert_fc1", me, g * Fl, H, (ab, iag), "experts", E)
            wgrads.append(wg)
            rdg, rwg = bwd_gemm("router", Tsp, E, H, (ab,), "router")
            wgrads.append(rwg)
        else:
            dg, wg = bwd_gemm("fc2", T, H, Fl, first_dep, "fc2")
            wgrads.append(wg)
            ab = add(MemOp("act.bwd", (2 * g + 1) * T * Fl * b, 8 * g * T * Fl), (dg,), "bwd", L, "compute", mb, "act")
            iag = tp_gather("mlp_in.bwd", ab, "bwd")
            dg, wg = bwd_gemm("fc1", T, g * Fl, H, (ab, iag), "fc1")
            wgrads.append(wg)
        c = tp_after("fc1.dgrad", dg, "bwd")
        mlp_end = c if c is not None else dg
    n2b = add(MemOp("mlp_norm.bwd", 8 * Tsp * H * b, 8 * Tsp * H), (mlp_end,), "bwd", L, "compute", mb, "norm")
    gag = tp_gather("attn_out.bwd", n2b, "bwd")
    dg, wg = bwd_gemm("proj", T, H, k_proj, (gag if gag is not None else n2b,), "proj")
    wgrads.append(wg)
    att_dep = dg
    if p.recompute == "selective":
        att_dep = add(Attention("re.attn", p.micro_batch, qn, kvn, seq, seq, hd, dtype, True), (dg,), "bwd", L,
                      "compute", mb, "re_attn")
    ab = add(Attention("attn.bwd", p.micro_batch, qn, kvn, seq, seq, hd, dtype, True, True), (att_dep,), "bwd", L,
             "compute", mb, "attn")
    iag = tp_gather("attn_in.bwd", ab, "bwd")
    dg, wg = bwd_gemm("qkv", T, n_qkv, H, (ab, iag), "qkv")
    wgrads.append(wg)
    c = tp_after("qkv.dgrad", dg, "bwd")
    n1b = add(MemOp("attn_norm.bwd", 8 * Tsp * H * b, 8 * Tsp * H), (c if c is not None else dg,), "bwd", L, "compute", mb, "norm")

    # gradient reduction of this layer's bucket
    wg_t = tuple(wgrads)
    if p.fsdp:
        if dp > 1:
            add(Collective("layer.fsdp_rs", "reduce_scatter", layer_w * gb, dp, "dp", dp_span), wg_t, "bwd", L, "dp", mb, "fsdp_rs")
    else:
        kind = "reduce_scatter" if p.dist_optimizer else "all_reduce"
        if dp > 1:
            w = dense_w if (m.is_moe and ep > 1) else layer_w
            add(Collective("layer.dp_grad", kind, w * gb, dp, "dp", dp_span), wg_t, "bwd", L, "dp", 1, "dp_grad")
        if m.is_moe and ep > 1 and edp > 1:
            add(Collective("layer.dp_grad_experts", kind, expert_w * gb, edp, "dp", span_of(tp * dp, gpn)), wg_t,
                "bwd", L, "dp", 1, "dp_grad")

    if p.pp > 1:
        add(Collective("pp.bwd", "send_recv", pp_bytes, 2, "pp", pp_span), (n1b,), "bwd", "micro", "pp", mb * p.vpp, "pp_bwd")

    # ---- embedding backward, step-level gradient reduction and optimizer ----
    egag = tp_gather("embed.bwd", n1b, "bwd", "micro", mb)
    eb = add(MemOp("embed.bwd", 2 * T * H * b + emb_w * 4), (egag if egag is not None else n1b,), "bwd", "micro",
             "compute", mb, "embed")
    emb_params = emb_w * (1 if m.tied_embeddings else 2)
    reduce_deps = (eb, hd_wg)
    if dp > 1:
        if p.fsdp:
            add(Collective("embed.fsdp_rs", "reduce_scatter", emb_params * gb, dp, "dp", dp_span), reduce_deps,
                      "bwd", "micro", "dp", mb, "fsdp_rs")
        else:
            kind = "reduce_scatter" if p.dist_optimizer else "all_reduce"
            add(Collective("embed.dp_grad", kind, emb_params * gb, dp, "dp", dp_span), reduce_deps,
                      "bwd", "step", "dp", 1, "dp_grad")
    shard = dp if (p.fsdp or p.dist_optimizer) else 1
    if m.is_moe and ep > 1:
        opt_params = (stage_layers * (dense_w / shard + expert_w / (edp if shard > 1 else 1)) + emb_params / shard)
    else:
        opt_params = (stage_layers * layer_w + emb_params) / shard
    opt_deps = tuple(n.id for n in B.nodes if n.role in ("dp_grad", "fsdp_rs")) or (eb,)
    opt = add(MemOp("optimizer", ADAM_BYTES_PER_PARAM * opt_params, ADAM_FLOPS_PER_PARAM * opt_params), opt_deps,
              "opt", "step", "compute", 1, "optimizer")
    if p.dist_optimizer and dp > 1 and not p.fsdp:
        add(Collective("dp_param_ag", "all_gather", (stage_layers * layer_w + emb_params) * b, dp, "dp", dp_span),
            (opt,), "opt", "step", "dp", 1, "dp_param_ag")
    return StepGraph(m, p, phase, seq, tuple(B.nodes), stage_layers, mb, T, dtype, gpn)
