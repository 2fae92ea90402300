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

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from c3kit.errors import WorkloadError
from c3kit.hw.model import dtype_bytes
from c3kit.workload import ops
from c3kit.workload.config import ModelConfig
from c3kit.workload.parallel import PP_ENGINES, Parallelism

PHASES = ("train", "prefill", "decode")
ADAM_BYTES_PER_PARAM = 30  # read fp32 master, grad, m, v (16 B); write master, m, v (12 B) and bf16 weight (2 B)
ADAM_FLOPS_PER_PARAM = 12

Num = Any  # a Python int/float or a numpy array of them

# FP8 training as the frameworks run it: only the GEMMs of the Transformer Engine linear layers (or torchao
# Float8Linear modules) run in FP8; everything between them stays BF16. Sources: NVIDIA Transformer Engine
# docs, "Using FP8 with Transformer Engine" (FP8 applies to te.Linear / LayerNormLinear / LayerNormMLP /
# GroupedLinear GEMMs; dot-product attention stays BF16 unless fp8_dpa is set); Megatron-Core's output layer
# (lm_head) is not a TE linear layer, and its MoE router is a plain (FP32/BF16) matmul
# (megatron/core/transformer/moe/router.py); torchao Float8Linear as torchtitan applies it converts the
# nn.Linear layers of the blocks and skips the output projection (torchtitan docs/float8.md).
FP8_GEMM_ROLES = ("qkv", "proj", "fc1", "fc2", "experts")
# Megatron-Core (core_v0.16.0) megatron/core/transformer/moe/router.py TopKRouter.routing: in training with a
# load-balancing loss (moe_router_load_balancing_type "aux_loss" / "seq_aux_loss" / "global_aux_loss" with a
# coefficient > 0; Megatron-Bridge's Qwen3MoEModelProvider: aux_loss, 1e-3) compute_routing_scores_for_aux_loss runs
# the score function and top-k over the logits a second time (one fused kernel under moe_router_fusion), and its
# gradient flows back into the logits: one more T x E pass forward and backward.
MOE_AUX_SOURCE = "Megatron-Core core_v0.16.0 moe/router.py TopKRouter.routing, compute_routing_scores_for_aux_loss"
# Megatron-Core (core_v0.16.0) megatron/core/transformer/moe/token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess:
# with ep (or tp) > 1 every rank's tokens per expert (int64 [num_experts]) are all-gathered over the tp x ep group
# (gather_from_sequence_parallel_region) to size the all-to-all's input and output splits, which the host needs:
# a device-to-host copy and a synchronisation at cuda_sync_point "before_ep_alltoall" (dropless; "before_permutation_1"
# with a capacity factor), once per MoE layer forward.
MOE_COUNTS_SOURCE = "Megatron-Core core_v0.16.0 moe/token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess"


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
    balanced: bool = False  # context parallelism: load-balanced causal chunks, half of q_len x kv_len
    backend: str = ""  # workload.attention.BACKENDS; "" = the default of the GPU it runs on
    dropout: bool = False  # attention dropout (an extra kernel when the backend is unfused)


@dataclass(frozen=True)
class MemShape:
    """A memory-bound op: bytes moved and FLOPs; parts = the measured kernels it runs, each
    (kind of workload.memops.MEMOP_KINDS, elements, row width), which a calibrated GPU prices one by one."""

    bytes: Num
    flops: Num = 0
    parts: tuple = ()


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
    cp: Num = 1
    stage_layers: Num = 0  # layers on the fullest pipeline rank (0: ceil(layers / pp))

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
                    n_experts=m.n_experts, top_k=m.top_k, moe_ffn=m.moe_ffn_hidden, cp=par.cp,
                    stage_layers=max(par.rank_layers(m.layers)))


@dataclass(frozen=True)
class Structure:
    """Which ops exist (the same for every scenario of one evaluation): phase and the layout's switches.

    tp/dp/pp/ep/edp/cp say whether that group has more than one rank (dp: the dp x cp ranks that share
    weights); zero1 = gradients reduce-scattered and optimizer state sharded (distributed optimizer or
    ZeRO-2); zero2 = gradients also sharded in memory; fsdp_step = FSDP gathers the parameters and
    reduce-scatters the gradients once per step, not per micro-batch (Parallelism.fsdp_sync "step"); moe_factor = the busiest expert rank's tokens over
    its balanced share (Parallelism.moe_imbalance, capped by moe_capacity).
    """

    phase: str = "train"
    tp: bool = False
    sp: bool = False
    dp: bool = False
    pp: bool = False
    fsdp: bool = False
    fsdp_step: bool = False  # FSDP parameters kept unsharded over a step's micro-batches (parallel.FSDP_SYNC_SOURCES)
    zero1: bool = False
    recompute: str = "none"  # parallel.RECOMPUTE (what each recomputes: parallel.RECOMPUTE_SOURCES)
    recompute_every: int = 1  # recompute "layer": 1 / recompute_every of the layers fully recomputed
    fp8_linears: bool = False  # the projections run FP8 GEMMs (recompute "op": torch._scaled_mm is never saved)
    moe: bool = False
    ep: bool = False
    edp: bool = False
    cp: bool = False
    zero2: bool = False
    moe_factor: float = 1.0
    moe_chunks: bool = False  # ep > 1 with several local experts: received rows re-sorted by local expert
    norm: str = "rmsnorm"  # the model's norm kind (measured kernels differ)
    gated: bool = True  # SwiGLU (gated) or GELU MLP activation
    rope: bool = False  # rotary position embedding on q and k (its own kernels)
    attn_backend: str = ""  # the attention kernel (workload.attention.BACKENDS); "" = the GPU's default
    attn_dropout: bool = False  # the model trains with attention dropout
    norm_rope: str = "fused"  # how RMSNorm and RoPE run: "fused" kernels or "eager" fp32 code (NORM_ROPE)
    glue: str = "split"  # the memory-bound glue autograd runs between the kernels, by how the block is written (GLUE)
    grad_acc: str = "none"  # how weight gradients meet those .grad already holds (GRAD_ACC)
    cp_torch: bool = False  # context parallelism as torch runs it (parallel.CP_IMPL_SOURCES["torch"])
    train_metrics: int = 0  # cross-entropy passes over the logits per micro-batch for training metrics (no grad)
    flat_param_grads: bool = False  # FSDP1 FlatParameter views: autograd concatenates each unit's gradients
    loss_kernel: str = "eager"  # which cross-entropy kernels score the logits (LOSS_KERNELS)
    bias_grads: bool = False  # each biased dense linear's backward sums its output gradient over tokens (BIAS_GRADS)
    metrics_fp32: bool = True  # the training metrics' cross-entropy runs on fp32 logits (autocast), else bf16 (METRICS_BF16)
    pp_engine: str = "megatron"  # how pipeline stages exchange activations and gradients (parallel.PP_ENGINES)

    @staticmethod
    def of(model: ModelConfig, par: Parallelism, phase: str = "train", attn_backend: str = "",
           norm_rope: str = "fused", glue: str = "split", grad_acc: str = "",
           train_metrics: int = 0, flat_param_grads: bool = False, loss_kernel: str = "eager",
           bias_grads: bool = False, metrics_fp32: bool = True) -> "Structure":
        """The structure of one model x layout x phase (attn_backend: workload.attention.BACKENDS or "";
        norm_rope: one of NORM_ROPE; glue: one of GLUE; grad_acc: one of GRAD_ACC, "" = default_grad_acc;
        train_metrics: check_train_metrics; flat_param_grads: FSDP1's gradient concatenation, FLAT_PARAM_GRADS;
        loss_kernel: the training loss's cross-entropy kernels, LOSS_KERNELS; bias_grads: the bias gradients' own
        reductions, BIAS_GRADS, where the model has biases; metrics_fp32 False: METRICS_BF16)."""
        from c3kit.workload.attention import check_backend

        check_backend(attn_backend)
        check_train_metrics(train_metrics)
        check_loss_kernel(loss_kernel)
        check_norm_rope(norm_rope)
        check_glue(glue)
        grad_acc = check_grad_acc(grad_acc) if grad_acc else default_grad_acc(glue, par.grad_accum)
        moe_ep = model.is_moe and par.ep > 1
        factor = float(par.moe_imbalance)
        if par.moe_capacity > 0:
            factor = min(factor, float(par.moe_capacity))
        return Structure(phase=phase, tp=par.tp > 1, sp=par.sp and par.tp > 1, dp=par.dp * par.cp > 1,
                         pp=par.pp > 1, fsdp=par.fsdp,
                         fsdp_step=par.fsdp and par.fsdp_sync == "step", zero1=par.dist_optimizer or par.zero2,
                         recompute=par.recompute,
                         recompute_every=par.recompute_every if par.recompute == "layer" else 1,
                         moe=model.is_moe, ep=moe_ep,
                         edp=moe_ep and (par.tp * par.dp) // par.ep > 1, cp=par.cp > 1, zero2=par.zero2,
                         cp_torch=par.cp > 1 and par.cp_impl == "torch",
                         moe_factor=factor, moe_chunks=moe_ep and model.n_experts // par.ep > 1,
                         norm=model.norm, gated=model.gated_mlp,
                         rope=model.position == "rope", attn_backend=attn_backend,
                         attn_dropout=bool(model.dropout) and phase == "train", norm_rope=norm_rope,
                         glue=glue, grad_acc=grad_acc if phase == "train" else "none",
                         train_metrics=train_metrics if phase == "train" else 0,
                         flat_param_grads=bool(flat_param_grads) and par.fsdp and phase == "train",
                         loss_kernel=loss_kernel,
                         bias_grads=bool(bias_grads) and bool(model.bias) and phase == "train",
                         metrics_fp32=bool(metrics_fp32), pp_engine=par.pp_engine)

    @property
    def norm_kind(self) -> str:
        """The memory-op kind of the layer's norm (RMSNorm written out in fp32 when norm_rope is eager)."""
        return "rmsnorm_eager" if self.norm == "rmsnorm" and self.norm_rope == "eager" else self.norm

    @property
    def norm_fwd_kind(self) -> str:
        """The kind a forward norm runs: norm_kind with its weight read cold from HBM (memops.COLD_KINDS)."""
        return self.cold(self.norm_kind)

    @property
    def add_kind(self) -> str:
        """The memory-op kind of the residual add before each norm (the residual read cold, memops.COLD_KINDS)."""
        return self.cold("residual_add")

    @staticmethod
    def cold(kind: str) -> str:
        """The kind a forward pass runs for `kind` with its weight and residual cold (memops.COLD_KINDS)."""
        from c3kit.workload.memops import COLD_KINDS

        return COLD_KINDS.get(kind, kind)

    @property
    def rope_kind(self) -> str:
        """The memory-op kind of RoPE (a complex multiply in fp32 when norm_rope is eager)."""
        return "rope_complex" if self.norm_rope == "eager" else "rope"


