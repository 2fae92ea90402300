"""Per-GPU memory of a step: weights, gradients, optimizer state, activations, KV cache, and a fits verdict.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", Sec. 4), generalized to grouped-query attention, gated MLPs, MoE and no-dropout models:
with MHA, a 4H GeLU MLP, dropout and 2-byte activations, one layer stores
sbh(34 + 5as/h) bytes without parallelism, sbh(10 + 24/t + 5as/(ht)) with TP t,
sbh/t (34 + 5as/h) with TP + SP, sbh(10 + 24/t) with selective recomputation, 34 sbh/t with SP and
selective recomputation, and 2sbh (2sbh/t with SP) with full recomputation. The first pipeline
stage of 1F1B holds min(pp, micro-batches) micro-batches in flight (interleaved with v virtual
stages: pp (1 + (pp - 1) / (pp v))).
"""

from __future__ import annotations

from dataclasses import dataclass

from c3kit.errors import MemoryFitError, WorkloadError
from c3kit.hw.model import dtype_bytes
from c3kit.workload.graph import StepGraph, build_step
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import Parallelism

OPTIMIZER_BYTES_PER_PARAM = 12  # Adam: fp32 master weights + first and second moments


@dataclass(frozen=True)
class MemoryReport:
    """Bytes per GPU by kind and the verdict against a capacity (bytes)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    kv_cache: float
    buffers: float  # communication / FSDP gather buffers and the recomputation working set
    capacity: float
    gpu: str = "GPU"

    @property
    def total(self) -> float:
        """Bytes needed per GPU."""
        return self.weights + self.gradients + self.optimizer + self.activations + self.kv_cache + self.buffers

    @property
    def fits(self) -> bool:
        """True when the total fits in the capacity."""
        return self.total <= self.capacity

    @property
    def headroom(self) -> float:
        """Capacity minus need, in bytes (negative when it does not fit)."""
        return self.capacity - self.total

    def breakdown(self) -> dict[str, float]:
        """Bytes by kind, non-zero kinds only, in a fixed order."""
        d = {"weights": self.weights, "gradients": self.gradients, "optimizer": self.optimizer,
             "activations": self.activations, "kv_cache": self.kv_cache, "buffers": self.buffers}
        return {k: v for k, v in d.items() if v > 0}

    def summary(self) -> str:
        """One line: total need, the breakdown, the capacity (human units, for messages)."""
        from c3kit.units import fmt_bytes

        parts = ", ".join(f"{k.replace('_', ' ')} {fmt_bytes(v)}" for k, v in self.breakdown().items())
        return f"needs {fmt_bytes(self.total)} per GPU ({parts}), {self.gpu} has {fmt_bytes(self.capacity)}"


def layer_activation_bytes(model: ModelConfig, par: Parallelism, seq: int, dtype: str = "bf16",
                           flash_attention: bool = True, recompute: str | None = None) -> float:
    """Activation bytes one layer stores for backward for one micro-batch on one GPU."""
    m, p = model, par
    rc = p.recompute if recompute is None else recompute
    t = p.tp
    b = dtype_bytes(dtype)
    s_loc = seq // p.cp  # context parallelism: this GPU's tokens of each sequence
    sbh = p.micro_batch * s_loc * m.hidden
    tok = p.micro_batch * s_loc
    sp_div = t if p.sp else 1
    if rc == "full":
        return b * sbh / sp_div  # only the layer input is kept
    if rc == "layer":  # every recompute_every-th layer keeps only its input (averaged over the layers)
        full = layer_activation_bytes(m, p, seq, dtype, flash_attention, "full")
        none = layer_activation_bytes(m, p, seq, dtype, flash_attention, "none")
        return (full + (p.recompute_every - 1) * none) / p.recompute_every
    if rc == "op":
        return _op_policy_bytes(m, p, seq, dtype)
    qn = m.heads // t
    kvn = max(1, m.kv_heads // t)
    mask = 1 if m.dropout else 0
    # Replicated across TP ranks unless SP: inputs of the two norms, of QKV and of FC1, dropout masks.
    replicated = (4 * b + 2 * mask) * sbh
    # Sharded by TP: Q, K, V, the attention output (proj input).
    attn = tok * b * (2 * qn + 2 * kvn) * m.head_dim
    if m.is_moe:
        F = m.moe_ffn_hidden
        g = 2 if m.gated_mlp else 1
        if p.ep == 1:
            routed, width = tok * m.top_k, F // t
            mlp = routed * b * (g * width + width)
        else:
            routed, width = -(-tok // t) * m.top_k, F
            mlp = routed * b * (g * width + width + m.hidden)  # plus the dispatched copies of the tokens
        mlp += tok * m.n_experts * 4  # router probabilities (fp32)
    else:
        g = 2 if m.gated_mlp else 1
        width = m.ffn_hidden // t
        mlp = tok * b * (g * width + width)  # activation input (FC1 output) and FC2 input
    per_layer = replicated / sp_div + attn + mlp
    if rc == "none" and not flash_attention:
        # softmax output (b bytes), plus dropout mask and dropout output when the model uses dropout
        per_elem = b + (1 + b) * mask
        per_layer += per_elem * qn * p.micro_batch * s_loc * seq
    elif rc == "none" or flash_attention:
        per_layer += 4 * qn * tok  # flash attention keeps the fp32 log-sum-exp per row
    return float(per_layer)


def _op_policy_bytes(m: ModelConfig, p: Parallelism, seq: int, dtype: str) -> float:
    """Bytes torchtitan's op-level selective AC keeps per layer (parallel.RECOMPUTE_SOURCES["op"]): the block
    input, the outputs of the odd aten.mm calls (wq, wv, w1 and w2; FP8 linears: none), of SDPA (and its fp32
    log-sum-exp) and, with TP + SP, of the two reduce-scatters."""
    t, b = p.tp, dtype_bytes(dtype)
    tok = p.micro_batch * (seq // p.cp)
    sp_div = t if p.sp else 1
    qn, kvn = m.heads // t, max(1, m.kv_heads // t)
    out = tok * m.hidden * b / sp_div + tok * qn * m.head_dim * b + 4 * qn * tok  # input, SDPA output, lse
    if dtype != "fp8":
        width = (m.moe_ffn_hidden if m.is_moe else m.ffn_hidden) // t
        out += tok * b * ((qn + kvn) * m.head_dim + width)  # wq, wv, w1 (FC1 of a GELU MLP)
        if m.gated_mlp:
            out += tok * m.hidden * b  # w2, the seventh aten.mm
    if p.sp and t > 1:
        out += 2 * tok * m.hidden * b / t  # reduce_scatter_tensor outputs
    return float(out)


def in_flight_micro_batches(par: Parallelism) -> float:
    """Micro-batches whose activations the first pipeline stage holds at once under 1F1B."""
    m = par.grad_accum
    if par.pp == 1:
        return 1.0
    if par.vpp > 1 and m >= par.pp:
        return par.pp * (1 + (par.pp - 1) / (par.pp * par.vpp))
    return float(min(par.pp, m))


def _param_shards(model: ModelConfig, par: Parallelism) -> tuple[float, float, float]:
    """(dense parameters, expert parameters, dp ranks sharing an expert) per GPU of the first stage."""
    from c3kit.workload.layer import Dims, Structure, weights

    m, p = model, par
    w = weights(Dims.of(m, p, m.max_seq), Structure.of(m, p))  # per-rank weights from the layer description
    dense, experts, edp = w.dense, w.experts, w.edp
    layers = max(p.rank_layers(m.layers))  # the fullest stage when layers do not divide by pp
    # The first stage holds the input embedding; with pp == 1 it also holds the untied output layer.
    emb = w.emb * (1 if (m.tied_embeddings or p.pp > 1) else 2)
    if m.position == "learned":
        emb += m.max_seq * m.hidden
    return float(layers * dense + emb), float(layers * experts), float(edp)


def memory_report(graph_or_config: StepGraph | ModelConfig, gpu_capacity_bytes, par: Parallelism | None = None,
                  phase: str = "train", seq: int | None = None, dtype: str = "bf16", grad_dtype: str = "fp32",
                  flash_attention: bool = True) -> MemoryReport:
    """Per-GPU memory of a step graph (or model + par) against a capacity in bytes or a GPU object."""
    if isinstance(graph_or_config, StepGraph):
        g = graph_or_config
        m, p, phase, seq, dtype = g.model, g.par, g.phase, g.seq, g.dtype
    elif isinstance(graph_or_config, ModelConfig):
        if par is None:
            raise WorkloadError("memory_report: give par= (a Parallelism) with a ModelConfig")
        m, p = graph_or_config, par
        seq = m.max_seq if seq is None else seq
        build_step(m, p, phase, seq, dtype)  # validates the layout and sizes
    else:
        raise WorkloadError(f"memory_report: expected a StepGraph or ModelConfig, got {type(graph_or_config).__name__}")
    capacity = getattr(gpu_capacity_bytes, "hbm_bytes", gpu_capacity_bytes)
    gpu_name = getattr(gpu_capacity_bytes, "name", "the GPU")
    if not isinstance(capacity, (int, float)) or capacity <= 0:
        raise WorkloadError(f"memory_report: GPU capacity must be positive bytes, got {capacity!r}")
    b = dtype_bytes(dtype)
    gb = dtype_bytes(grad_dtype)
    dense, experts, edp = _param_shards(m, p)
    train = phase == "train"
    dpc = p.dp * p.cp  # ranks that hold the same weights
    shard_w = dpc if p.fsdp else 1
    shard_e = edp if p.fsdp else 1
    weights = (dense / shard_w + experts / shard_e) * b
    grads = opt = acts = kv = buffers = 0.0
    layers = max(p.rank_layers(m.layers))
    layer_w = (dense + experts) / max(layers, 1)
    # FSDP once per step (Parallelism.fsdp_sync "step", parallel.FSDP_SYNC_SOURCES): every parameter of the stage
    # (its layers and embeddings) stays gathered from the first forward to the last backward
    step_sync = p.fsdp and p.fsdp_sync == "step" and shard_w > 1
    if step_sync:
        weights += (dense + experts) * b
    elif p.fsdp and shard_w > 1:
        buffers += 2 * layer_w * b  # the gathered current layer and the prefetched next one
    if train:
        g_w = dpc if p.zero2 else shard_w  # ZeRO-2 shards gradients too
        grads = (dense / g_w + experts / shard_e) * gb
        if step_sync:
            # the unsharded gradients wait for the reduce-scatter after the last backward; over several
            # micro-batches FSDP2 accumulates them in its reduce dtype (the gradient dtype here:
            # FSDPParam.unsharded_accumulated_grad), with one micro-batch they stay in the parameter dtype
            grads += (dense + experts) * (gb if p.grad_accum > 1 else b)
        o_w = dpc if (p.fsdp or p.dist_optimizer or p.zero2) else 1
        o_e = edp if (p.fsdp or p.dist_optimizer or p.zero2) else 1
        opt = (dense / o_w + experts / o_e) * OPTIMIZER_BYTES_PER_PARAM
        per_layer = layer_activation_bytes(m, p, seq, dtype, flash_attention)
        inflight = in_flight_micro_batches(p)
        acts = per_layer * layers * inflight
        tok = p.micro_batch * (seq // p.cp)
        sbh = tok * m.hidden
        if m.dropout:
            acts += sbh * inflight / (p.tp if p.sp else 1)  # embedding dropout mask
        if p.pp == 1:
            # output layer: final norm input, LM-head input, fp32 logits for the loss
            acts += 4 * sbh / p.tp + 4 * tok * m.vocab / p.tp
        if p.recompute in ("full", "layer"):
            buffers += layer_activation_bytes(m, p, seq, dtype, flash_attention, recompute="none")
        elif p.recompute == "op":  # the recomputed tensors of the layer in backward
            buffers += max(0.0, layer_activation_bytes(m, p, seq, dtype, flash_attention, recompute="none") - per_layer)
    else:
        t = p.tp
        kvn = max(1, m.kv_heads // t)
        kv = 2.0 * layers * p.micro_batch * (seq // p.cp) * kvn * m.head_dim * b
        tok = p.micro_batch * (1 if phase == "decode" else seq // p.cp)
        # working set of one layer at a time (nothing is kept for a backward pass)
        qn = m.heads // t
        f = (m.moe_ffn_hidden if m.is_moe else m.ffn_hidden)
        f_r = f // t if not (m.is_moe and p.ep > 1) else f
        acts = tok * b * (2 * m.hidden + (qn + 2 * kvn) * m.head_dim + (m.ffn_matrices) * f_r)
        acts += p.micro_batch * -(-m.vocab // t) * 4  # last-position logits
    return MemoryReport(weights=weights, gradients=grads, optimizer=opt, activations=float(acts), kv_cache=kv,
                        buffers=buffers, capacity=float(capacity), gpu=gpu_name)


def check_fits(graph_or_config: StepGraph | ModelConfig, gpu_capacity_bytes, **kwargs) -> MemoryReport:
    """memory_report(...) that raises MemoryFitError with the breakdown in one line when it does not fit."""
    r = memory_report(graph_or_config, gpu_capacity_bytes, **kwargs)
    if not r.fits:
        if r.optimizer > 0:
            raise MemoryFitError(f"{r.summary()}: raise tp/pp, use fsdp or recompute")
        raise MemoryFitError(f"{r.summary()}: raise tp/pp or lower the batch or sequence length")
    return r
