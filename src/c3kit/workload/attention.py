"""Attention backends: which kernel runs a layer's attention core, and the kernels of the unfused one.

A backend is a workload feature (the framework and its version decide it, not the GPU alone):
- "cudnn": cuDNN fused attention (PyTorch SDPA's CUDNN_ATTENTION; Transformer Engine's FusedAttention);
- "flash2": FlashAttention-2 (PyTorch SDPA's FLASH_ATTENTION; the flash-attn package);
- "flash1": FlashAttention (v1) and kernels of its class: the flash-attn 1.x CUDA kernel and flash-attention's
  Triton kernel (flash_attn_triton.py, which llm-foundry vendored as attn_impl triton);
- "efficient": the memory-efficient (xFormers / CUTLASS) kernel, SDPA's EFFICIENT_ATTENTION;
- "unfused": attention as separate kernels, the way Megatron-LM ran it before fused attention existed:
  a batched GEMM for Q K^T, a fused scale-mask-softmax, dropout, a batched GEMM for P V (and their
  backward), over the full q_len x kv_len score matrix (no causal skip).
"" means the default of the GPU it runs on (cost/attention.py: what current PyTorch picks there).

`unfused_parts` is the one place that lists the unfused kernels and their sizes.
"""

from __future__ import annotations

from c3kit.errors import WorkloadError

BACKENDS = ("cudnn", "flash2", "flash1", "efficient", "unfused")
UNFUSED_GEMM = "unfused.bmm"  # the name of unfused attention's batched GEMMs (torch.bmm, not a grouped GEMM)


def check_backend(name: str) -> str:
    """The backend name itself, or a WorkloadError naming the choices ("" = the GPU's default)."""
    if name != "" and name not in BACKENDS:
        raise WorkloadError(f"unknown attention backend {name!r}: use one of {', '.join(BACKENDS)}")
    return name


def unfused_parts(batch, heads, q_len, kv_len, head_dim, backward: bool, dropout: bool):
    """(batched GEMMs, memory-bound kernels) of unfused attention, ints or arrays.

    GEMMs are (groups, m, n, k): one product per (sequence, head). Memory-bound kernels are
    (kind of workload.memops.MEMOP_KINDS, elements, row width) over the score matrix.
    Forward: S = Q K^T, P = dropout(softmax(mask(S * scale))), O = P V.
    Backward: dV = P^T dO, dP = dO V^T, dropout and softmax backward, dQ = dS K, dK = dS^T Q.
    """
    g = batch * heads
    scores = g * q_len * kv_len
    if not backward:
        gemms = ((g, q_len, kv_len, head_dim), (g, q_len, head_dim, kv_len))
        mems = (("softmax", scores, kv_len),) + ((("dropout", scores, kv_len),) if dropout else ())
        return gemms, mems
    gemms = ((g, kv_len, head_dim, q_len), (g, q_len, kv_len, head_dim),
             (g, q_len, head_dim, kv_len), (g, kv_len, head_dim, q_len))
    mems = ((("dropout.bwd", scores, kv_len),) if dropout else ()) + (("softmax.bwd", scores, kv_len),)
    return gemms, mems
