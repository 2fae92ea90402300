"""The operator graph of one training or inference step, compact: one layer's nodes with a repeat count.

Multiplicity rule: a node runs `count * (layers_per_stage if scope == "layer" else 1)` times per
step on each GPU (StepGraph.repeats). Layer nodes of fwd/bwd carry count = micro_batches; the DP
gradient all-reduce of a layer bucket carries count = 1 (once per step). Dependencies between two
layer nodes refer to the same layer instance; layer instance i + 1 starts (in fwd) after instance
i's last fwd node and (in bwd) after its last bwd compute node; a dependency from a layer node to a
step node (or back) means the first (or last) layer instance. The ops and their shapes come from
c3kit.workload.layer (the one description of a layer); see docs/workload.md for the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from c3kit.workload.layer import (ADAM_BYTES_PER_PARAM, ADAM_FLOPS_PER_PARAM, PHASES, AttnShape, GemmShape, MemShape,
                                  OpSpec, describe, intra, op_dtype)
from c3kit.workload.model import ModelConfig
from c3kit.workload.ops import Attention, Collective, Gemm, MemOp, Op
from c3kit.workload.parallel import Parallelism

NODE_PHASES = ("fwd", "bwd", "opt")
SCOPES = ("layer", "step", "micro")
STREAMS = ("compute", "tp", "dp", "ep", "pp", "cp")
# Roles (Node.role). Recomputed forward nodes (recompute="full"/"selective") carry "re_" + role.
ROLES = ("embed", "norm", "qkv", "rope", "attn", "proj", "fc1", "act", "fc2", "router", "permute", "experts", "lm_head",
         "sample",
         "loss", "kv_cache", "optimizer", "glue", "tp_ar", "tp_rs", "tp_ag", "loss_ar", "ep_dispatch",
         "ep_combine", "moe_counts", "dp_grad", "dp_param_ag", "fsdp_ag", "fsdp_rs", "pp_fwd", "pp_bwd", "cp_kv")

__all__ = ["ADAM_BYTES_PER_PARAM", "ADAM_FLOPS_PER_PARAM", "NODE_PHASES", "PHASES", "ROLES", "SCOPES", "STREAMS",
           "Node", "StepGraph", "build_step", "span_of"]


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
    return "intra" if intra(block, gpus_per_node) else "inter"


def build_step(model: ModelConfig, par: Parallelism, phase: str = "train", seq: int | None = None,
               dtype: str = "bf16", gpus_per_node: int = 8, grad_dtype: str = "fp32",
               attn_backend: str = "", norm_rope: str = "fused", glue: str = "split", grad_acc: str = "",
               train_metrics: int = 0, flat_param_grads: bool = False, loss_kernel: str = "eager",
               bias_grads: bool = False, metrics_fp32: bool = True) -> StepGraph:
    """The operator graph of one step (phase "train", "prefill" or "decode"; decode: KV cache of length seq;
    attn_backend: the attention kernel, workload.attention.BACKENDS, "" = the GPU's default; norm_rope: how
    RMSNorm and RoPE run, workload.layer.NORM_ROPE; glue: the backward's memory-bound glue, workload.layer.GLUE;
    grad_acc: how gradients accumulate into .grad, workload.layer.GRAD_ACC ("" = from glue and micro-batches);
    train_metrics: cross-entropy passes per micro-batch for training metrics, workload.layer.check_train_metrics;
    flat_param_grads: FSDP1's per-unit gradient concatenation, workload.layer.FLAT_PARAM_GRADS; loss_kernel: the
    training loss's cross-entropy kernels, workload.layer.LOSS_KERNELS; bias_grads: the biased linears' bias-gradient
    reductions, workload.layer.BIAS_GRADS; metrics_fp32 False: the training metrics' cross-entropy on the bf16 logits,
    workload.layer.METRICS_BF16)."""
    if seq is None:
        seq = model.max_seq
    return _build(model, par, phase, seq, dtype, gpus_per_node, grad_dtype, attn_backend, norm_rope, glue, grad_acc,
                  train_metrics, bool(flat_param_grads), loss_kernel, bool(bias_grads), bool(metrics_fp32))


def _to_op(spec: OpSpec, dtype: str, gpn: int, phase: str = "train") -> Op:
    """The workload op of one description entry (ints), in the dtype it runs in (layer.op_dtype)."""
    sh = spec.shape
    dtype = op_dtype(spec, dtype, phase)
    if isinstance(sh, GemmShape):
        return Gemm(spec.name, sh.m, sh.n, sh.k, dtype, sh.batch)
    if isinstance(sh, AttnShape):
        return Attention(spec.name, sh.batch, sh.heads, sh.kv_heads, sh.q_len, sh.kv_len, sh.head_dim, dtype,
                         sh.causal, sh.backward, sh.balanced, sh.backend, sh.dropout)
    if isinstance(sh, MemShape):
        return MemOp(spec.name, sh.bytes, sh.flops, tuple((k, float(e), int(w)) for k, e, w in sh.parts))
    return Collective(spec.name, sh.kind, sh.bytes, sh.ranks, sh.group, span_of(sh.block, gpn))


@lru_cache(maxsize=4096)
def _build(model: ModelConfig, par: Parallelism, phase: str, seq: int, dtype: str, gpn: int,
           grad_dtype: str, attn_backend: str = "", norm_rope: str = "fused", glue: str = "split",
           grad_acc: str = "", train_metrics: int = 0, flat_param_grads: bool = False,
           loss_kernel: str = "eager", bias_grads: bool = False, metrics_fp32: bool = True) -> StepGraph:
    layer = describe(model, par, phase, seq, dtype, gpn, grad_dtype, attn_backend, norm_rope, glue, grad_acc,
                     train_metrics, flat_param_grads, loss_kernel, bias_grads, metrics_fp32)
    ids = {spec.name: i for i, spec in enumerate(layer.ops)}
    nodes = tuple(Node(i, _to_op(spec, dtype, gpn, phase), tuple(ids[d] for d in spec.deps), spec.phase,
                       spec.scope, spec.stream, spec.count, spec.role, spec.grad) for i, spec in enumerate(layer.ops))
    return StepGraph(model, par, phase, seq, nodes, layer.stage_layers, par.grad_accum, layer.tokens, dtype, gpn)