# How RMSNorm and RoPE run: "fused" = one kernel per norm (F.rms_norm, Transformer Engine, compiled code) and
# rotate-half RoPE; "eager" = written out in fp32 in eager PyTorch, as torchtitan's `rmsnorm` norm_type and the
# Llama reference code (cast, square, mean, rsqrt, scale, cast back; RoPE as a complex multiply).
NORM_ROPE = ("fused", "eager")


def check_norm_rope(name: str) -> str:
    """The name itself, or a WorkloadError naming the choices."""
    if name not in NORM_ROPE:
        raise WorkloadError(f"unknown norm/RoPE code {name!r}: use one of {', '.join(NORM_ROPE)}")
    return name


# The memory-bound glue of a training backward: kernels autograd runs because of how a block's code is written,
# beside the measured GEMM, attention, norm, activation and RoPE kernels. Bytes follow from shapes; each glue op is
# priced by the measured class of the kernel it runs (a plain copy: the floor family's copy ladder; a sum of two
# activations: residual_add).
# - "split": PyTorch eager with one QKV weight and one gate/up weight whose outputs are split into views
#   (`qkv.split(...)`, `gate_up.chunk(2, -1)`, as c3kit's runtime blocks and llm-foundry's fused Wqkv write it).
#   The backward of a split is a cat (autograd SplitWithSizesBackward0 / SplitBackward0): dq, dk, dv copied into
#   one T x n_qkv gradient, d(gate) and d(up) into one T x 2F gradient. Seen in the H200 training-step profile
#   (benchmarks/ops_h200/h200-sxm-train-profile.json: one SplitWithSizesBackward0 and one gate/up SplitBackward0
#   per layer). The SDPA layout changes ([b, s, h, d] <-> [b, h, s, d]) are views there: cuDNN attention reads the
#   strided q, k, v and writes its output and gradients in the query's layout (no copy kernel in that profile).
# - "separate": separate q, k, v and gate, up projections (torchtitan's wq / wk / wv and w1 / w3, Hugging Face
#   Llama): no split, but the block input feeds several GEMMs, so autograd sums their input gradients: two adds
#   of T x H for q, k, v and one for gate and up (a GELU MLP has one FC1 and no add).
# - "fused": none of it: Megatron-Core splits QKV with Transformer Engine's SplitAlongDim, whose backward returns
#   the fused attention's adjacent dq, dk, dv as one tensor without a copy (transformer_engine/pytorch/attention/
#   dot_product_attention/dot_product_attention.py, _SplitAlongDim.backward: noop_ok), and runs SwiGLU as one
#   fused kernel that writes the T x 2F gradient itself (megatron/core/fusions/fused_bias_swiglu.py, swiglu_back);
#   torch.compile'd code (inductor) likewise writes the cat's inputs in place and fuses the adds.
# MoE experts have no glue op here (Megatron-Core's grouped experts run the fused activation).
GLUE = ("split", "separate", "fused")


def check_glue(name: str) -> str:
    """The name itself, or a WorkloadError naming the choices."""
    if name not in GLUE:
        raise WorkloadError(f"unknown glue code {name!r}: use one of {', '.join(GLUE)}")
    return name


# How a backward's weight gradients meet gradients that .grad already holds (PyTorch autograd's AccumulateGrad:
# it takes a fresh gradient as .grad when .grad is None, else adds it in place, one add kernel per parameter):
# - "none": every backward starts from .grad = None (one micro-batch per step with zero_grad(set_to_none=True),
#   PyTorch's default since 2.0), or the framework accumulates inside the weight-gradient GEMM (Megatron-Core's
#   gradient_accumulation_fusion: the wgrad GEMM adds into the fp32 main_grad buffer, no add kernel);
# - "micro": eager gradient accumulation: the first micro-batch's gradients are taken, each later one added
#   ((m - 1) adds per step of m micro-batches);
# - "every": every backward adds (zero_grad(set_to_none=False), or a timing loop that never clears .grad, as
#   c3kit's runtime block and training-step benchmarks run).
# One add reads two and writes one gradient of the parameter's size (priced as the measured residual add). With
# FSDP the gradients are reduce-scattered each micro-batch and the add runs over this rank's fp32 shard.
GRAD_ACC = ("none", "micro", "every")


# PyTorch FSDP1 (FullyShardedDataParallel, FlatParameter; torch 1.13-2.x): in training the module's parameters are
# autograd views of the unit's gathered flat parameter (FlatParamHandle._get_unflat_views: torch.split of the flat
# tensor, then .view per parameter), so autograd's SplitWithSizesBackward concatenates the unit's parameter gradients
# into one unsharded flat gradient (torch.cat: read and write every gradient element in the parameter dtype) before
# AccumulateGrad and FSDP's post-backward reduce-scatter; once per unit per micro-batch, on the compute stream. The
# fp32 upcast and pre-division FSDP1 then applies run on its post-backward stream beside the compute (not priced).
FLAT_PARAM_GRADS = ("https://github.com/pytorch/pytorch/blob/v2.1.0/torch/distributed/fsdp/flat_param.py "
                    "(_get_unflat_views_aligned / _get_unflat_views_unaligned; _runtime_utils.py _post_backward_hook)")


# How the training loss scores the logits (cross-entropy over T x V, forward and backward):
# - "eager": torch.nn.CrossEntropyLoss under autocast (the logits cast up to fp32, log_softmax, nll_loss and their
#   autograd), the kernels runtime/bench/ops.py times as kind cross_entropy (F.cross_entropy(logits.float(), ...));
# - "xentropy": flash-attn's fused softmax cross-entropy (flash_attn/losses/cross_entropy.py on xentropy_cuda_lib,
#   the apex xentropy kernels): one forward kernel reads the bf16 logits and writes a loss and a log-sum-exp per row,
#   one backward kernel reads the logits and writes their gradient in bf16. Priced at its HBM bytes on the measured
#   copy class (forward: one read of T x V bf16, a copy's bytes of half the elements; backward: a read and a write,
#   a copy of T x V); the kernel itself is not measured, and the forward's re-reads of each row from L2 (its max and
#   sum-exp passes) are not priced.
LOSS_KERNELS = {"eager": "https://github.com/pytorch/pytorch/blob/v2.1.0/torch/nn/modules/loss.py (CrossEntropyLoss; "
                         "autocast casts cross_entropy's input to fp32: aten/src/ATen/autocast_mode.cpp)",
                "xentropy": "https://github.com/Dao-AILab/flash-attention/blob/v1.0.9/flash_attn/losses/cross_entropy.py "
                            "(SoftmaxCrossEntropyLossFn: xentropy_cuda_lib.forward / .backward, csrc/xentropy)"}


# A torch.nn.Linear with a bias on a 3-D contiguous input runs one addmm (its bias in the GEMM's epilogue), and
# autograd reduces the broadcast bias's gradient, the output gradient, over the tokens with its own sum kernel (the
# engine's validate_outputs: sum_to of the T x N gradient): a read of T x N bf16 per biased linear per micro-batch,
# priced at its HBM bytes on the measured copy class (a copy's bytes of half the elements; the reduction kernel
# itself is not measured). Frameworks whose bias gradient is fused elsewhere (Transformer Engine's FP8 Linear:
# fp8_cast_transpose_bgrad_fused) or whose bias code was not read keep them off.
BIAS_GRADS = ("https://github.com/pytorch/pytorch/blob/v2.1.0/aten/src/ATen/native/Linear.cpp (_flatten_3d_linear: "
              "addmm with the bias); torch/csrc/autograd/engine.cpp validate_outputs (sum_to of a broadcast input's "
              "gradient)")
BIAS_GRAD_ROLES = ("qkv", "proj", "fc1", "fc2")  # the dense block's linears (experts and router: none here)


def check_loss_kernel(name) -> str:
    """The loss kernel name itself (a key of LOSS_KERNELS), or a WorkloadError."""
    if name not in LOSS_KERNELS:
        raise WorkloadError(f"unknown loss kernel {name!r}: use one of {', '.join(LOSS_KERNELS)}")
    return name


