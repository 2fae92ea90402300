"""The operator vocabulary shared by every layer: GEMMs, attention, memory-bound ops, collectives."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from c3kit.errors import WorkloadError
from c3kit.hw.model import dtype_bytes

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
GROUPS = ("tp", "dp", "ep", "pp", "cp")


# The formulas below take Python numbers or numpy arrays (the vectorized sweep evaluates them over many
# scenarios at once); the op classes call them on their fields.

def _as_float(e):
    return float(e) if isinstance(e, int) else np.asarray(e, dtype=float)


def gemm_flops(m, n, k, batch=1):
    """FLOPs of a (batched) GEMM: 2 per multiply-add."""
    return 2.0 * m * n * k * batch


def gemm_bytes(m, n, k, elem_bytes, batch=1):
    """Fewest bytes a (batched) GEMM moves: each input read once, the output written once."""
    return _as_float(m * k + k * n + m * n) * elem_bytes * batch


def attention_flops(batch, heads, q_len, kv_len, head_dim, causal=True, backward=False, balanced=False):
    """FLOPs of QK^T and PV: x0.5 when causal and q_len == kv_len, or when the queries are load-balanced
    causal chunks of the kv sequence (context parallelism); backward is 2.5x forward."""
    f = 4.0 * batch * heads * q_len * kv_len * head_dim
    if causal:
        half = balanced or (q_len == kv_len)
        f = f * (0.5 if half else 1.0) if isinstance(half, (bool, np.bool_)) else f * np.where(half, 0.5, 1.0)
    return f * (2.5 if backward else 1.0)


def attention_bytes(batch, heads, kv_heads, q_len, kv_len, head_dim, elem_bytes, backward=False):
    """Bytes of Q, K, V and O (read and written once, flash-attention style; backward twice)."""
    q_o = 2 * batch * heads * q_len * head_dim
    kv = 2 * batch * kv_heads * kv_len * head_dim
    return _as_float(q_o + kv) * elem_bytes * (2.0 if backward else 1.0)


@dataclass(frozen=True)
class Gemm:
    """C[m, n] = A[m, k] @ B[k, n], `batch` independent products (grouped / batched GEMM)."""

    name: str
    m: int
    n: int
    k: int
    dtype: str = "bf16"
    batch: int = 1

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k, self.batch) <= 0:
            raise WorkloadError(f"GEMM {self.name}: M, N, K and batch must be positive, got "
                                f"{self.m}x{self.n}x{self.k} x{self.batch}")

    @property
    def flops(self) -> float:
        """Floating-point operations (2 per multiply-add)."""
        return gemm_flops(self.m, self.n, self.k, self.batch)

    @property
    def bytes(self) -> float:
        """Fewest bytes moved: each input read once, the output written once."""
        return gemm_bytes(self.m, self.n, self.k, dtype_bytes(self.dtype), self.batch)


@dataclass(frozen=True)
class Attention:
    """Scaled dot-product attention core (QK^T, softmax, PV) for `batch` sequences, fused (flash) style."""

    name: str
    batch: int
    heads: int  # query heads on this GPU
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    dtype: str = "bf16"
    causal: bool = True
    backward: bool = False
    balanced: bool = False  # context parallelism: q_len is load-balanced causal chunks of kv_len
    backend: str = ""  # workload.attention.BACKENDS; "" = the default of the GPU it runs on
    dropout: bool = False  # attention dropout (its own kernel when unfused)

    def __post_init__(self) -> None:
        if min(self.batch, self.heads, self.kv_heads, self.q_len, self.kv_len, self.head_dim) <= 0:
            raise WorkloadError(f"attention {self.name}: all sizes must be positive")
        from c3kit.workload.attention import check_backend

        check_backend(self.backend)

    @property
    def flops(self) -> float:
        """FLOPs of QK^T and PV (x0.5 when causal and q_len == kv_len or balanced; backward is 2.5x forward)."""
        return attention_flops(self.batch, self.heads, self.q_len, self.kv_len, self.head_dim, self.causal,
                               self.backward, self.balanced)

    @property
    def bytes(self) -> float:
        """Bytes of Q, K, V and O (read and written once, flash-attention style)."""
        return attention_bytes(self.batch, self.heads, self.kv_heads, self.q_len, self.kv_len, self.head_dim,
                               dtype_bytes(self.dtype), self.backward)


@dataclass(frozen=True)
class MemOp:
    """A memory-bound op (norm, activation, softmax, residual add, optimizer update): bytes moved and FLOPs.

    parts names the measured kernels it runs, each (kind of workload.memops.MEMOP_KINDS, elements, row
    width); a GPU with a calibrated memory class prices it as the sum of its parts, any other GPU (or
    parts = ()) by bytes and FLOPs on the roofline.
    """

    name: str
    bytes: float
    flops: float = 0.0
    parts: tuple = ()

    def __post_init__(self) -> None:
        if self.bytes < 0 or self.flops < 0:
            raise WorkloadError(f"memory op {self.name}: bytes and FLOPs must be non-negative")


@dataclass(frozen=True)
class Collective:
    """A collective over `ranks` GPUs. bytes = S of nccl-tests: the full (output) array size per rank.

    all_reduce / all_to_all: S is the buffer each rank holds; all_gather: the gathered output;
    reduce_scatter: the unreduced input; send_recv: the message.
    `span` is "intra" (inside one node's scale-up fabric) or "inter" (crosses nodes).
    `per_node` (inter only): ranks of the group inside one node (e.g. 1 for a DP group strided over
    TP-8 nodes, 8 for DP 16 on two nodes without TP); 0 = unknown, which cost/ treats as 1.
    """

    name: str
    kind: str
    bytes: float
    ranks: int
    group: str = "tp"
    span: str = "intra"
    per_node: int = 0

    def __post_init__(self) -> None:
        if self.per_node < 0 or (self.per_node and self.ranks % self.per_node):
            raise WorkloadError(f"collective {self.name}: per_node must be 0 or divide ranks ({self.ranks}), "
                                f"got {self.per_node}")
        if self.kind not in COLLECTIVES:
            raise WorkloadError(f"unknown collective {self.kind!r}: use one of {', '.join(COLLECTIVES)}")
        if self.group not in GROUPS:
            raise WorkloadError(f"unknown group {self.group!r}: use one of {', '.join(GROUPS)}")
        if self.span not in ("intra", "inter"):
            raise WorkloadError(f"span must be 'intra' or 'inter', got {self.span!r}")
        if self.bytes < 0 or self.ranks < 1:
            raise WorkloadError(f"collective {self.name}: bytes must be >= 0 and ranks >= 1")

    @property
    def flops(self) -> float:
        """Collectives do no (counted) arithmetic."""
        return 0.0


Op = Gemm | Attention | MemOp | Collective


def is_comm(op: Op) -> bool:
    """True for communication ops."""
    return isinstance(op, Collective)
