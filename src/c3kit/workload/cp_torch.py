"""torch context parallelism's kernels, per attention call and cp rank (Parallelism.cp_impl "torch").

The one list of what torch.distributed.tensor.experimental's context_parallel runs around each SDPA call, read
from TORCH_CP_CODE (ring attention over SDPA flash, load-balanced head-tail sharding, all-gather rotation of K, V;
dK, dV passed around the ring). Sizes are in elements of the local attention output: E = micro-batch x query heads
x local tokens x head_dim (K and V reach the attention after torchtitan's repeat_kv, so they are E each), and
R = E / head_dim logsumexp rows (fp32). Each kernel is (name, measured memory kind, bytes moved): "residual_add"
(two tensors streamed in, one out) for the subtractions and accumulations, "copy" (one in, one out) for the rest.

Forward on cp rank r (of n), one attention call: K and V made contiguous; step 0 runs SDPA on the local q, k, v
causally and casts its output to fp32; every step i < n - 1 concatenates K, V (torch.cat of the flattened pair) for
the exchange (one all-gather, issued at step 0); step i >= 1 runs SDPA non-causally on (q, first half of the
received k, v) when i <= r, else on (second half of q, whole k, v) and then merges the block into the running output
in fp32 (cast up; lse_b - lse, sigmoid; out - out_b, sigmoid x diff, out - that; lse - lse_b, logsigmoid,
lse - that), a half-size merge re-concatenated into the whole output and lse (_partial_update) when i > r; the
merged output is cast back to bf16 at the end.
Backward: fp32 zero buffers for dQ, dK, dV; K, V contiguous; K, V concatenated and all-gathered as in forward; per
step the SDPA backward on the same shapes (the second-half lse chunk made contiguous when i > r); dK, dV of step 0
added in fp32; at i >= 1 the fp32 dK, dV received from the previous rank, the step's dK, dV added into their first
half and re-concatenated when i <= r (else added whole); every step concatenates dK, dV (fp32) and passes them to
the next rank (all-to-all permute), and adds dQ in fp32 (into its second half and re-concatenated when i > r); at
the end dQ is cast down and the dK, dV received after the last step (waited for right after the loop) cast down.
"""

from __future__ import annotations

TORCH_CP_CODE = ("https://github.com/pytorch/pytorch/blob/v2.6.0/torch/distributed/tensor/experimental/_attention.py "
                 "(release v2.6.0, git 2236df1770800ffea5697b11b0bb0d910b2e59e1, branched from main in December "
                 "2024; the runs' nightly is 1963fc83a1c32e162162e2414f78b043f0674bae of 2024-12-23): "
                 "_templated_ring_attention, _SDPAMerger, _templated_ring_attention_backward, _partial_update; "
                 "_ContextParallelOptions convert_to_f32 True, enable_load_balance True, rotate_method ALL_GATHER "
                 "(set_rotate_method's default, pytorch/pytorch#142093); the backward's dK, dV rotater ALL_TO_ALL")

BF16, FP32 = 2, 4


def sdpa_calls(cp: int, rank: int) -> tuple[tuple[float, float, bool], ...]:
    """The SDPA calls of one attention call (forward and backward alike) on cp rank `rank`: (q_len, kv_len as
    fractions of the local length, causal), step 0 first."""
    return ((1.0, 1.0, True),) + tuple((1.0, 0.5, False) if i <= rank else (0.5, 1.0, False) for i in range(1, cp))


def _copy(name, nbytes):
    return (name, "copy", nbytes)


def _binary(name, nbytes):
    return (name, "residual_add", nbytes)