# Training metrics evaluated outside torch.autocast (Composer's AMP_FP8 precision context is te.fp8_autocast alone:
# composer/core/precision.py get_precision_context at v0.16.4) score the bf16 logits as they are: log_softmax reads
# and writes T x V bf16 (nll_loss reads one element per row), priced at its HBM bytes on the measured copy class (the
# kernel itself is not measured, nor the re-reads of each row from L2), in place of the autocast pass that casts the
# logits up to fp32 first (the measured kind cross_entropy).
METRICS_BF16 = ("https://github.com/mosaicml/composer/blob/v0.16.4/composer/core/precision.py (AMP_FP8: "
                "te.fp8_autocast only); composer/metrics/nlp.py LanguageCrossEntropy (torch.nn.CrossEntropyLoss)")


# The logits' dtype in the training metrics' cross-entropy: "fp32" (inside torch.autocast, which casts cross_entropy's
# input up: the measured kind cross_entropy) or "bf16" (outside autocast: METRICS_BF16). Structure.metrics_fp32.
TRAIN_METRICS_DTYPES = ("fp32", "bf16")

# The dtype data-parallel gradients are reduced (and held) in: "fp32" (the layer description's default: Megatron-Core's
# fp32 main_grad buffers, FSDP MixedPrecision with reduce_dtype fp32, Composer's FSDP mixed_precision DEFAULT) or "bf16"
# (gradients reduced as computed: Composer's FSDP mixed_precision PURE). build_step's grad_dtype; which each validation
# run used: studies/data/fsdp_precision.csv, with its sources.
GRAD_REDUCE_DTYPES = ("fp32", "bf16")


def check_train_metrics_dtype(name) -> str:
    """The dtype name itself (one of TRAIN_METRICS_DTYPES), or a WorkloadError."""
    if name not in TRAIN_METRICS_DTYPES:
        raise WorkloadError(f"unknown training-metrics dtype {name!r}: use one of {', '.join(TRAIN_METRICS_DTYPES)}")
    return name


def check_grad_reduce_dtype(name) -> str:
    """The dtype name itself (one of GRAD_REDUCE_DTYPES), or a WorkloadError."""
    if name not in GRAD_REDUCE_DTYPES:
        raise WorkloadError(f"unknown gradient reduce dtype {name!r}: use one of {', '.join(GRAD_REDUCE_DTYPES)}")
    return name


def check_train_metrics(passes) -> int:
    """The number of training-metric cross-entropy passes itself (an int >= 0), or a WorkloadError.

    A framework that updates loss-based training metrics after every micro-batch evaluates
    cross-entropy over the micro-batch's logits once per metric, without gradients, on top of the
    training loss (Composer 0.16's Trainer._train_microbatch calls _eval_train_metrics after each
    backward; llm-foundry's MPT declares LanguageCrossEntropy and LanguagePerplexity, each a
    torch.nn.CrossEntropyLoss over T x V logits): the op "train_metrics" prices those passes with
    the measured cross_entropy kernel."""
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 0:
        raise WorkloadError(f"train_metrics must be a whole number of cross-entropy passes >= 0, got {passes!r}")
    return passes


def check_grad_acc(name: str) -> str:
    """The name itself, or a WorkloadError naming the choices."""
    if name not in GRAD_ACC:
        raise WorkloadError(f"unknown gradient accumulation {name!r}: use one of {', '.join(GRAD_ACC)}")
    return name


def default_grad_acc(glue: str, micro_batches: int) -> str:
    """"micro" for eager code (glue split / separate) with several micro-batches per step, else "none" (one
    micro-batch, or Megatron-style code that accumulates inside the wgrad GEMM)."""
    return "micro" if glue != "fused" and micro_batches > 1 else "none"


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


def sample_shape(rows: Num, vocab: Num, elem_bytes: Num) -> MemShape:
    """Greedy sampling of the next token of `rows` sequences: one argmax over their logits (the whole vocabulary,
    gathered on one rank as vLLM's sampler does)."""
    return MemShape(rows * vocab * elem_bytes, rows * vocab, (("argmax", rows * vocab, vocab),))


def attention_flops(a: AttnShape) -> Num:
    """FLOPs of an attention shape (ops.attention_flops)."""
    return ops.attention_flops(a.batch, a.heads, a.q_len, a.kv_len, a.head_dim, a.causal, a.backward, a.balanced)


def attention_bytes(a: AttnShape, elem_bytes: Num) -> Num:
    """Bytes of an attention shape (ops.attention_bytes)."""
    return ops.attention_bytes(a.batch, a.heads, a.kv_heads, a.q_len, a.kv_len, a.head_dim, elem_bytes, a.backward)


def flops_bytes(op: OpSpec, elem_bytes: Num) -> tuple[Num, Num]:
    """(FLOPs, bytes) of a compute op (GEMM, attention or memory-bound), ints or arrays."""
    sh = op.shape
    if isinstance(sh, GemmShape):
        return ops.gemm_flops(sh.m, sh.n, sh.k, sh.batch), ops.gemm_bytes(sh.m, sh.n, sh.k, elem_bytes, sh.batch)
    if isinstance(sh, AttnShape):
        return attention_flops(sh), attention_bytes(sh, elem_bytes)
    if isinstance(sh, MemShape):
        return sh.flops, sh.bytes
    raise WorkloadError(f"{op.name} is a collective: it has bytes, not FLOPs")


def op_dtype(op: "OpSpec", dtype: str, phase: str = "train") -> str:
    """The dtype an op runs in under a step dtype: under "fp8", GEMMs of FP8_GEMM_ROLES in FP8, the rest BF16;
    in inference also the attention, which reads an FP8 KV cache (assumed for FP8 serving: the cache is kept in
    the activation dtype, activation_dtype)."""
    if dtype != "fp8":
        return dtype
    if op.kind == "attn" and phase != "train":
        return "fp8"
    return "fp8" if op.kind == "gemm" and op.role.removeprefix("re_") in FP8_GEMM_ROLES else "bf16"


def activation_dtype(dtype: str, phase: str) -> str:
    """The dtype of activations and weights between ops: BF16 under FP8 training (the FP8 copies live inside
    the linear layers, see FP8_GEMM_ROLES), the step dtype otherwise."""
    return "bf16" if dtype == "fp8" and phase == "train" else dtype


def describe(model: ModelConfig, par: Parallelism, phase: str = "train", seq: int | None = None,
             dtype: str = "bf16", gpus_per_node: int = 8, grad_dtype: str = "fp32", attn_backend: str = "",
             norm_rope: str = "fused", glue: str = "split", grad_acc: str = "", train_metrics: int = 0,
             flat_param_grads: bool = False, loss_kernel: str = "eager", bias_grads: bool = False,
             metrics_fp32: bool = True) -> Layer:
    """Every op of one step on one GPU (phase "train", "prefill" or "decode"; decode: KV cache of length seq;
    attn_backend: the attention kernel, workload.attention.BACKENDS, "" = the GPU's default; glue: the backward's
    memory-bound glue by how the block is written, GLUE; grad_acc: GRAD_ACC, "" = default_grad_acc;
    train_metrics: cross-entropy passes per micro-batch for training metrics, check_train_metrics; flat_param_grads:
    FSDP1's per-unit gradient concatenation, FLAT_PARAM_GRADS; loss_kernel: the loss's kernels, LOSS_KERNELS;
    bias_grads: the biased linears' bias-gradient reductions, BIAS_GRADS; metrics_fp32 False: the metrics'
    cross-entropy on bf16 logits, METRICS_BF16)."""
    if phase not in PHASES:
        raise WorkloadError(f"unknown phase {phase!r}: use one of {', '.join(PHASES)}")
    seq = model.max_seq if seq is None else seq
    if not isinstance(seq, int) or isinstance(seq, bool) or seq <= 0:
        raise WorkloadError(f"sequence length must be a positive integer, got {seq!r}")
    if not isinstance(gpus_per_node, int) or gpus_per_node <= 0:
        raise WorkloadError(f"gpus_per_node must be a positive integer, got {gpus_per_node!r}")
    par.validate(model)
    if par.cp > 1:
        if phase == "decode":
            raise WorkloadError("context parallelism (cp > 1) splits long prompts: use cp 1 for decode")
        if seq % (2 * par.cp):
            raise WorkloadError(f"context parallelism: sequence {seq} must divide into 2 x cp = {2 * par.cp} "
                                "load-balanced chunks")
    if par.recompute == "op" and model.is_moe:
        raise WorkloadError(f"{model.name}: recompute 'op' is torchtitan's policy for dense blocks: use none, "
                            "selective, full or layer for a MoE model")
    s = Structure.of(model, par, phase, attn_backend, norm_rope, glue, grad_acc, train_metrics, flat_param_grads,
                     loss_kernel, bias_grads, metrics_fp32)
    if dtype == "fp8" and phase == "train":
        s = replace(s, fp8_linears=True)
    return evaluate(Dims.of(model, par, seq, activation_dtype(dtype, phase), gpus_per_node, grad_dtype), s)


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
    b = _Builder(d, s)
    emb, emb_c = b.embedding()
    fsdp_f = None
    if b.fsdp:  # fsdp_step: gathered in the first micro-batch's forward only, kept unsharded until the step's end
        fsdp_f = b.add("layer.fsdp_ag", CollShape("all_gather", b.w.layer * d.b, b.dp_ranks, "dp", b.dp_blk), (), "fwd",
                       _L, "dp", 1 if s.fsdp_step else b.mb, "fsdp_ag")
    b.layer_forward("fwd", False, fsdp_f, emb_c or emb)
    last_fwd = b.last()
    if s.pp:
        b.pipeline_sends("fwd", last_fwd)
    head = b.head(last_fwd)
    if s.phase != "train":
        return b.layer()
    hd_wg, fnb = b.loss_and_head_backward(head)
    fsdp_b = None
    if b.fsdp and not s.fsdp_step:  # fsdp_step: the parameters are still unsharded from the forward
        fsdp_b = b.add("layer.fsdp_ag.bwd", CollShape("all_gather", b.w.layer * d.b, b.dp_ranks, "dp", b.dp_blk), (),
                       "bwd", _L, "dp", b.mb, "fsdp_ag")
    if s.recompute in ("full", "layer"):
        b.recompute_layer(fsdp_b, fnb)
    elif s.recompute == "op":
        b.op_recompute(fsdp_b, fnb)
    start = b.last() if s.recompute in ("full", "layer", "op") else fnb
    wgrads, n1b = b.layer_backward(start, fsdp_b)
    acc = b.grad_accumulation("layer.grad_acc", b.layer_grad_params(), tuple(wgrads), _L)
    cat = b.flat_grad_cat("layer.grad_cat", tuple(wgrads))
    reductions = b.layer_grad_reductions(tuple(wgrads) + tuple(x for x in (acc, cat) if x))
    if s.pp:
        b.pipeline_sends("bwd", n1b)
    b.embedding_backward_and_optimizer(n1b, hd_wg, reductions)
    return b.layer()


