"""One description of a Transformer layer: every op of one GPU's step with its shapes, from model,
parallelism, phase and tokens.

This module is the only place where c3kit derives the shapes of a layer. `describe` lists every op
of one step on one GPU (one layer's body plus the embedding, head, loss, gradient reductions and
optimizer): GEMMs with M, N, K, attention, memory-bound ops, collectives with their bytes, group,
ranks and the contiguous rank block that decides their span, and the dependencies between ops by
name. The step graph (workload.graph) turns the list into Nodes; the vectorized sweep (step.fast)
evaluates the same formulas over numpy arrays of many scenarios; the overlap scenarios, the
studies and the runtime benchmarks read the GEMM and collective shapes from it.

Two inputs: `Dims` (sizes: Python ints for one scenario, or int numpy arrays of one length for many;
every formula here is written with operators that work on both) and `Structure` (which ops exist:
Python bools and strings, the same for every scenario of one evaluation). No formula here compares
a size: the branches read Structure only, so one evaluation over arrays gives every scenario's
shapes at once. See docs/workload.md for the table of shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from c3kit.errors import WorkloadError
from c3kit.hw.model import dtype_bytes
from c3kit.workload.config import ModelConfig
from c3kit.workload.parallel import Parallelism

PHASES = ("train", "prefill", "decode")
ADAM_BYTES_PER_PARAM = 30  # read fp32 master, grad, m, v (16 B); write master, m, v (12 B) and bf16 weight (2 B)
ADAM_FLOPS_PER_PARAM = 12

Num = Any  # a Python int/float or a numpy array of them


def cdiv(a: Num, b: Num) -> Num:
    """Ceiling division for ints and int arrays."""
    return -(-a // b)


def at_least_one(a: Num) -> Num:
    """max(1, a) for ints and int arrays."""
    return max(1, a) if isinstance(a, int) else np.maximum(1, a)


def intra(block: Num, gpus_per_node: Num) -> Num:
    """True where a block of consecutive ranks of this size fits in (aligned) nodes."""
    return (block <= gpus_per_node) & (gpus_per_node % block == 0)


# ---- op specs: the shapes of one op; fields are ints or arrays ----

@dataclass(frozen=True)
class GemmShape:
    """C[m, n] = A[m, k] @ B[k, n], `batch` independent products."""

    m: Num
    n: Num
    k: Num
    batch: Num = 1


@dataclass(frozen=True)
class AttnShape:
    """Fused attention core of `batch` sequences: heads / kv_heads on this GPU, q_len x kv_len."""

    batch: Num
    heads: Num
    kv_heads: Num
    q_len: Num
    kv_len: Num
    head_dim: Num
    causal: bool = True
    backward: bool = False


@dataclass(frozen=True)
class MemShape:
    """A memory-bound op: bytes moved and FLOPs."""

    bytes: Num
    flops: Num = 0


@dataclass(frozen=True)
class CollShape:
    """A collective: kind, nccl-tests bytes S per rank, ranks, group, and the block of consecutive ranks it spans."""

    kind: str
    bytes: Num
    ranks: Num
    group: str
    block: Num


@dataclass(frozen=True)
class OpSpec:
    """One op of the step: name, role, where it runs, how often (count), its deps (op names) and shape."""

    name: str
    role: str
    phase: str  # "fwd" | "bwd" | "opt"
    scope: str  # "layer" | "micro" | "step"
    stream: str  # "compute" | "tp" | "dp" | "ep" | "pp"
    count: Num
    deps: tuple[str, ...]
    shape: GemmShape | AttnShape | MemShape | CollShape
    grad: str = ""

    @property
    def kind(self) -> str:
        """"gemm", "attn", "mem" or "coll"."""
        return _KIND[type(self.shape)]


_KIND = {GemmShape: "gemm", AttnShape: "attn", MemShape: "mem", CollShape: "coll"}


@dataclass(frozen=True)
class Dims:
    """Sizes of one scenario (Python ints) or many (int numpy arrays of one length).

    g = 2 for a gated MLP else 1; norm_w = 2 for LayerNorm (scale and shift) else 1; emb_mult = 1 with
    tied embeddings else 2; b / gb = bytes per activation-or-weight / gradient element; gpn = GPUs per node.
    For dense models n_experts = top_k = 1 and moe_ffn = ffn.
    """

    hidden: Num
    heads: Num
    kv_heads: Num
    head_dim: Num
    ffn: Num
    vocab: Num
    layers: Num
    g: Num
    norm_w: Num
    emb_mult: Num
    seq: Num
    micro_batch: Num
    tp: Num
    dp: Num
    pp: Num
    grad_accum: Num
    gpn: Num
    b: Num = 2
    gb: Num = 4
    vpp: Num = 1
    ep: Num = 1
    n_experts: Num = 1
    top_k: Num = 1
    moe_ffn: Num = 0

    @staticmethod
    def of(model: ModelConfig, par: Parallelism, seq: int, dtype: str = "bf16", gpus_per_node: int = 8,
           grad_dtype: str = "fp32") -> "Dims":
        """The sizes of one model x layout (ints)."""
        m = model
        return Dims(hidden=m.hidden, heads=m.heads, kv_heads=m.kv_heads, head_dim=m.head_dim, ffn=m.ffn_hidden,
                    vocab=m.vocab, layers=m.layers, g=2 if m.gated_mlp else 1,
                    norm_w=2 if m.norm == "layernorm" else 1, emb_mult=1 if m.tied_embeddings else 2, seq=seq,
                    micro_batch=par.micro_batch, tp=par.tp, dp=par.dp, pp=par.pp, grad_accum=par.grad_accum,
                    gpn=gpus_per_node, b=dtype_bytes(dtype), gb=dtype_bytes(grad_dtype), vpp=par.vpp, ep=par.ep,
                    n_experts=m.n_experts, top_k=m.top_k, moe_ffn=m.moe_ffn_hidden)


@dataclass(frozen=True)
class Structure:
    """Which ops exist (the same for every scenario of one evaluation): phase and the layout's switches.

    tp/dp/pp/ep/edp say whether that group has more than one rank; zero1 = distributed optimizer.
    """

    phase: str = "train"
    tp: bool = False
    sp: bool = False
    dp: bool = False
    pp: bool = False
    fsdp: bool = False
    zero1: bool = False
    recompute: str = "none"
    moe: bool = False
    ep: bool = False
    edp: bool = False

    @staticmethod
    def of(model: ModelConfig, par: Parallelism, phase: str = "train") -> "Structure":
        """The structure of one model x layout x phase."""
        moe_ep = model.is_moe and par.ep > 1
        return Structure(phase=phase, tp=par.tp > 1, sp=par.sp and par.tp > 1, dp=par.dp > 1, pp=par.pp > 1,
                         fsdp=par.fsdp, zero1=par.dist_optimizer, recompute=par.recompute, moe=model.is_moe,
                         ep=moe_ep, edp=moe_ep and (par.tp * par.dp) // par.ep > 1)


@dataclass(frozen=True)
class Weights:
    """Per-rank parameter counts of one layer and of the embeddings (for FSDP, DP gradients, optimizer)."""

    attn: Num
    dense: Num  # non-expert weights of a layer (attention, norms, router; the MLP of a dense model)
    experts: Num  # expert weights of a layer on this rank (0 for dense models)
    layer: Num
    emb: Num  # one vocab-parallel embedding shard
    emb_params: Num  # input and (untied) output embedding shards
    edp: Num  # ranks that share one expert's weights


@dataclass(frozen=True)
class Layer:
    """The description of one step on one GPU: every op in issue order, with sizes and per-rank weights."""

    dims: Dims
    structure: Structure
    ops: tuple[OpSpec, ...]
    weights: Weights
    tokens: Num  # T: tokens per micro-batch on this TP group (micro_batch x seq; decode: micro_batch)
    stage_layers: Num

    def op(self, name: str) -> OpSpec:
        """The op with this name."""
        for o in self.ops:
            if o.name == name:
                return o
        raise WorkloadError(f"this layer has no op named {name!r}")

    def by_name(self) -> dict[str, OpSpec]:
        """Name -> op."""
        return {o.name: o for o in self.ops}

    def gemms(self) -> tuple[OpSpec, ...]:
        """The GEMM ops."""
        return tuple(o for o in self.ops if o.kind == "gemm")

    def collectives(self) -> tuple[OpSpec, ...]:
        """The collective ops."""
        return tuple(o for o in self.ops if o.kind == "coll")


def weights(d: Dims, s: Structure) -> Weights:
    """Per-rank parameter counts of one layer and the embeddings."""
    H, tp = d.hidden, d.tp
    qn, kvn = d.heads // tp, at_least_one(d.kv_heads // tp)
    n_qkv, k_proj = (qn + 2 * kvn) * d.head_dim, qn * d.head_dim
    attn_w = H * n_qkv + k_proj * H + 2 * H * d.norm_w
    if s.moe:
        F = d.moe_ffn
        expert_w = (d.n_experts // d.ep) * (d.g + 1) * H * F if s.ep else d.n_experts * (d.g + 1) * H * (F // tp)
        dense_w = attn_w + H * d.n_experts
    else:
        expert_w = 0
        dense_w = attn_w + (d.g + 1) * H * (d.ffn // tp)
    edp = (tp * d.dp) // d.ep if s.ep else d.dp
    emb_w = cdiv(d.vocab, tp) * H
    return Weights(attn_w, dense_w, expert_w, dense_w + expert_w, emb_w, emb_w * d.emb_mult, edp)


def gemm_flops(m: Num, n: Num, k: Num, batch: Num = 1) -> Num:
    """FLOPs of a (batched) GEMM: 2 per multiply-add."""
    return 2.0 * m * n * k * batch


def gemm_bytes(m: Num, n: Num, k: Num, elem_bytes: Num, batch: Num = 1) -> Num:
    """Fewest bytes a (batched) GEMM moves: each input read once, the output written once."""
    e = m * k + k * n + m * n
    return (float(e) if isinstance(e, int) else np.asarray(e, dtype=float)) * elem_bytes * batch


def attention_flops(a: AttnShape) -> Num:
    """FLOPs of QK^T and PV (x0.5 when causal and q_len == kv_len; backward is 2.5x forward)."""
    f = 4.0 * a.batch * a.heads * a.q_len * a.kv_len * a.head_dim
    if a.causal:
        same = a.q_len == a.kv_len
        f = f * (0.5 if same else 1.0) if isinstance(same, bool) else f * np.where(same, 0.5, 1.0)
    return f * (2.5 if a.backward else 1.0)


def attention_bytes(a: AttnShape, elem_bytes: Num) -> Num:
    """Bytes of Q, K, V and O (read and written once, flash-attention style)."""
    q_o = 2 * a.batch * a.heads * a.q_len * a.head_dim
    kv = 2 * a.batch * a.kv_heads * a.kv_len * a.head_dim
    e = q_o + kv
    return (float(e) if isinstance(e, int) else np.asarray(e, dtype=float)) * elem_bytes * (2.0 if a.backward else 1.0)


def flops_bytes(op: OpSpec, elem_bytes: Num) -> tuple[Num, Num]:
    """(FLOPs, bytes) of a compute op (GEMM, attention or memory-bound), ints or arrays."""
    sh = op.shape
    if isinstance(sh, GemmShape):
        return gemm_flops(sh.m, sh.n, sh.k, sh.batch), gemm_bytes(sh.m, sh.n, sh.k, elem_bytes, sh.batch)
    if isinstance(sh, AttnShape):
        return attention_flops(sh), attention_bytes(sh, elem_bytes)
    if isinstance(sh, MemShape):
        return sh.flops, sh.bytes
    raise WorkloadError(f"{op.name} is a collective: it has bytes, not FLOPs")


def describe(model: ModelConfig, par: Parallelism, phase: str = "train", seq: int | None = None,
             dtype: str = "bf16", gpus_per_node: int = 8, grad_dtype: str = "fp32") -> Layer:
    """Every op of one step on one GPU (phase "train", "prefill" or "decode"; decode: KV cache of length seq)."""
    if phase not in PHASES:
        raise WorkloadError(f"unknown phase {phase!r}: use one of {', '.join(PHASES)}")
    seq = model.max_seq if seq is None else seq
    if not isinstance(seq, int) or isinstance(seq, bool) or seq <= 0:
        raise WorkloadError(f"sequence length must be a positive integer, got {seq!r}")
    if not isinstance(gpus_per_node, int) or gpus_per_node <= 0:
        raise WorkloadError(f"gpus_per_node must be a positive integer, got {gpus_per_node!r}")
    par.validate(model)
    return evaluate(Dims.of(model, par, seq, dtype, gpus_per_node, grad_dtype), Structure.of(model, par, phase))


def describe_tokens(model: ModelConfig, par: Parallelism, tokens: int, phase: str = "train",
                    dtype: str = "bf16") -> Layer:
    """The layer at `tokens` tokens per micro-batch on the TP group (one sequence of that length)."""
    return describe(model, replace(par, micro_batch=1, global_batch=0) if par.micro_batch != 1 else par,
                    phase, tokens, dtype)


class _Ops:
    """The op list under construction; deps are op names (None entries dropped)."""

    __slots__ = ("ops", "names")

    def __init__(self) -> None:
        self.ops: list[OpSpec] = []
        self.names: set[str] = set()

    def add(self, name: str, shape, deps, phase: str, scope: str, stream: str, count, role: str,
            grad: str = "") -> str:
        if name in self.names:
            raise AssertionError(f"duplicate op name {name}")  # a bug in this module, not bad input
        self.names.add(name)
        self.ops.append(OpSpec(name, role, phase, scope, stream, count, tuple(x for x in deps if x is not None),
                               shape, grad))
        return name


def evaluate(d: Dims, s: Structure) -> Layer:
    """The description over Dims (ints or arrays) for one Structure."""
    train, decode = s.phase == "train", s.phase == "decode"
    tp, dp, ep = d.tp, d.dp, d.ep
    mb = d.grad_accum  # micro-batches per step per DP rank
    T = d.micro_batch * (1 if decode else d.seq)
    Tsp = cdiv(T, tp) if s.sp else T
    H, hd, b, gb, g = d.hidden, d.head_dim, d.b, d.gb, d.g
    qn = d.heads // tp
    kvn = at_least_one(d.kv_heads // tp)  # KV heads are replicated when tp > kv_heads
    n_qkv = (qn + 2 * kvn) * hd
    k_proj = qn * hd
    tp_blk, dp_blk, ep_blk, pp_blk = tp, tp * dp, ep, tp * dp * d.pp
    act_bytes = T * H * b  # one T x H activation, the size every TP collective moves
    w = weights(d, s)
    F = d.moe_ffn if s.moe else d.ffn
    Fl = F // tp
    L = "layer"
    o = _Ops()
    add = o.add

    def tp_after(name: str, dep: str, ph: str, scope: str = L, cnt=mb) -> str | None:
        """TP reduction of a row-parallel output: all-reduce, or reduce-scatter with SP."""
        if not s.tp:
            return None
        if s.sp:
            return add(name + ".rs", CollShape("reduce_scatter", act_bytes, tp, "tp", tp_blk), (dep,), ph, scope,
                       "tp", cnt, "tp_rs")
        return add(name + ".ar", CollShape("all_reduce", act_bytes, tp, "tp", tp_blk), (dep,), ph, scope, "tp", cnt,
                   "tp_ar")

    def tp_gather(name: str, dep: str | None, ph: str, scope: str = L, cnt=mb) -> str | None:
        """SP all-gather of a sequence-sharded activation before a column-parallel GEMM."""
        if not (s.tp and s.sp):
            return None
        return add(name + ".ag", CollShape("all_gather", act_bytes, tp, "tp", tp_blk), (dep,), ph, scope, "tp", cnt,
                   "tp_ag")

    def norm(name: str, dep, ph: str, role: str) -> str:
        return add(name, MemShape(4 * Tsp * H * b, 5 * Tsp * H), (dep,), ph, L, "compute", mb, role)

    def moe_ep_sizes():
        tl = cdiv(T, tp)  # each TP rank routes its own 1/tp of the tokens
        el = d.n_experts // ep
        return el, cdiv(tl * d.top_k, el), tl * d.top_k * H * b

    def layer_forward(ph: str, re: bool, fsdp_dep: str | None, entry: str | None) -> None:
        """One layer's forward ops (re: recomputed inside backward); entry: the op the first layer waits for."""
        r = "re_" if re else ""
        pre = "re." if re else ""
        n1 = norm(pre + "attn_norm", entry, ph, r + "norm")
        ag = tp_gather(pre + "attn_in", n1, ph)
        qkv = add(pre + "qkv", GemmShape(T, n_qkv, H), (ag or n1, fsdp_dep), ph, L, "compute", mb, r + "qkv")
        last = qkv
        if not train:
            last = add("kv_write", MemShape(2 * T * kvn * hd * b), (qkv,), ph, L, "compute", mb, "kv_cache")
        at = add(pre + "attn", AttnShape(d.micro_batch, qn, kvn, 1 if decode else d.seq, d.seq, hd, True),
                 (last,), ph, L, "compute", mb, r + "attn")
        pr = add(pre + "proj", GemmShape(T, H, k_proj), (at,), ph, L, "compute", mb, r + "proj")
        c = tp_after(pre + "proj", pr, ph)
        n2 = norm(pre + "mlp_norm", c or pr, ph, r + "norm")
        if not s.moe:
            ag = tp_gather(pre + "mlp_in", n2, ph)
            f1 = add(pre + "fc1", GemmShape(T, g * Fl, H), (ag or n2,), ph, L, "compute", mb, r + "fc1")
            a = add(pre + "act", MemShape((g + 1) * T * Fl * b, 8 * g * T * Fl), (f1,), ph, L, "compute", mb, r + "act")
            f2 = add(pre + "fc2", GemmShape(T, H, Fl), (a,), ph, L, "compute", mb, r + "fc2")
            tp_after(pre + "fc2", f2, ph)
            return
        E, k = d.n_experts, d.top_k
        rt = add(pre + "router", GemmShape(Tsp, E, H), (n2,), ph, L, "compute", mb, r + "router")
        if not s.ep:
            ag = tp_gather(pre + "mlp_in", n2, ph)
            me = cdiv(T * k, E)
            e1 = add(pre + "expert_fc1", GemmShape(me, g * Fl, H, E), (rt, ag), ph, L, "compute", mb, r + "experts")
            a = add(pre + "act", MemShape((g + 1) * me * E * Fl * b, 8 * g * me * E * Fl), (e1,), ph, L, "compute",
                    mb, r + "act")
            e2 = add(pre + "expert_fc2", GemmShape(me, H, Fl, E), (a,), ph, L, "compute", mb, r + "experts")
            tp_after(pre + "expert_fc2", e2, ph)
            return
        el, me, a2a = moe_ep_sizes()
        dsp = add(pre + "ep_dispatch", CollShape("all_to_all", a2a, ep, "ep", ep_blk), (rt,), ph, L, "ep", mb,
                  "ep_dispatch")
        e1 = add(pre + "expert_fc1", GemmShape(me, g * F, H, el), (dsp,), ph, L, "compute", mb, r + "experts")
        a = add(pre + "act", MemShape((g + 1) * me * el * F * b, 8 * g * me * el * F), (e1,), ph, L, "compute", mb,
                r + "act")
        e2 = add(pre + "expert_fc2", GemmShape(me, H, F, el), (a,), ph, L, "compute", mb, r + "experts")
        cb = add(pre + "ep_combine", CollShape("all_to_all", a2a, ep, "ep", ep_blk), (e2,), ph, L, "ep", mb,
                 "ep_combine")
        if s.tp and not s.sp:
            add(pre + "moe_out.ag", CollShape("all_gather", act_bytes, tp, "tp", tp_blk), (cb,), ph, L, "tp", mb,
                "tp_ag")

    def bwd_gemm(name: str, fwd_m, fwd_n, fwd_k, deps, role: str, batch=1) -> tuple[str, str]:
        """dgrad (M x K from M x N and N x K) and wgrad (K x N over M tokens) of a forward GEMM."""
        dg = add(name + ".dgrad", GemmShape(fwd_m, fwd_k, fwd_n, batch), deps, "bwd", L, "compute", mb, role, "dgrad")
        wg = add(name + ".wgrad", GemmShape(fwd_k, fwd_n, fwd_m, batch), deps, "bwd", L, "compute", mb, role, "wgrad")
        return dg, wg

    fsdp = s.fsdp and s.dp
    stage_layers = d.layers // d.pp

    # ---- once per micro-batch: embedding (first stage) ----
    emb_fsdp = None
    if fsdp:
        emb_fsdp = add("embed.fsdp_ag", CollShape("all_gather", w.emb * b * d.emb_mult, dp, "dp", dp_blk), (),
                       "fwd", "micro", "dp", mb, "fsdp_ag")
    emb = add("embed", MemShape(2 * T * H * b), (emb_fsdp,), "fwd", "micro", "compute", mb, "embed")
    emb_c = tp_after("embed", emb, "fwd", "micro", mb)

    # ---- one layer, forward ----
    fsdp_f = None
    if fsdp:
        fsdp_f = add("layer.fsdp_ag", CollShape("all_gather", w.layer * b, dp, "dp", dp_blk), (), "fwd", L, "dp",
                     mb, "fsdp_ag")
    layer_forward("fwd", False, fsdp_f, emb_c or emb)
    last_fwd = o.ops[-1].name

    pp_bytes = (T // tp if s.sp else T) * H * b
    if s.pp:
        add("pp.fwd", CollShape("send_recv", pp_bytes, 2, "pp", pp_blk), (last_fwd,), "fwd", "micro", "pp",
            mb * d.vpp, "pp_fwd")

    # ---- head (last stage) ----
    T_out = T if train else d.micro_batch  # inference computes logits of the last position only
    Vl = cdiv(d.vocab, tp)
    fn = add("final_norm", MemShape(2 * (Tsp if train else T_out) * H * b), (last_fwd,), "fwd", "micro", "compute",
             mb, "norm")
    hag = tp_gather("lm_head_in", fn, "fwd", "micro", mb) if train else None
    head = add("lm_head", GemmShape(T_out, Vl, H), (hag or fn,), "fwd", "micro", "compute", mb, "lm_head")
    if not train:
        return Layer(d, s, tuple(o.ops), w, T, stage_layers)

    loss = add("loss", MemShape(3 * T * Vl * 4, 5 * T * Vl), (head,), "fwd", "micro", "compute", mb, "loss")
    if s.tp:
        add("loss.ar", CollShape("all_reduce", 2 * T * 4, tp, "tp", tp_blk), (head,), "fwd", "micro", "tp", mb,
            "loss_ar")
    lb = add("loss.bwd", MemShape(2 * T * Vl * b, 2 * T * Vl), (loss,), "bwd", "micro", "compute", mb, "loss")
    hd_dg = add("lm_head.dgrad", GemmShape(T, H, Vl), (lb,), "bwd", "micro", "compute", mb, "lm_head", "dgrad")
    hd_wg = add("lm_head.wgrad", GemmShape(H, Vl, T), (lb,), "bwd", "micro", "compute", mb, "lm_head", "wgrad")
    hc = tp_after("lm_head.dgrad", hd_dg, "bwd", "micro", mb)
    fnb = add("final_norm.bwd", MemShape(4 * Tsp * H * b), (hc or hd_dg,), "bwd", "micro", "compute", mb, "norm")

    # ---- one layer, backward (reverse order) ----
    fsdp_b = None
    if fsdp:
        fsdp_b = add("layer.fsdp_ag.bwd", CollShape("all_gather", w.layer * b, dp, "dp", dp_blk), (), "bwd", L, "dp",
                     mb, "fsdp_ag")
    if s.recompute == "full":
        layer_forward("bwd", True, fsdp_b, fnb)
    wgrads: list[str] = []
    start = o.ops[-1].name if s.recompute == "full" else fnb
    if s.ep:
        E = d.n_experts
        el, me, a2a = moe_ep_sizes()
        cb = add("ep_combine.bwd", CollShape("all_to_all", a2a, ep, "ep", ep_blk), (start, fsdp_b), "bwd", L, "ep",
                 mb, "ep_combine")
        dg, wg = bwd_gemm("expert_fc2", me, H, F, (cb,), "experts", el)
        wgrads.append(wg)
        ab = add("act.bwd", MemShape((2 * g + 1) * me * el * F * b, 8 * g * me * el * F), (dg,), "bwd", L, "compute",
                 mb, "act")
        dg, wg = bwd_gemm("expert_fc1", me, g * F, H, (ab,), "experts", el)
        wgrads.append(wg)
        dsp = add("ep_dispatch.bwd", CollShape("all_to_all", a2a, ep, "ep", ep_blk), (dg,), "bwd", L, "ep", mb,
                  "ep_dispatch")
        dg, wg = bwd_gemm("router", Tsp, E, H, (dsp,), "router")
        wgrads.append(wg)
        mlp_end = dg
        if s.tp and not s.sp:
            mlp_end = add("moe_in.ag.bwd", CollShape("all_gather", act_bytes, tp, "tp", tp_blk), (dsp,), "bwd", L,
                          "tp", mb, "tp_ag")
    else:
        gag = tp_gather("mlp_out.bwd", start, "bwd")
        first_dep = (gag or start, fsdp_b)
        if s.moe:
            E, k = d.n_experts, d.top_k
            me = cdiv(T * k, E)
            dg, wg = bwd_gemm("expert_fc2", me, H, Fl, first_dep, "experts", E)
            wgrads.append(wg)
            ab = add("act.bwd", MemShape((2 * g + 1) * me * E * Fl * b, 8 * g * me * E * Fl), (dg,), "bwd", L,
                     "compute", mb, "act")
            iag = tp_gather("mlp_in.bwd", ab, "bwd")
            dg, wg = bwd_gemm("expert_fc1", me, g * Fl, H, (ab, iag), "experts", E)
            wgrads.append(wg)
            _, rwg = bwd_gemm("router", Tsp, E, H, (ab,), "router")
            wgrads.append(rwg)
        else:
            dg, wg = bwd_gemm("fc2", T, H, Fl, first_dep, "fc2")
            wgrads.append(wg)
            ab = add("act.bwd", MemShape((2 * g + 1) * T * Fl * b, 8 * g * T * Fl), (dg,), "bwd", L, "compute", mb,
                     "act")
            iag = tp_gather("mlp_in.bwd", ab, "bwd")
            dg, wg = bwd_gemm("fc1", T, g * Fl, H, (ab, iag), "fc1")
            wgrads.append(wg)
        c = tp_after("fc1.dgrad", dg, "bwd")
        mlp_end = c or dg
    n2b = add("mlp_norm.bwd", MemShape(8 * Tsp * H * b, 8 * Tsp * H), (mlp_end,), "bwd", L, "compute", mb, "norm")
    gag = tp_gather("attn_out.bwd", n2b, "bwd")
    dg, wg = bwd_gemm("proj", T, H, k_proj, (gag or n2b,), "proj")
    wgrads.append(wg)
    att_dep = dg
    if s.recompute == "selective":
        att_dep = add("re.attn", AttnShape(d.micro_batch, qn, kvn, d.seq, d.seq, hd, True), (dg,), "bwd", L,
                      "compute", mb, "re_attn")
    ab = add("attn.bwd", AttnShape(d.micro_batch, qn, kvn, d.seq, d.seq, hd, True, True), (att_dep,), "bwd", L,
             "compute", mb, "attn")
    iag = tp_gather("attn_in.bwd", ab, "bwd")
    dg, wg = bwd_gemm("qkv", T, n_qkv, H, (ab, iag), "qkv")
    wgrads.append(wg)
    c = tp_after("qkv.dgrad", dg, "bwd")
    n1b = add("attn_norm.bwd", MemShape(8 * Tsp * H * b, 8 * Tsp * H), (c or dg,), "bwd", L, "compute", mb, "norm")

    # gradient reduction of this layer's bucket
    wg_t = tuple(wgrads)
    reductions: list[str] = []
    grad_kind = "reduce_scatter" if s.zero1 else "all_reduce"
    if s.fsdp:
        if s.dp:
            reductions.append(add("layer.fsdp_rs", CollShape("reduce_scatter", w.layer * gb, dp, "dp", dp_blk), wg_t,
                                  "bwd", L, "dp", mb, "fsdp_rs"))
    else:
        if s.dp:
            reductions.append(add("layer.dp_grad", CollShape(grad_kind, (w.dense if s.ep else w.layer) * gb, dp, "dp",
                                                             dp_blk), wg_t, "bwd", L, "dp", 1, "dp_grad"))
        if s.ep and s.edp:
            reductions.append(add("layer.dp_grad_experts", CollShape(grad_kind, w.experts * gb, w.edp, "dp",
                                                                     tp * dp), wg_t, "bwd", L, "dp", 1, "dp_grad"))

    if s.pp:
        add("pp.bwd", CollShape("send_recv", pp_bytes, 2, "pp", pp_blk), (n1b,), "bwd", "micro", "pp", mb * d.vpp,
            "pp_bwd")

    # ---- embedding backward, step-level gradient reduction and optimizer ----
    egag = tp_gather("embed.bwd", n1b, "bwd", "micro", mb)
    eb = add("embed.bwd", MemShape(2 * T * H * b + w.emb * 4), (egag or n1b,), "bwd", "micro", "compute", mb, "embed")
    reduce_deps = (eb, hd_wg)
    if s.dp:
        if s.fsdp:
            reductions.append(add("embed.fsdp_rs", CollShape("reduce_scatter", w.emb_params * gb, dp, "dp", dp_blk),
                                  reduce_deps, "bwd", "micro", "dp", mb, "fsdp_rs"))
        else:
            reductions.append(add("embed.dp_grad", CollShape(grad_kind, w.emb_params * gb, dp, "dp", dp_blk),
                                  reduce_deps, "bwd", "step", "dp", 1, "dp_grad"))
    shard = dp if (s.fsdp or s.zero1) else 1
    if s.ep:
        opt_params = (stage_layers * (w.dense / shard + w.experts / (w.edp if (s.fsdp or s.zero1) and s.dp else 1))
                      + w.emb_params / shard)
    else:
        opt_params = (stage_layers * w.layer + w.emb_params) / shard
    opt = add("optimizer", MemShape(ADAM_BYTES_PER_PARAM * opt_params, ADAM_FLOPS_PER_PARAM * opt_params),
              tuple(reductions) or (eb,), "opt", "step", "compute", 1, "optimizer")
    if s.zero1 and s.dp and not s.fsdp:
        add("dp_param_ag", CollShape("all_gather", (stage_layers * w.layer + w.emb_params) * b, dp, "dp", dp_blk),
            (opt,), "opt", "step", "dp", 1, "dp_param_ag")
    return Layer(d, s, tuple(o.ops), w, T, stage_layers)


@dataclass(frozen=True)
class CommGemmPair:
    """A layer collective with the GEMM it feeds or drains, as an overlap pattern.

    pattern: "ag_gemm" (all-gather -> GEMM), "gemm_rs" / "gemm_ar" (GEMM -> reduce-scatter / all-reduce)
    or "moe" (all-to-all -> grouped expert GEMM). m = rows of the communicated activation (tokens
    gathered or scattered; token rows this GPU routes for moe), n and k = the GEMM's N and K.
    """

    pattern: str
    coll: OpSpec
    gemm: OpSpec
    m: Num
    n: Num
    k: Num


_PATTERN = {("before", "all_gather"): "ag_gemm", ("after", "reduce_scatter"): "gemm_rs",
            ("after", "all_reduce"): "gemm_ar", ("before", "all_to_all"): "moe"}


def comm_gemm_pairs(layer: Layer) -> list[CommGemmPair]:
    """Every layer-scope TP/EP collective next to a GEMM (its input or its output), in op order."""
    ops = layer.by_name()
    rows_per_byte = layer.dims.hidden * layer.dims.b  # every TP/EP collective moves [rows, hidden] activations
    out = []
    for op in layer.ops:
        if op.scope != "layer":
            continue
        found = []
        if op.kind == "coll" and op.stream in ("tp", "ep"):
            found += [("after", op, ops[d]) for d in op.deps if ops[d].kind == "gemm"]
        if op.kind == "gemm":
            found += [("before", ops[d], op) for d in op.deps if ops[d].kind == "coll" and ops[d].stream in ("tp", "ep")]
        for where, c, gm in found:
            pattern = _PATTERN.get((where, c.shape.kind))
            if pattern == "moe" and gm.role != "experts":
                continue  # the router's backward after the dispatch is not an expert GEMM
            if pattern is not None:
                out.append(CommGemmPair(pattern, c, gm, c.shape.bytes // rows_per_byte, gm.shape.n, gm.shape.k))
    return out