def _merge(n, rows):
    """The fp32 merge of one step's block output (n elements, rows lse rows) into the running one."""
    return (_copy("out_b.float", (BF16 + FP32) * n),
            _binary("lse_b-lse", 3 * FP32 * rows), _copy("sigmoid", 2 * FP32 * rows),
            _binary("out-out_b", 3 * FP32 * n), _copy("sigmoid*diff", 2 * FP32 * n + FP32 * rows),  # one factor a row
            _binary("out-that", 3 * FP32 * n),
            _binary("lse-lse_b", 3 * FP32 * rows), _copy("logsigmoid", 2 * FP32 * rows),
            _binary("lse-that", 3 * FP32 * rows))


def forward_kernels(cp: int, rank: int, out, rows) -> tuple[tuple[str, str, object], ...]:
    """Every memory-bound kernel of one forward attention call on cp rank `rank` (out: E, rows: R)."""
    ks = [_copy("k.contiguous", 2 * BF16 * out), _copy("v.contiguous", 2 * BF16 * out),
          _copy("out0.float", (BF16 + FP32) * out)]
    for i in range(cp):
        if i < cp - 1:
            ks.append(_copy("kv.cat", 2 * 2 * BF16 * out))
        if i == 0:
            continue
        if i <= rank:
            ks += _merge(out, rows)
        else:
            ks += _merge(out / 2, rows / 2)
            ks += (_copy("lse.cat", 2 * FP32 * rows), _copy("out.cat", 2 * FP32 * out))
    ks.append(_copy("out.to_bf16", (FP32 + BF16) * out))
    return tuple(ks)


def backward_kernels(cp: int, rank: int, out, rows) -> tuple[tuple[str, str, object], ...]:
    """Every memory-bound kernel of one backward attention call on cp rank `rank` (out: E, rows: R)."""
    add = (FP32 + BF16 + FP32)  # an fp32 accumulator += a bf16 gradient, per element
    ks = [_copy("dq.zeros", FP32 * out), _copy("dk.zeros", FP32 * out), _copy("dv.zeros", FP32 * out),
          _copy("k.contiguous", 2 * BF16 * out), _copy("v.contiguous", 2 * BF16 * out)]
    for i in range(cp):
        if i < cp - 1:
            ks.append(_copy("kv.cat", 2 * 2 * BF16 * out))
        if i > rank:
            ks.append(_copy("lse.contiguous", FP32 * rows))  # the half chunk: read and write R / 2
        if i == 0:
            ks += (_binary("dk+=", add * out), _binary("dv+=", add * out))
        elif i <= rank:
            for t in ("dk", "dv"):
                ks += (_binary(t + "[:half]+=", add * out / 2), _copy(t + ".cat", 2 * FP32 * out))
        else:
            ks += (_binary("dk+=", add * out), _binary("dv+=", add * out))
        ks.append(_copy("dkv.cat", 2 * 2 * FP32 * out))
        if i <= rank:
            ks.append(_binary("dq+=", add * out))
        else:
            ks += (_binary("dq[half:]+=", add * out / 2), _copy("dq.cat", 2 * FP32 * out))
    ks += (_copy("dq.to_bf16", (FP32 + BF16) * out), _copy("dkv.to_bf16", 2 * (FP32 + BF16) * out))
    return tuple(ks)


def kernels(cp: int, rank: int, out, rows, backward: bool):
    """forward_kernels or backward_kernels."""
    return (backward_kernels if backward else forward_kernels)(cp, rank, out, rows)


def busiest_rank(cp: int, backward: bool) -> int:
    """The cp rank whose merges, accumulations and copies move the most bytes (the last: each of its steps merges
    the whole local output; the lse rows, a head_dim-th of it, do not change the order)."""
    return max(range(cp), key=lambda r: (sum(k[2] for k in kernels(cp, r, 1.0, 0.0, backward)), r))


def kv_bytes(out) -> float:
    """Bytes of one rank's K and V as the attention takes them (bf16, every query head)."""
    return 2 * BF16 * out


def dkv_bytes(out) -> float:
    """Bytes of one rank's dK and dV as they travel the backward ring (fp32)."""
    return 2 * FP32 * out