_L = "layer"


class _Builder(_Ops):
    """The sizes every op of one evaluation shares, and one method per part of the step."""

    __slots__ = ("d", "s", "mb", "T", "Tsp", "qn", "kvn", "n_qkv", "k_proj", "tp_blk", "dp_blk", "ep_blk", "pp_blk",
                 "act_bytes", "w", "F", "Fl", "fsdp", "stage_layers", "pp_bytes", "dp_ranks", "cp_blk", "seq_local", "layer_grads")

    def __init__(self, d: Dims, s: Structure) -> None:
        super().__init__()
        self.d, self.s = d, s
        tp, dp = d.tp, d.dp
        self.mb = d.grad_accum  # micro-batches per step per DP rank
        self.seq_local = d.seq // d.cp if s.cp else d.seq  # context parallelism: this GPU's tokens of a sequence
        self.T = d.micro_batch * (1 if s.phase == "decode" else self.seq_local)
        self.Tsp = cdiv(self.T, tp) if s.sp else self.T
        self.qn = d.heads // tp
        self.kvn = at_least_one(d.kv_heads // tp)  # KV heads are replicated when tp > kv_heads
        self.n_qkv = (self.qn + 2 * self.kvn) * d.head_dim
        self.k_proj = self.qn * d.head_dim
        # rank order tp, cp, dp, pp: a group spans this many consecutive ranks; weights are shared by dp x cp
        cp = d.cp
        self.dp_ranks = dp * cp if s.cp else dp
        self.tp_blk, self.cp_blk, self.ep_blk = tp, tp * cp, d.ep
        self.dp_blk, self.pp_blk = tp * cp * dp, tp * cp * dp * d.pp
        self.act_bytes = self.T * d.hidden * d.b  # one T x H activation, the size every TP collective moves
        self.w = weights(d, s)
        self.F = d.moe_ffn if s.moe else d.ffn
        self.Fl = self.F // tp
        self.fsdp = s.fsdp and s.dp
        # uneven stages: price the fullest rank (Parallelism.rank_layers; ceil(layers / pp) without a split)
        given = isinstance(d.stage_layers, int) and d.stage_layers > 0
        self.stage_layers = d.stage_layers if given else cdiv(d.layers, d.pp)
        self.pp_bytes = (self.T // tp if s.sp else self.T) * d.hidden * d.b
        self.layer_grads: tuple[str, ...] = ()  # a layer's weight gradients (and their accumulation), once known

    def last(self) -> str:
        """The name of the op added last."""
        return self.ops[-1].name

    def layer(self) -> Layer:
        """The finished description."""
        return Layer(self.d, self.s, tuple(self.ops), self.w, self.T, self.stage_layers)

    # ---- building blocks ----

    def tp_after(self, name: str, dep, ph: str, scope: str = _L, cnt=None) -> str | None:
        """TP reduction of a row-parallel output (dep: an op name or a tuple of them): all-reduce, or
        reduce-scatter with SP."""
        if not self.s.tp:
            return None
        cnt = self.mb if cnt is None else cnt
        deps = dep if isinstance(dep, tuple) else (dep,)
        if self.s.sp:
            return self.add(name + ".rs", CollShape("reduce_scatter", self.act_bytes, self.d.tp, "tp", self.tp_blk),
                            deps, ph, scope, "tp", cnt, "tp_rs")
        return self.add(name + ".ar", CollShape("all_reduce", self.act_bytes, self.d.tp, "tp", self.tp_blk), deps,
                        ph, scope, "tp", cnt, "tp_ar")

    def tp_gather(self, name: str, dep: str | None, ph: str, scope: str = _L, cnt=None) -> str | None:
        """SP all-gather of a sequence-sharded activation before a column-parallel GEMM."""
        if not (self.s.tp and self.s.sp):
            return None
        return self.add(name + ".ag", CollShape("all_gather", self.act_bytes, self.d.tp, "tp", self.tp_blk), (dep,),
                        ph, scope, "tp", self.mb if cnt is None else cnt, "tp_ag")

    def compute(self, name: str, shape, deps, ph: str, role: str, scope: str = _L, grad: str = "") -> str:
        """A compute op (count = micro-batches)."""
        return self.add(name, shape, deps, ph, scope, "compute", self.mb, role, grad)

    def norm(self, name: str, dep, ph: str, role: str) -> str:
        """Residual add + norm of one layer (2 reads, 2 writes of a Tsp x H activation)."""
        Tsp, H = self.Tsp, self.d.hidden
        parts = ((self.s.add_kind, Tsp * H, H), (self.s.norm_fwd_kind, Tsp * H, H))
        return self.compute(name, MemShape(self._norm_bytes(4, Tsp * H), 5 * Tsp * H, parts), (dep,), ph, role)

    def _norm_bytes(self, fused_traffic: float, elements, backward: bool = False):
        """Bytes of a norm op: fused_traffic x elements x itemsize, plus the extra passes of eager fp32 code."""
        from c3kit.workload.memops import MEMOP_KINDS

        extra = 0.0
        if self.s.norm_kind != self.s.norm:
            sfx = ".bwd" if backward else ""
            extra = MEMOP_KINDS[self.s.norm_kind + sfx][0] - MEMOP_KINDS[self.s.norm + sfx][0]
        return (fused_traffic + extra) * elements * self.d.b

    def norm_bwd(self, name: str, dep, role: str) -> str:
        """Norm backward and the residual branch's gradient add (dep: an op name or a tuple of them)."""
        Tsp, H = self.Tsp, self.d.hidden
        parts = ((self.s.norm_kind + ".bwd", Tsp * H, H), ("residual_add", Tsp * H, H))
        deps = dep if isinstance(dep, tuple) else (dep,)
        return self.compute(name, MemShape(self._norm_bytes(8, Tsp * H, True), 8 * Tsp * H, parts), deps, "bwd",
                            role)

    def act_parts(self, elements, width, backward: bool) -> tuple:
        """The activation's measured kernel: SwiGLU (gated) or GELU, forward or backward."""
        # one gate+up GEMM split by views (glue "split") feeds SwiGLU strided halves: the measured chunked kernel
        gated = "swiglu_chunked" if self.s.glue == "split" else "swiglu"
        kind = gated if self.s.gated else "gelu"
        kind = kind + ".bwd" if backward else self.s.cold(kind)
        return ((kind, elements, width),)

    def rope(self, name: str, dep: str, ph: str, role: str) -> str | None:
        """Rotary embedding of this GPU's q and k heads (rotate-half: read and write each once), applied to q and
        to k as two calls, the way Llama-style PyTorch code runs it."""
        if not self.s.rope:
            return None
        d = self.d
        from c3kit.workload.memops import MEMOP_KINDS

        kind = self.s.rope_kind + ".bwd" if name.endswith(".bwd") else self.s.cold(self.s.rope_kind)
        q_el, k_el = self.T * self.qn * d.head_dim, self.T * self.kvn * d.head_dim
        parts = ((kind, q_el, d.head_dim), (kind, k_el, d.head_dim))
        traffic = MEMOP_KINDS[kind][0]
        return self.compute(name, MemShape(traffic * (q_el + k_el) * d.b, 3 * (q_el + k_el), parts), (dep,), ph,
                            role)

    def cp_ring(self, name: str, dep: str, ph: str, tensors: int) -> tuple[str, ...]:
        """Ring attention's KV exchange beside the attention (cp > 1): cp - 1 ring steps, each passing this GPU's
        K and V chunk (and in backward its dK, dV: tensors = 2) to the next cp rank. torch's context parallelism
        (cp_torch) all-gathers the GQA-expanded K, V once per call instead (a ring all-gather moves the same
        cp - 1 chunks through each rank's link) and, in backward, passes fp32 dK, dV after every step: the first
        cp - 1 of those hidden under the next step's attention here, the last one waited for after the loop
        (cp_dkv_last)."""
        if not self.s.cp:
            return ()
        d = self.d
        if self.s.cp_torch:
            from c3kit.workload.cp_torch import dkv_bytes, kv_bytes

            out = d.micro_batch * self.qn * self.seq_local * d.head_dim
            size = (d.cp - 1) * (kv_bytes(out) + (tensors - 1) * dkv_bytes(out))
        else:
            size = tensors * (d.cp - 1) * 2 * d.micro_batch * self.kvn * self.seq_local * d.head_dim * d.b
        return (self.add(name + ".cp_kv", CollShape("send_recv", size, 2, "cp", self.cp_blk), (dep,), ph, _L, "cp",
                         self.mb, "cp_kv"),)

    def cp_dkv_last(self, name: str, dep: str) -> str | None:
        """torch context parallelism's last fp32 dK, dV pass of a backward attention call, which the call waits
        for right after its last step (cp_torch.TORCH_CP_CODE: dkv_rotater.next_buffer() after the loop); None
        unless cp_impl is "torch"."""
        if not self.s.cp_torch:
            return None
        from c3kit.workload.cp_torch import dkv_bytes

        d = self.d
        out = d.micro_batch * self.qn * self.seq_local * d.head_dim
        return self.add(name + ".cp_dkv_last", CollShape("send_recv", dkv_bytes(out), 2, "cp", self.cp_blk), (dep,),
                        "bwd", _L, "cp", self.mb, "cp_kv")

    def cp_merge(self, name: str, deps, ph: str, role: str, backward: bool) -> str | None:
        """torch context parallelism's fp32 merges, accumulations, casts and K, V copies around one attention call
        on its busiest cp rank (workload.cp_torch: every kernel, priced one by one as the measured plain-copy
        kind, or the measured binary kind for the adds and subtractions, of the same bytes; width 1: elementwise
        passes over whole tensors); None unless cp_impl is "torch"."""
        if not self.s.cp_torch:
            return None
        from c3kit.workload.cp_torch import busiest_rank, kernels
        from c3kit.workload.memops import MEMOP_KINDS

        d = self.d
        deps = (deps,) if isinstance(deps, str) else tuple(deps)
        out = d.micro_batch * self.qn * self.seq_local * d.head_dim
        cp = int(d.cp)
        ks = kernels(cp, busiest_rank(cp, backward), out, out / d.head_dim, backward)
        parts = tuple((kind, nbytes / (MEMOP_KINDS[kind][0] * 2), 1) for _, kind, nbytes in ks)
        # one FLOP per element of the fp32 adds and subtractions (12 bytes each)
        flops = sum(nbytes for _, kind, nbytes in ks if kind == "residual_add") / 12
        return self.compute(name, MemShape(sum(k[2] for k in ks), flops, parts), deps, ph, role)

    def expert_rows(self, rows, experts):
        """Token rows of the busiest expert: ceil(rows x moe_factor / experts) (balanced: ceil(rows / experts))."""
        f = self.s.moe_factor
        if f == 1.0:
            return cdiv(rows, experts)
        if isinstance(rows, int) and isinstance(experts, int):
            return math.ceil(rows * f / experts)
        return np.ceil(rows * f / experts).astype(np.int64)

    def moe_ep_sizes(self):
        """(local experts, token rows per local expert, all-to-all bytes) with expert parallelism."""
        d = self.d
        tl = cdiv(self.T, d.tp)  # each TP rank routes its own 1/tp of the tokens
        el = d.n_experts // d.ep
        return el, self.expert_rows(tl * d.top_k, el), tl * d.top_k * d.hidden * d.b

    def a2a(self, name: str, nbytes, deps, ph: str, role: str) -> str:
        """An expert-parallel all-to-all."""
        return self.add(name, CollShape("all_to_all", nbytes, self.d.ep, "ep", self.ep_blk), deps, ph, _L, "ep",
                        self.mb, role)

    def bwd_gemm(self, name: str, fwd_m, fwd_n, fwd_k, deps, role: str, batch=1) -> tuple[str, str]:
        """dgrad (M x K from M x N and N x K) and wgrad (K x N over M tokens) of a forward GEMM."""
        dg = self.compute(name + ".dgrad", GemmShape(fwd_m, fwd_k, fwd_n, batch), deps, "bwd", role, grad="dgrad")
        wg = self.compute(name + ".wgrad", GemmShape(fwd_k, fwd_n, fwd_m, batch), deps, "bwd", role, grad="wgrad")
        if self.s.bias_grads and role in BIAS_GRAD_ROLES:  # the bias gradient's sum over the tokens (BIAS_GRADS)
            el = fwd_m * fwd_n * batch
            self.compute(name + ".bgrad", MemShape(el * self.d.b, el, (("copy", el / 2, 1),)), deps, "bwd", "bias_grad")
        return dg, wg

    # ---- forward ----

    def embedding(self) -> tuple[str, str | None]:
        """Once per micro-batch on the first stage: (embedding, its TP reduction or None)."""
        d = self.d
        emb_fsdp = None
        if self.fsdp:  # fsdp_step: once per step (torchtitan's root fully_shard, reshard_after_forward=not pp)
            step = self.s.fsdp_step
            emb_fsdp = self.add("embed.fsdp_ag", CollShape("all_gather", self.w.emb * d.b * d.emb_mult, self.dp_ranks, "dp",
                                                           self.dp_blk), (), "fwd", "step" if step else "micro", "dp",
                                1 if step else self.mb, "fsdp_ag")
        emb = self.compute("embed", MemShape(2 * self.T * d.hidden * d.b, 0, (("embedding", self.T * d.hidden, d.hidden),)),
                           (emb_fsdp,), "fwd", "embed", "micro")
        return emb, self.tp_after("embed", emb, "fwd", "micro")

    def layer_forward(self, ph: str, re: bool, fsdp_dep: str | None, entry: str | None) -> None:
        """One layer's forward ops (re: recomputed inside backward); entry: the op the first layer waits for."""
        d, s, T, H, hd = self.d, self.s, self.T, self.d.hidden, self.d.head_dim
        r = "re_" if re else ""
        pre = "re." if re else ""
        n1 = self.norm(pre + "attn_norm", entry, ph, r + "norm")
        ag = self.tp_gather(pre + "attn_in", n1, ph)
        last = self.compute(pre + "qkv", GemmShape(T, self.n_qkv, H), (ag or n1, fsdp_dep), ph, r + "qkv")
        last = self.rope(pre + "rope", last, ph, r + "rope") or last
        if s.phase != "train":
            kv = 2 * T * self.kvn * hd
            # K and V each written into the cache by its own kernel (index_copy_ / a paged-cache store), the measured
            # index_copy kind (call 21 measured one token per sequence, up to 1 MB: a prompt's larger writes take the
            # fitted bandwidth term beyond its rows)
            w = self.kvn * hd
            last = self.compute("kv_write", MemShape(2 * kv * d.b, 0, (("index_copy", kv / 2, w),
                                                                       ("index_copy", kv / 2, w))),
                                (last,), ph, "kv_cache")
        q_len = 1 if s.phase == "decode" else self.seq_local
        at = self.compute(pre + "attn", AttnShape(d.micro_batch, self.qn, self.kvn, q_len, d.seq, hd, True, False,
                                                  s.cp, s.attn_backend, s.attn_dropout), (last,), ph, r + "attn")
        ring = self.cp_ring(pre + "attn", last, ph, 1)
        at = self.cp_merge(pre + "attn.cp_merge", at, ph, r + "cp_merge", False) or at
        pr = self.compute(pre + "proj", GemmShape(T, H, self.k_proj), (at, *ring), ph, r + "proj")
        c = self.tp_after(pre + "proj", pr, ph)
        n2 = self.norm(pre + "mlp_norm", c or pr, ph, r + "norm")
        if not s.moe:
            self.dense_mlp_forward(ph, r, pre, n2)
        elif not s.ep:
            self.tp_experts_forward(ph, r, pre, n2)
        else:
            self.ep_experts_forward(ph, r, pre, n2)

    def recompute_layer(self, fsdp_dep: str | None, entry: str | None) -> None:
        """The whole layer's forward again inside its backward: every layer ("full") or, for "layer", every
        recompute_every-th one, priced per layer as that share of the runs (count micro-batches / N)."""
        mb = self.mb
        self.mb = mb / self.s.recompute_every if self.s.recompute == "layer" else mb
        try:
            self.layer_forward("bwd", True, fsdp_dep, entry)
        finally:
            self.mb = mb

    def op_recompute(self, fsdp_dep: str | None, entry: str | None) -> None:
        """torchtitan's op-level selective AC (parallel.RECOMPUTE_SOURCES["op"]): the ops its policy does not save,
        as far as the backward needs them: the norms, wk (with FP8 linears the whole QKV projection), RoPE,
        (cuDNN or unfused attention), wo, w3 (FP8: w1 and w3) and the gated activation."""
        d, s, T, H, hd = self.d, self.s, self.T, self.d.hidden, self.d.head_dim
        n1 = self.norm("re.attn_norm", entry, "bwd", "re_norm")
        ag = self.tp_gather("re.attn_in", n1, "bwd")  # an all-gather is not on the save list (a reduce-scatter is)
        n_re = self.n_qkv if s.fp8_linears else self.kvn * hd  # wk alone: the second aten.mm of the block
        last = self.compute("re.qkv", GemmShape(T, n_re, H), (ag or n1, fsdp_dep), "bwd", "re_qkv")
        last = self.rope("re.rope", last, "bwd", "re_rope") or last
        if s.attn_backend in ("cudnn", "unfused"):  # not on the save list: recomputed
            last = self.compute("re.attn", AttnShape(d.micro_batch, self.qn, self.kvn, self.seq_local, d.seq, hd, True,
                                                     False, s.cp, s.attn_backend, s.attn_dropout), (last,), "bwd",
                                "re_attn")
        pr = self.compute("re.proj", GemmShape(T, H, self.k_proj), (last,), "bwd", "re_proj")
        n2 = self.norm("re.mlp_norm", pr, "bwd", "re_norm")
        if not (s.gated or s.fp8_linears):
            return  # a GELU MLP's FC1 is the fifth aten.mm: saved, and so is what the activation needs
        T, g, Fl, b = self.T, self.d.g, self.Fl, self.d.b
        ag = self.tp_gather("re.mlp_in", n2, "bwd")
        width = g * Fl if s.fp8_linears else Fl  # w3 (the sixth aten.mm); FP8: w1 and w3
        f1 = self.compute("re.fc1", GemmShape(T, width, H), (ag or n2,), "bwd", "re_fc1")
        self.compute("re.act", MemShape((g + 1) * T * Fl * b, 8 * g * T * Fl, self.act_parts(T * Fl, Fl, False)),
                     (f1,), "bwd", "re_act")

    def dense_mlp_forward(self, ph: str, r: str, pre: str, n2: str) -> None:
        """FC1, activation, FC2 (column- then row-parallel)."""
        T, H, g, Fl, b = self.T, self.d.hidden, self.d.g, self.Fl, self.d.b
        ag = self.tp_gather(pre + "mlp_in", n2, ph)
        f1 = self.compute(pre + "fc1", GemmShape(T, g * Fl, H), (ag or n2,), ph, r + "fc1")
        a = self.compute(pre + "act", MemShape((g + 1) * T * Fl * b, 8 * g * T * Fl, self.act_parts(T * Fl, Fl, False)),
                         (f1,), ph, r + "act")
        f2 = self.compute(pre + "fc2", GemmShape(T, H, Fl), (a,), ph, r + "fc2")
        self.tp_after(pre + "fc2", f2, ph)

    def tp_experts_forward(self, ph: str, r: str, pre: str, n2: str) -> None:
        """MoE with ep 1: router, permute, every expert's 1/tp slice like a dense MLP, unpermute."""
        d, T, H, g, Fl, b = self.d, self.T, self.d.hidden, self.d.g, self.Fl, self.d.b
        E, k = d.n_experts, d.top_k
        tk = self.moe_router(pre, ph, r, n2)
        ag = self.tp_gather(pre + "mlp_in", n2, ph)
        pm = self.moe_permute(pre + "moe_permute", T * k, (tk, ag), ph, r)
        me = cdiv(T * k, E)
        e1 = self.compute(pre + "expert_fc1", GemmShape(me, g * Fl, H, E), (pm, ag), ph, r + "experts")
        a = self.compute(pre + "act", MemShape((g + 1) * me * E * Fl * b, 8 * g * me * E * Fl,
                                               self.act_parts(me * E * Fl, Fl, False)), (e1,), ph, r + "act")
        e2 = self.compute(pre + "expert_fc2", GemmShape(me, H, Fl, E), (a,), ph, r + "experts")
        up = self.moe_permute(pre + "moe_unpermute", T * k, (e2,), ph, r)
        self.tp_after(pre + "expert_fc2", (up, e2), ph)  # e2 named too: the GEMM -> reduction overlap pair

    def ep_experts_forward(self, ph: str, r: str, pre: str, n2: str) -> None:
        """MoE with ep > 1: router, permute, dispatch, (chunk sort), the local whole experts, (chunk sort),
        combine, unpermute (Megatron-Core's alltoall token dispatcher)."""
        d, H, g, F, b, s = self.d, self.d.hidden, self.d.g, self.F, self.d.b, self.s
        tk = self.moe_router(pre, ph, r, n2)
        el, me, a2a = self.moe_ep_sizes()
        cnt = self.moe_counts(pre, ph)  # on the compute stream before the permute (dispatch_preprocess)
        pm = self.moe_permute(pre + "moe_permute", cdiv(self.T, d.tp) * d.top_k, (tk, cnt), ph, r)
        dsp = self.a2a(pre + "ep_dispatch", a2a, (pm,), ph, "ep_dispatch")
        srt = self.moe_permute(pre + "moe_sort", me * el, (dsp,), ph, r) if s.moe_chunks else None
        e1 = self.compute(pre + "expert_fc1", GemmShape(me, g * F, H, el), (dsp, srt), ph, r + "experts")
        a = self.compute(pre + "act", MemShape((g + 1) * me * el * F * b, 8 * g * me * el * F,
                                               self.act_parts(me * el * F, F, False)), (e1,), ph, r + "act")
        e2 = self.compute(pre + "expert_fc2", GemmShape(me, H, F, el), (a,), ph, r + "experts")
        srt2 = self.moe_permute(pre + "moe_unsort", me * el, (e2,), ph, r) if s.moe_chunks else None
        cb = self.a2a(pre + "ep_combine", a2a, (e2, srt2), ph, "ep_combine")
        up = self.moe_permute(pre + "moe_unpermute", cdiv(self.T, d.tp) * d.top_k, (cb,), ph, r)
        if s.tp and not s.sp:
            self.add(pre + "moe_out.ag", CollShape("all_gather", self.act_bytes, d.tp, "tp", self.tp_blk), (up,), ph,
                     _L, "tp", self.mb, "tp_ag")

    def moe_router(self, pre: str, ph: str, r: str, n2: str) -> str:
        """Router GEMM over this rank's tokens and the softmax / top-k over its T x E logits; returns the top-k.
        The fused router kernel (Megatron-Core moe_router_fusion) was not measured: the softmax / top-k is priced
        as the measured row-softmax kernel (cross_entropy kind) over the same logits. In training the load-balancing
        loss scores the same logits a second time (router_aux, MOE_AUX_SOURCE)."""
        d, E = self.d, self.d.n_experts
        rt = self.compute(pre + "router", GemmShape(self.Tsp, E, d.hidden), (n2,), ph, r + "router")
        el = self.Tsp * E
        tk = self.compute(pre + "router_topk", MemShape(3 * el * 4, 5 * el, (("cross_entropy", el, E),)), (rt,), ph,
                          r + "router")
        if self.s.phase == "train":
            self.compute(pre + "router_aux", MemShape(3 * el * 4, 5 * el, (("cross_entropy", el, E),)), (rt,), ph,
                         r + "router")
        return tk

    def moe_counts(self, pre: str, ph: str) -> str:
        """The all-gather of every rank's token count per expert over the expert-parallel group, which sizes the
        all-to-all's splits (Megatron-Core MoEAlltoAllTokenDispatcher.preprocess, dropless or not: one int64 per
        expert per rank, MOE_COUNTS_SOURCE); the host then waits for these counts (step.overheads moe_host_sync)."""
        d = self.d
        return self.add(pre + "moe_counts.ag", CollShape("all_gather", d.n_experts * 8 * d.ep, d.ep, "ep", self.ep_blk),
                        tuple(dict.fromkeys((pre + "router_topk", self.last()))), ph, _L, "ep", self.mb,
                        "moe_counts")  # after the router's kernels

    def moe_permute(self, name: str, rows, deps, ph: str, r: str) -> str:
        """Token rows gathered into (or scattered back from) expert order: one kernel that reads and writes
        rows x hidden activations (Megatron-Core moe_utils permute / unpermute / sort_chunks_by_idxs, one fused
        TE kernel each under moe_permute_fusion), priced as the measured row gather (embedding kind)."""
        H = self.d.hidden
        el = rows * H
        return self.compute(name, MemShape(2 * el * self.d.b, 0, (("embedding", el, H),)), deps, ph, r + "permute")

    def head(self, last_fwd: str) -> str:
        """Final norm and LM head on the last stage (inference: logits of the last position only)."""
        d, train = self.d, self.s.phase == "train"
        T_out = self.T if train else d.micro_batch
        Vl = cdiv(d.vocab, d.tp)
        rows = self.Tsp if train else T_out
        fn = self.compute("final_norm", MemShape(self._norm_bytes(2, rows * d.hidden), 0,
                                                 ((self.s.norm_fwd_kind, rows * d.hidden, d.hidden),)),
                          (last_fwd,), "fwd", "norm", "micro")
        hag = self.tp_gather("lm_head_in", fn, "fwd", "micro") if train else None
        lm = self.compute("lm_head", GemmShape(T_out, Vl, d.hidden), (hag or fn,), "fwd", "lm_head", "micro")
        if not train:
            self.compute("sample", sample_shape(T_out, d.vocab, d.b), (lm,), "fwd", "sample", "micro")
        return lm

    # ---- backward ----

    def loss_and_head_backward(self, head: str) -> tuple[str, str]:
        """Loss, its TP all-reduce, the LM head's backward and the final norm's: (head wgrad, final-norm bwd)."""
        d, T, H, b = self.d, self.T, self.d.hidden, self.d.b
        Vl = cdiv(d.vocab, d.tp)
        if self.s.loss_kernel == "xentropy":  # one read of the bf16 logits, then a read and a write (LOSS_KERNELS)
            fwd = MemShape(T * Vl * b, 5 * T * Vl, (("copy", T * Vl / 2, 1),))
            bwd = MemShape(2 * T * Vl * b, 2 * T * Vl, (("copy", T * Vl, 1),))
        else:
            fwd = MemShape(3 * T * Vl * 4, 5 * T * Vl, (("cross_entropy", T * Vl, Vl),))
            bwd = MemShape(2 * T * Vl * b, 2 * T * Vl, (("cross_entropy.bwd", T * Vl, Vl),))
        loss = self.compute("loss", fwd, (head,), "fwd", "loss", "micro")
        if self.s.tp:
            self.add("loss.ar", CollShape("all_reduce", 2 * T * 4, d.tp, "tp", self.tp_blk), (head,), "fwd", "micro",
                     "tp", self.mb, "loss_ar")
        lb = self.compute("loss.bwd", bwd, (loss,), "bwd", "loss", "micro")
        if self.s.train_metrics:  # metric passes after the micro-batch's backward (check_train_metrics)
            n = self.s.train_metrics
            if self.s.metrics_fp32:
                shape = MemShape(n * 3 * T * Vl * 4, n * 5 * T * Vl, (("cross_entropy", n * T * Vl, Vl),))
            else:  # log_softmax over the bf16 logits: a read and a write of T x V (METRICS_BF16)
                shape = MemShape(n * 2 * T * Vl * b, n * 5 * T * Vl, (("copy", n * T * Vl, 1),))
            self.compute("train_metrics", shape, (lb,), "bwd", "train_metrics", "micro")
        hd_dg = self.compute("lm_head.dgrad", GemmShape(T, H, Vl), (lb,), "bwd", "lm_head", "micro", "dgrad")
        hd_wg = self.compute("lm_head.wgrad", GemmShape(H, Vl, T), (lb,), "bwd", "lm_head", "micro", "wgrad")
        hc = self.tp_after("lm_head.dgrad", hd_dg, "bwd", "micro")
        fnb = self.compute("final_norm.bwd", MemShape(self._norm_bytes(4, self.Tsp * H, True), 0,
                                                      ((self.s.norm_kind + ".bwd", self.Tsp * H, H),)),
                           (hc or hd_dg,), "bwd", "norm", "micro")
        return hd_wg, fnb

    def layer_backward(self, start: str, fsdp_b: str | None) -> tuple[list[str], str]:
        """One layer's backward in reverse order: (its wgrads, the attention norm's backward)."""
        d, s, T, H, b = self.d, self.s, self.T, self.d.hidden, self.d.b
        wgrads: list[str] = []
        if s.ep:
            mlp_end = self.ep_experts_backward(start, fsdp_b, wgrads)
        else:
            gag = self.tp_gather("mlp_out.bwd", start, "bwd")
            first_dep = (gag or start, fsdp_b)
            if s.moe:  # the experts' input gradient is TP-reduced; the router's (SP-local rows) is not
                red, rdg = self.tp_experts_backward(first_dep, wgrads)
                c = self.tp_after("fc1.dgrad", red, "bwd")
                mlp_end = (c or red[0], rdg)
            else:
                dg = self.dense_mlp_backward(first_dep, wgrads)
                c = self.tp_after("fc1.dgrad", dg, "bwd")
                mlp_end = c or (dg[0] if isinstance(dg, tuple) else dg)
        n2b = self.norm_bwd("mlp_norm.bwd", mlp_end, "norm")
        gag = self.tp_gather("attn_out.bwd", n2b, "bwd")
        dg, wg = self.bwd_gemm("proj", T, H, self.k_proj, (gag or n2b,), "proj")
        wgrads.append(wg)
        att_dep = (dg,)
        attn = (d.micro_batch, self.qn, self.kvn, self.seq_local, d.seq, d.head_dim, True)
        if s.recompute == "selective":
            re_at = self.compute("re.attn", AttnShape(*attn, False, s.cp, s.attn_backend, s.attn_dropout), (dg,), "bwd", "re_attn")
            re_at = self.cp_merge("re.attn.cp_merge", re_at, "bwd", "re_cp_merge", False) or re_at
            att_dep = (re_at, *self.cp_ring("re.attn", dg, "bwd", 1))
        ab = self.compute("attn.bwd", AttnShape(*attn, True, s.cp, s.attn_backend, s.attn_dropout), att_dep, "bwd", "attn")
        ring = self.cp_ring("attn.bwd", att_dep[0], "bwd", 2)
        ab = self.cp_merge("attn.bwd.cp_merge", (ab, self.cp_dkv_last("attn.bwd", ab)), "bwd", "cp_merge", True) or ab
        ab = self.rope("rope.bwd", ab, "bwd", "rope") or ab
        ab = self.split_cat("qkv.cat", ab, self.n_qkv) or ab
        iag = self.tp_gather("attn_in.bwd", ab, "bwd")
        dg, wg = self.bwd_gemm("qkv", T, self.n_qkv, H, (ab, iag, *ring), "qkv")
        wgrads.append(wg)
        sm = self.input_grad_sum("qkv.dx_add", dg, 2)
        c = self.tp_after("qkv.dgrad", (sm, dg) if sm else dg, "bwd")
        n1b = self.norm_bwd("attn_norm.bwd", c or sm or dg, "norm")
        return wgrads, n1b

    def split_cat(self, name: str, dep: str, width) -> str | None:
        """glue "split": the backward of splitting one GEMM's T x width output into views, a cat that copies the
        parts' gradients into one T x width gradient (autograd SplitWithSizesBackward0 / SplitBackward0)."""
        if self.s.glue != "split":
            return None
        el = self.T * width
        return self.compute(name, MemShape(2 * el * self.d.b, 0, (("copy", el, 1),)), (dep,), "bwd", "glue")

    def input_grad_sum(self, name: str, dep: str, adds: int) -> str | None:
        """glue "separate": the input gradient of a block input that fed adds + 1 separate projections, summed by
        autograd (adds additions of two T x H gradients, each priced as the measured residual add)."""
        if self.s.glue != "separate" or adds == 0:
            return None
        el, H = self.T * self.d.hidden, self.d.hidden
        return self.compute(name, MemShape(3 * adds * el * self.d.b, adds * el, (("residual_add", el, H),) * adds),
                            (dep,), "bwd", "glue")

    def dense_mlp_backward(self, first_dep, wgrads: list[str]):
        """FC2, activation and FC1 backward (and the glue between them); returns FC1's dgrad, or (the input
        gradient's sum, FC1's dgrad) with glue "separate"."""
        T, H, g, Fl, b = self.T, self.d.hidden, self.d.g, self.Fl, self.d.b
        dg, wg = self.bwd_gemm("fc2", T, H, Fl, first_dep, "fc2")
        wgrads.append(wg)
        ab = self.compute("act.bwd", MemShape((2 * g + 1) * T * Fl * b, 8 * g * T * Fl, self.act_parts(T * Fl, Fl, True)),
                          (dg,), "bwd", "act")
        if self.s.gated:  # the gate and up halves of one FC1 output (split) or two projections (separate)
            ab = self.split_cat("fc1.cat", ab, g * Fl) or ab
        iag = self.tp_gather("mlp_in.bwd", ab, "bwd")
        dg, wg = self.bwd_gemm("fc1", T, g * Fl, H, (ab, iag), "fc1")
        wgrads.append(wg)
        sm = self.input_grad_sum("fc1.dx_add", dg, 1 if self.s.gated else 0)
        return (sm, dg) if sm else dg

    def tp_experts_backward(self, first_dep, wgrads: list[str]) -> str:
        """MoE with ep 1: unpermute, expert FC2, activation, expert FC1, permute and router backward; returns
        ((permute backward, expert FC1's dgrad): what the input gradient's TP reduction waits for, router dgrad)."""
        d, T, H, g, Fl, b = self.d, self.T, self.d.hidden, self.d.g, self.Fl, self.d.b
        E, k = d.n_experts, d.top_k
        me = cdiv(T * k, E)
        upb = self.moe_permute("moe_unpermute.bwd", T * k, first_dep, "bwd", "")
        dg, wg = self.bwd_gemm("expert_fc2", me, H, Fl, (upb,), "experts", E)
        wgrads.append(wg)
        ab = self.compute("act.bwd", MemShape((2 * g + 1) * me * E * Fl * b, 8 * g * me * E * Fl,
                                              self.act_parts(me * E * Fl, Fl, True)), (dg,), "bwd", "act")
        iag = self.tp_gather("mlp_in.bwd", ab, "bwd")
        dg, wg = self.bwd_gemm("expert_fc1", me, g * Fl, H, (ab, iag), "experts", E)
        wgrads.append(wg)
        pmb = self.moe_permute("moe_permute.bwd", T * k, (dg,), "bwd", "")
        return (pmb, dg), self.router_backward((pmb,), wgrads)

    def router_backward(self, deps, wgrads: list[str]) -> str:
        """The top-k softmax's backward, then the router GEMM's dgrad and wgrad; returns the dgrad."""
        d, E = self.d, self.d.n_experts
        el = self.Tsp * E
        tb = self.compute("router_topk.bwd", MemShape(3 * el * 4, 2 * el, (("cross_entropy.bwd", el, E),)), deps,
                          "bwd", "router")
        ab = self.compute("router_aux.bwd", MemShape(3 * el * 4, 2 * el, (("cross_entropy.bwd", el, E),)), (), "bwd",
                          "router")
        dg, wg = self.bwd_gemm("router", self.Tsp, E, d.hidden, (tb, ab), "router")
        wgrads.append(wg)
        return dg

    def ep_experts_backward(self, start: str, fsdp_b: str | None, wgrads: list[str]) -> str:
        """MoE with ep > 1: unpermute, combine, (chunk sort), experts, (chunk sort), dispatch, permute and router
        backward; returns the op the norm waits for."""
        d, H, g, F, b, s = self.d, self.d.hidden, self.d.g, self.F, self.d.b, self.s
        el, me, a2a = self.moe_ep_sizes()
        rows = cdiv(self.T, d.tp) * d.top_k
        upb = self.moe_permute("moe_unpermute.bwd", rows, (start, fsdp_b), "bwd", "")
        cb = self.a2a("ep_combine.bwd", a2a, (upb,), "bwd", "ep_combine")
        srt = self.moe_permute("moe_unsort.bwd", me * el, (cb,), "bwd", "") if s.moe_chunks else None
        dg, wg = self.bwd_gemm("expert_fc2", me, H, F, (cb, srt), "experts", el)
        wgrads.append(wg)
        ab = self.compute("act.bwd", MemShape((2 * g + 1) * me * el * F * b, 8 * g * me * el * F,
                                              self.act_parts(me * el * F, F, True)), (dg,), "bwd",
                          "act")
        dg, wg = self.bwd_gemm("expert_fc1", me, g * F, H, (ab,), "experts", el)
        wgrads.append(wg)
        srt2 = self.moe_permute("moe_sort.bwd", me * el, (dg,), "bwd", "") if s.moe_chunks else None
        dsp = self.a2a("ep_dispatch.bwd", a2a, (dg, srt2), "bwd", "ep_dispatch")
        pmb = self.moe_permute("moe_permute.bwd", rows, (dsp,), "bwd", "")
        dg = self.router_backward((pmb,), wgrads)
        if s.tp and not s.sp:
            return self.add("moe_in.ag.bwd", CollShape("all_gather", self.act_bytes, d.tp, "tp", self.tp_blk), (dsp,),
                            "bwd", _L, "tp", self.mb, "tp_ag")
        return dg

    # ---- gradients and optimizer ----

    def grad_kind(self) -> str:
        """DP gradient reduction: reduce-scatter with a sharded optimizer (ZeRO-1), else all-reduce."""
        return "reduce_scatter" if self.s.zero1 else "all_reduce"

    def layer_grad_params(self):
        """The parameters of one layer whose gradients this rank accumulates (FSDP: its shard; FSDP once per step:
        the unsharded gradients, which FSDP2 accumulates until the last micro-batch's reduce-scatter)."""
        w = self.w
        return w.layer / self.dp_ranks if self.fsdp and not self.s.fsdp_step else w.layer

    def pipeline_sends(self, ph: str, dep: str) -> str:
        """The stage's exchanges with its neighbours in one phase (fwd: activations, bwd: gradients) per micro-batch, by
        Structure.pp_engine (parallel.PP_ENGINES): the transfers, a meta tensor before each, TP all-gathers after."""
        d, s = self.d, self.s
        turns, share, meta, gathers = PP_ENGINES[s.pp_engine][ph]
        n = self.mb * d.vpp
        part = self.pp_bytes // d.tp if share == "tp" and s.tp else self.pp_bytes
        last = self.add(f"pp.{ph}", CollShape("send_recv", part, 2, "pp", self.pp_blk), (dep,), ph, "micro", "pp",
                        n * turns, f"pp_{ph}")
        if meta and s.tp:  # PartitionedTensor.to_meta(): ndims, sizes, parts, rank, offsets as int64
            size = 8 * (1 + 3 + 2 + d.tp + 1)
            last = self.add(f"pp.{ph}.meta", CollShape("send_recv", size, 2, "pp", self.pp_blk), (last,), ph, "micro",
                            "pp", n * turns, f"pp_{ph}")
        if gathers and s.tp:  # PartitionedTensor.full(): the whole tensor gathered over the TP group
            last = self.add(f"pp.{ph}.gather", CollShape("all_gather", self.pp_bytes, d.tp, "tp", self.tp_blk),
                            (last,), ph, "micro", "tp", n * gathers, f"pp_{ph}")
            # around it: torch.zeros of the flat buffer (a write), the list all_gather of torch's ProcessGroupNCCL
            # (1.x: outputTensors[i][j].copy_(outputFlattened[i][j]) after the collective) copying the flat output
            # into the views, and .clone() of the result (a read and a write each)
            el = self.pp_bytes / d.b
            last = self.add(f"pp.{ph}.gather_copies", MemShape(5 * el * d.b, 0, (("copy", 2.5 * el, 1),)), (last,), ph,
                            "micro", "compute", n * gathers, "glue")
        return last

    def grad_accumulation(self, name: str, params, deps, scope: str) -> str | None:
        """AccumulateGrad's in-place adds of `params` gradients (Structure.grad_acc; none: None): per micro-batch,
        the share (m - 1) / m of micro-batches that add ("micro") or every one ("every"). Elements in 2-byte units
        (the measured add's itemsize): fp32 gradients (FSDP shards; grad dtype) count twice."""
        s, d = self.s, self.d
        if s.grad_acc == "none" or s.phase != "train":
            return None
        share = 1 if s.grad_acc == "every" else (self.mb - 1) / self.mb
        el = params * share * (d.gb / 2)
        return self.compute(name, MemShape(3 * el * 2, el, (("residual_add", el, d.hidden),)), deps, "bwd", "glue",
                            scope)

    def flat_grad_cat(self, name: str, deps) -> str | None:
        """FSDP1's concatenation of one unit's unsharded parameter gradients into its flat gradient (FLAT_PARAM_GRADS):
        read and write the layer's gradients in the parameter dtype, per micro-batch; None without it."""
        if not self.s.flat_param_grads:
            return None
        el = self.w.layer
        return self.compute(name, MemShape(2 * el * self.d.b, 0, (("copy", el, 1),)), deps, "bwd",
                            "fsdp_grad_cat", _L)

    def layer_grad_reductions(self, wg_t: tuple[str, ...]) -> list[str]:
        """Gradient reduction of one layer's bucket (FSDP reduce-scatter, or DP and expert-DP reductions)."""
        d, s, w, gb = self.d, self.s, self.w, self.d.gb
        self.layer_grads = wg_t
        out: list[str] = []
        if s.fsdp:
            if s.dp and not s.fsdp_step:  # fsdp_step: one reduce-scatter of the stage after the last backward
                out.append(self.add("layer.fsdp_rs", CollShape("reduce_scatter", w.layer * gb, self.dp_ranks, "dp", self.dp_blk),
                                    wg_t, "bwd", _L, "dp", self.mb, "fsdp_rs"))
            return out
        if s.dp:
            out.append(self.add("layer.dp_grad", CollShape(self.grad_kind(), (w.dense if s.ep else w.layer) * gb, self.dp_ranks,
                                                           "dp", self.dp_blk), wg_t, "bwd", _L, "dp", 1, "dp_grad"))
        if s.ep and s.edp:
            out.append(self.add("layer.dp_grad_experts", CollShape(self.grad_kind(), w.experts * gb, w.edp, "dp",
                                                                   d.tp * d.dp), wg_t, "bwd", _L, "dp", 1, "dp_grad"))
        return out

    def embedding_backward_and_optimizer(self, n1b: str, hd_wg: str, reductions: list[str]) -> None:
        """Embedding backward, the embeddings' gradient reduction, the optimizer and ZeRO-1's parameter gather."""
        d, s, w, b, gb = self.d, self.s, self.w, self.d.b, self.d.gb
        egag = self.tp_gather("embed.bwd", n1b, "bwd", "micro")
        eb = self.compute("embed.bwd", MemShape(2 * self.T * d.hidden * b + w.emb * 4), (egag or n1b,), "bwd",
                          "embed", "micro")
        sharded_acc = self.fsdp and not s.fsdp_step
        acc = self.grad_accumulation("embed.grad_acc", w.emb_params / (self.dp_ranks if sharded_acc else 1),
                                     (eb, hd_wg), "micro")
        reduce_deps = (eb, hd_wg, acc)
        if s.dp:
            if s.fsdp and s.fsdp_step:
                # torch.distributed.pipelining (stage.py backward_maybe_with_nosync / perform_reduce_grad) runs FSDP's
                # post_backward for the whole stage after its last micro-batch's backward: every block's gradients
                # are reduce-scattered then, not behind the backward's compute (a serial, once-per-step op sized
                # for the stage's layers; FSDP2 issues one reduce-scatter per block, priced here as one)
                reductions.append(self.add("stage.fsdp_rs", CollShape("reduce_scatter", self.stage_layers * w.layer * gb,
                                                                      self.dp_ranks, "dp", self.dp_blk),
                                           self.layer_grads or (n1b,), "bwd", "step", "dp", 1, "fsdp_rs"))
                reductions.append(self.add("embed.fsdp_rs", CollShape("reduce_scatter", w.emb_params * gb, self.dp_ranks, "dp",
                                                                       self.dp_blk), reduce_deps, "bwd", "step",
                                           "dp", 1, "fsdp_rs"))
            elif s.fsdp:
                reductions.append(self.add("embed.fsdp_rs", CollShape("reduce_scatter", w.emb_params * gb, self.dp_ranks, "dp",
                                                                       self.dp_blk), reduce_deps, "bwd", "micro",
                                           "dp", self.mb, "fsdp_rs"))
            else:
                reductions.append(self.add("embed.dp_grad", CollShape(self.grad_kind(), w.emb_params * gb, self.dp_ranks, "dp",
                                                                      self.dp_blk), reduce_deps, "bwd", "step", "dp",
                                           1, "dp_grad"))
        sharded = s.fsdp or s.zero1
        shard = self.dp_ranks if sharded else 1
        if s.ep:
            opt_params = (self.stage_layers * (w.dense / shard + w.experts / (w.edp if sharded and s.dp else 1))
                          + w.emb_params / shard)
        else:
            opt_params = (self.stage_layers * w.layer + w.emb_params) / shard
        opt = self.add("optimizer", MemShape(ADAM_BYTES_PER_PARAM * opt_params, ADAM_FLOPS_PER_PARAM * opt_params,
                                             (("adamw", opt_params, 1),)),
                       tuple(reductions) or (eb,), "opt", "step", "compute", 1, "optimizer")
        if s.zero1 and s.dp and not s.fsdp:
            self.add("dp_param_ag", CollShape("all_gather", (self.stage_layers * w.layer + w.emb_params) * b, self.dp_ranks,
                                              "dp", self.dp_blk), (opt,), "opt", "step", "dp", 1, "dp_param_ag")


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
