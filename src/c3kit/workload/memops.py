"""Memory-bound op kinds: the one accounting of the bytes each moves, shared by the layer description
(which builds MemOps from it) and the op benchmark (which labels its measured rows with it), so a
calibrated time per byte means the same thing on both sides.

traffic = bytes moved per element of the op's main T x W operand, in units of that operand's element
size: e.g. an RMSNorm forward reads x and writes y (2), its backward reads x and dy and writes dx (3).
The weight vectors (W elements) are negligible next to T x W and are not counted.
"""

from __future__ import annotations

from c3kit.errors import WorkloadError

# kind: (traffic per element, FLOPs per element). Forward and backward are separate kinds.
MEMOP_KINDS: dict[str, tuple[float, float]] = {
    "rmsnorm": (2.0, 4.0),
    "rmsnorm.bwd": (3.0, 8.0),
    "layernorm": (2.0, 5.0),
    "layernorm.bwd": (3.0, 8.0),
    "residual_add": (3.0, 1.0),  # x + r: read two, write one
    "swiglu": (3.0, 6.0),  # silu(g) * u over the F-wide half: read g, u, write h
    "swiglu.bwd": (5.0, 10.0),  # read g, u, dh; write dg, du
    # the same over the strided halves of one gate+up GEMM output (h.chunk(2, -1)), as eager code with one fused
    # projection runs it: PyTorch's elementwise kernels take their non-vectorized path on such views
    "swiglu_chunked": (3.0, 6.0),
    "swiglu_chunked.bwd": (5.0, 10.0),
    "gelu": (2.0, 8.0),
    "gelu.bwd": (3.0, 10.0),
    "rope": (2.0, 3.0),  # q or k: read, write (cos / sin tables are small)
    "rope.bwd": (2.0, 3.0),
    "cross_entropy": (1.0, 5.0),  # over T x V logits: read once (fp32 upcast counted in the kernel's time)
    "cross_entropy.bwd": (3.0, 2.0),  # read logits and write dlogits (+ the softmax pass)
    "embedding": (2.0, 0.0),  # T x W gathered rows read and written
    "copy": (2.0, 0.0),  # a plain copy (layout change)
    "index_copy": (2.0, 0.0),  # one token's K or V rows scattered into the KV cache (index_copy_): read, write
    "argmax": (1.0, 1.0),  # greedy sampling over rows x vocab logits: read once (one index per row written)
    # unfused attention (workload.attention.unfused_parts), over the q_len x kv_len score matrix:
    "softmax": (2.0, 5.0),  # fused scale-mask-softmax: read scores, write probabilities
    "softmax.bwd": (3.0, 4.0),  # read probabilities and their gradient, write the scores' gradient
    "dropout": (2.5, 1.0),  # read, write, and write a one-byte keep mask (half a 2-byte element)
    "dropout.bwd": (2.5, 1.0),  # read the gradient and the mask, write
    # written out in fp32 eager PyTorch (torchtitan's `rmsnorm`, the Llama reference code); traffic in units of
    # the bf16 operand: forward = cast up (1 + 2), square (2 + 2), mean (2), scale (2 + 2), cast down (2 + 1),
    # weight (1 + 1) = 18; backward = the autograd of those ops, about 40 (each pass reads and writes fp32)
    "rmsnorm_eager": (18.0, 6.0),
    "rmsnorm_eager.bwd": (40.0, 12.0),
    # RoPE as a complex multiply in fp32: cast up (1 + 2), complex multiply (2 + 2), cast down (2 + 1) = 10
    "rope_complex": (10.0, 6.0),
    "rope_complex.bwd": (10.0, 6.0),
    # the same kernels as a model's forward runs them: the weights of the whole model stream through L2 between two
    # uses of a norm's weight vector and of the residual it adds, so their rows are timed after a weight stream that
    # empties L2 (runtime/bench/ops_decode.py, decode_cold); same bytes, colder operands
    "rmsnorm_cold": (2.0, 4.0),
    "residual_add_cold": (3.0, 1.0),
    # RoPE on the q / k the QKV GEMM just wrote (cos / sin tables cold) and SwiGLU on the gate / up halves the
    # gate+up GEMM just wrote, timed right after the weight stream that wrote them (decode_fresh)
    "rope_cold": (2.0, 3.0),
    "swiglu_chunked_cold": (3.0, 6.0),
    # fused AdamW step per parameter: workload.layer.ADAM_BYTES_PER_PARAM (30 B) in 2-byte units
    "adamw": (15.0, 6.0),
}


# the kind a forward pass runs for each small kernel that follows a weight stream: a norm's weight, RoPE's cos / sin
# tables and the residual stream were last touched a whole layer's weights ago (cold in L2), while the activation
# just written by the GEMM before it stays in L2. Each is priced from rows timed in that situation: the norm and
# the residual add on contiguous rows with their weight / residual cold (decode_cold), RoPE and SwiGLU on the
# strided views of the output the stream just wrote (decode_fresh). The KV write (index_copy) runs no slower
# there and keeps its warm rows. cost.opclass prices each as its warm kernel plus the extra measured up to 1024
# rows (fit_after_stream); above that the extra is inside the stream's noise and nothing is added.
COLD_KINDS = {"rmsnorm": "rmsnorm_cold", "residual_add": "residual_add_cold", "rope": "rope_cold",
              "swiglu_chunked": "swiglu_chunked_cold"}


def memop_traffic(kind: str, elements: float, itemsize: float) -> tuple[float, float]:
    """(bytes, FLOPs) of a memory-bound op of this kind over `elements` elements of `itemsize` bytes."""
    hit = MEMOP_KINDS.get(kind)
    if hit is None:
        raise WorkloadError(f"unknown memory-bound op kind {kind!r}: use one of {', '.join(MEMOP_KINDS)}")
    return hit[0] * elements * itemsize, hit[1] * elements
