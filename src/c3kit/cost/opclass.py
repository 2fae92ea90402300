"""Op classes beyond GEMMs priced from measured rows: memory-bound kinds, attention (training and decode)
and the per-kernel floor, each a small physical model whose few parameters are fitted to op-level
measurements (runtime/bench/ops.py), never to step times.

Every class is t = fixed + sum(coef_i x feature_i) with non-negative coefficients, fitted by relative
least squares (each row weighted by 1 / its time); the features say what the time grows with:
- memory-bound kind k: bytes moved (workload.memops accounting), the row width (a per-row serial
  latency inside normalisation kernels), and the bytes served from HBM instead of L2 (beyond the L2; for the
  elementwise kinds of L2_EDGE_KINDS a smooth edge fitted on CUDA-graph rows, fit_l2_edge); kinds whose
  kernel PyTorch configures from the size add their launch shape (KERNEL_SHAPE_FEATURES: index_copy, embedding,
  argmax, and the norm backward's weight-gradient waves); the norms add their rows (one CTA each) and the bytes
  their second pass over a row reads past L1 (NORM_REREAD_TENSORS, an edge in the row's bytes, fit_row_edge).
- attention forward / backward per backend and head_dim (fused, causal): the causal FLOPs, the query
  rows x head_dim (per-row prologue / epilogue and the diagonal tiles' waste) and the KV rows x
  head_dim. The rows' `backend` column is what SDPA ran (ATTN_BACKEND_OF_ROW maps it to
  workload.attention's names); a backend with too few rows for three features is fitted on its FLOPs
  alone, pooled over head dims when one head dim has fewer than three rows (SPARSE_FIT). A backend timed in CUDA
  graphs too (attn_graph: flash) has those rows in its fit in place of its host-bound eager rows (gpu_time_rows).
- unfused attention per pass (the attn_backends rows "unfused": matmul, scale, causal mask, masked_fill, softmax,
  matmul; forwards in CUDA graphs, backwards eager): the batched GEMMs' FLOPs over the full score matrix, the score
  elements, those from HBM past the memory class's L2 edge, those in rows longer than the persistent softmax kernel
  takes, and the mask bytes re-read from HBM (unfused_features); backward rows of fewer than UNFUSED_BWD_MIN_SCORES
  score elements time autograd's host work and are left out (gpu_time_unfused_rows).
- decode attention (q_len 1): the larger of the KV-cache bytes and an unsplit CTA's serial walk, the query heads
  in the batch, the KV bytes from HBM past a fitted L2 edge, the split's combine and walk, the waves of unsplit
  CTAs (decode_features, fit_decode_shape), per head_dim where that head_dim has enough rows (fit_decode_by_head_dim), else pooled.
- kernel floor: the marginal one-element kernel inside a CUDA graph and launched eagerly.

The measured files are found through the calibration store; a GPU without them (and without a
documented transfer, cost/basis.py) is priced by the roofline with cost/model.py's efficiencies.
Backward memory-bound rows below BWD_MIN_ELEMENTS were timed with autograd's host work exposed and are
left out of the fit; where a backward kind was also timed in CUDA graphs (memory_graph) its eager rows below
EAGER_BWD_HOST_BOUND leave too and the graph rows take their place (gpu_time_memory_rows); the fitted fixed cost
of a backward kind is therefore a GPU-side figure.
"""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from c3kit.errors import CostError
from c3kit.workload.memops import COLD_KINDS

# Kinds without rows of their own, priced with the coefficients of a measured kernel of the same access
# pattern (their own bytes): a row-wise softmax reads and writes each element once around a per-row
# reduction, like RMSNorm; dropout streams elements like a residual add.
MEMORY_PROXY = {"softmax": "rmsnorm", "softmax.bwd": "rmsnorm.bwd", "dropout": "residual_add",
                "dropout.bwd": "residual_add", "swiglu_chunked": "swiglu", "swiglu_chunked.bwd": "swiglu.bwd"}
# Kinds never faster than another kind's kernel over the same elements (the same work through a worse access
# pattern; every measured row of act_chunked agrees: 1.97-2.26x): priced at least at that kind, which keeps the
# fit's extrapolation below its smallest rows (2M elements) from undercutting the contiguous kernel.
AT_LEAST = {"swiglu_chunked": "swiglu", "swiglu_chunked.bwd": "swiglu.bwd"}
# The warm kernel of each kind a forward runs right after a weight stream (workload.memops.COLD_KINDS): priced as
# that kernel plus the stream's measured extra (fit_after_stream), as that kernel alone where none is measured.
WARM_OF = {cold: warm for warm, cold in COLD_KINDS.items()}
HELD_OUT_WIDTH = 5120  # memory-bound rows of this width are held out of the fit (benchmarks/validate_ops.py)
BWD_MIN_ELEMENTS = 2 ** 24  # smaller backward rows are host-bound in the eager autograd timing
EAGER_BWD_HOST_BOUND = 2 ** 26  # eager backward rows below it leave a fit that has CUDA-graph rows of the kind


def _rows(doc: dict) -> list[dict]:
    return [dict(zip(doc["columns"], r)) for r in doc["rows"]]


def fit_nonneg(X: np.ndarray, t: np.ndarray) -> np.ndarray:
    """[fixed, coef_1, ...] >= 0 minimising sum(((fixed + X @ coef) / t - 1)^2) (active-set relative fit)."""
    t = np.asarray(t, dtype=float)
    X = np.asarray(X, dtype=float).reshape(len(t), -1)
    if len(t) < X.shape[1] + 1 or np.any(t <= 0):
        raise CostError(f"fit needs at least {X.shape[1] + 1} rows with positive times, got {len(t)}")
    A = np.column_stack([np.ones(len(t)), X]) / t[:, None]
    active = list(range(A.shape[1]))
    while active:
        c, *_ = np.linalg.lstsq(A[:, active], np.ones(len(t)), rcond=None)
        if np.all(c >= 0):
            out = np.zeros(A.shape[1])
            out[active] = c
            return out
        active.pop(int(np.argmin(c)))
    return np.zeros(A.shape[1])


@dataclass(frozen=True)
class FeatureCost:
    """t = fixed_s + sum(coefs_i x features_i); features as the class's feature function gives them."""

    fixed_s: float
    coefs: tuple[float, ...]
    n_rows: int = 0

    def __call__(self, features):
        """Seconds for a feature matrix (rows x len(coefs)) or one feature vector."""
        f = np.asarray(features, dtype=float)
        return self.fixed_s + f @ np.asarray(self.coefs)

    @property
    def rate(self) -> float:
        """Units of the first feature per second at large sizes (achieved bandwidth or FLOP/s)."""
        return 1.0 / self.coefs[0] if self.coefs and self.coefs[0] > 0 else float("inf")


# The L2 edge of the elementwise kinds (memory_graph rows, call 34): a kernel repeated over the same tensors finds
# them in L2 while the bytes it moves fit there, and streams from HBM once they do not; the rows step between about
# 25 and 50 MB on the 60 MB H200 (residual_add 1024 x 4096: 6.67 TB/s, 2048 x 4096: 4.11 TB/s, 32768 x 4096: 4.39).
# The bytes served from HBM are bytes x a logistic in ln(bytes / (center x L2)) of scale `width` (L2Edge), so the
# price grows smoothly and never drops with size; center and width are fitted on the fit split (fit_l2_edge) over
# these kinds, the other memory kinds keep the hinge at the catalog L2 (bytes beyond it; the copy class's price of
# the profiled qkv.cat moved 20% under an all-or-nothing term fitted at another capacity).
# residual_add and rmsnorm forward take the edge too: a first fit left them out because the edge moved the
# whole-layer check (benchmarks/validate_layers.py fwd median 1.37% -> 1.49%, bias +1.13% -> +1.47%, still within its
# target) on the guess that in a layer they read what the kernel before them just wrote, partly from L2; device call
# 35 (l2_reuse) measured no such gain after a copy that wrote their input, and the whole-layer check scores, it does
# not choose.
L2_EDGE_KINDS = ("gelu", "gelu.bwd", "swiglu", "swiglu.bwd", "rmsnorm.bwd", "layernorm", "layernorm.bwd",
                 "residual_add", "rmsnorm")
L2_EDGE_CENTERS = tuple(float(x) for x in np.round(np.geomspace(0.2, 2.0, 41), 4))  # fractions of the L2 tried
L2_EDGE_WIDTHS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6)  # ln-bytes scales tried
# memory_graph rows held out of every fit (benchmarks/validate_ops.py checks them): whole token counts, one inside
# the edge (1536 x 4096: 25-63 MB), two on the HBM side
MEMORY_GRAPH_HELD_OUT_TOKENS = (1536, 6144, 16384)


@dataclass(frozen=True)
class L2Edge:
    """Fraction of a kernel's bytes served from HBM: 1 / (1 + exp(-ln(bytes / (center x L2)) / width))."""

    center: float
    width: float

    def hbm_fraction(self, nbytes, l2_bytes):
        """Share of nbytes that comes from HBM on a GPU of l2_bytes of L2 (0 below the edge, 1 far above it)."""
        nbytes = np.asarray(nbytes, dtype=float)
        with np.errstate(divide="ignore", over="ignore"):
            z = np.log(np.maximum(nbytes, 1e-300) / (self.center * float(l2_bytes))) / self.width
            return 1.0 / (1.0 + np.exp(-z))


def l2_column(kind: str, nbytes, l2_bytes: float, edge: L2Edge | None = None):
    """The memory features' third column: bytes from HBM past the L2 edge (L2_EDGE_KINDS with an edge), else bytes
    beyond the L2."""
    nbytes = np.asarray(nbytes, dtype=float)
    if edge is not None and kind in L2_EDGE_KINDS:
        return nbytes * edge.hbm_fraction(nbytes, l2_bytes)
    return np.maximum(nbytes - l2_bytes, 0.0)


def memory_features(kind: str, elements, width, l2_bytes: float, itemsize: float = 2.0, *, sms: int | None = None,
                    cache_bytes=None, edge: L2Edge | None = None, row_edge=None):
    """[bytes, width, bytes from HBM (l2_column)] of a memory-bound kind, then the launch-shape columns of the kinds
    whose kernel PyTorch configures from the size (KERNEL_SHAPE_FEATURES), then the norms' re-read bytes past L1
    (NORM_REREAD_TENSORS; a MEMORY_PROXY kind of a norm takes them too); arrays or scalars, stacked on the last axis. sms: the GPU's SM count (the argmax
    reduction's blocks per SM); cache_bytes: the byte span of the KV cache an index_copy writes into (kv_cache_span;
    None: under 2 GiB, one launch); edge: the fitted L2 edge (fit_l2_edge); row_edge: the norms' fitted RowEdge
    (fit_row_edge; None: no re-read priced, REREAD_ALL: every re-read byte, the fit's raw column)."""
    from c3kit.workload.memops import memop_traffic

    nbytes = np.asarray(memop_traffic(kind, np.asarray(elements, dtype=float), itemsize)[0])
    w = np.broadcast_to(np.asarray(width, dtype=float), nbytes.shape)
    cols = [nbytes, w, l2_column(kind, nbytes, l2_bytes, edge)]
    if kind == "index_copy":
        cols += index_copy_shape(elements, cache_bytes)
    elif kind == "embedding":
        cols += [embedding_small_index_loop(np.asarray(elements, float) / np.maximum(w, 1.0))]
    elif kind == "argmax":
        if not sms:
            raise CostError("argmax's launch shape needs the GPU's SM count (sms): pass the catalog GPU's sms")
        cols += argmax_shape(np.asarray(elements, float) / np.maximum(w, 1.0), w, sms)
    elif kind in NORM_BWD_KINDS:
        if not sms:
            raise CostError(f"{kind}'s launch shape needs the GPU's SM count (sms): pass the catalog GPU's sms")
        cols += [dgamma_wave_rows(np.asarray(elements, float) / np.maximum(w, 1.0), w, sms)]
    rowwise = kind if kind in NORM_REREAD_TENSORS else MEMORY_PROXY.get(kind)
    if rowwise in NORM_REREAD_TENSORS:  # a norm, or a row-wise kind priced as one (softmax: the same row passes)
        if rowwise != kind:  # a proxy runs none of the norm's launch-shape work: those columns 0, in their place
            cols += [np.zeros_like(nbytes)] * len(KERNEL_SHAPE_FEATURES.get(rowwise, ()))
        cols += [np.asarray(elements, float) / np.maximum(w, 1.0),
                 norm_reread_bytes(rowwise, elements, w, itemsize, row_edge)]
    if all(getattr(c, "shape", None) == nbytes.shape for c in cols):  # the sweep's case: skip broadcasting
        return np.stack(cols, axis=-1)
    return np.stack(np.broadcast_arrays(*cols), axis=-1)


# Launch shapes of the kernels PyTorch picks by size (ATen CUDA sources of the torch the rows were timed with);
# each is a column of the kind's fit so that its coefficient, not a guess, prices it:
# - index_copy_ (IndexKernel.cu): 128 threads a block, up to 4 elements each in turn, so a write of under 512
#   elements runs ceil(elements / 128) dependent steps per thread and a larger one 4 (more blocks in parallel);
#   an iterator whose byte offsets pass 2^31 - 1 (a KV cache of 2 GiB or more) is split in halves, one launch each.
# - embedding = index_select (Indexing.cu): up to 16 indices take the small-index kernel, whose threads walk the
#   indices one after another; more take the large-index kernel, parallel over index x column.
# - argmax (Reduce.cuh, setReduceConfig): blocks of 512 threads; a row of V values is read V / 512 values per thread
#   by one block, unless that is 256 or more and the grid is short, when the row is split over ctas blocks and
#   reduced through global memory (V = 128256 stays in one block at 251 values a thread, 27 us; V = 152064 splits
#   into 19, 8.6 us).
# - layer_norm / rms_norm backward (layer_norm_kernel.cu): besides the per-row dX kernel (bytes), the weight
#   gradient (GammaBetaBackwardCUDAKernelTemplate) runs ceil(N / 32) blocks of 32 x 32 threads, each summing its 32
#   columns over all M rows; one block per SM fits the rows (two did worse on the fitted rows), so that kernel
#   takes ceil(ceil(N / 32) / SMs) waves of M rows: width 4096 is one wave on 132 SMs, 5120 two (the held-out rows'
#   lower bandwidth). Above 64 Ki rows with N / 32 < SMs / 2 it splits M over blocks too (column 0 there).
#   rms_norm's backward runs the same kernel; fitted on its memory rows alone the term missed its held-out check
#   (7.3 / 11.9%), and was left out until the norm_width rows (device call 37, nine widths): with them and the norms'
#   re-read edge it passes every rmsnorm.bwd check (width 5120 eager rows 1.5 / 2.0%, norm_width rows 1.1 / 2.0%).
KERNEL_SHAPE_FEATURES = {"index_copy": ("steps per thread", "extra 32-bit launches"),
                         "embedding": ("small-index loop",),
                         "argmax": ("values per thread", "global reduce", "blocks per SM x values per thread"),
                         "layernorm.bwd": ("weight-gradient waves x rows",),
                         "rmsnorm.bwd": ("weight-gradient waves x rows",)}
NORM_BWD_KINDS = ("layernorm.bwd", "rmsnorm.bwd")
DGAMMA_COLS, DGAMMA_SPLIT_ROWS = 32, 64 * 1024  # the weight-gradient kernel's block width, its split-M threshold
INDEX_NT, INDEX_VT = 128, 4  # index kernels' block size and elements per thread (launch_size_nd, launch_bound2)
SMALL_INDEX_MAX = 16  # index_select's small-index kernel takes at most this many indices
REDUCE_THREADS, REDUCE_MAX_VPT, REDUCE_MIN_VPT = 512, 256, 16  # Reduce.cuh MAX_NUM_THREADS, values per thread
THREADS_PER_SM = 2048  # Hopper / Ampere resident threads per SM (the reduction's target grid)
INT32_MAX = 2 ** 31 - 1


def kv_cache_span(batch, kv_heads, kv_len, head_dim, itemsize: float = 2.0) -> float:
    """Bytes between the first and last element an index_copy_ of one position into a [batch, kv_heads, kv_len,
    head_dim] cache can touch (TensorIterator's max offset, the indexed dimension collapsed): what its 32-bit
    indexing check compares with 2^31 - 1."""
    s = float(itemsize)
    return 1.0 + ((batch - 1) * kv_heads * kv_len * head_dim + (kv_heads - 1) * kv_len * head_dim + head_dim - 1) * s


def index_copy_shape(elements, cache_bytes=None) -> list:
    """[dependent steps per thread, extra launches of a 32-bit split] of an index_copy_ writing `elements`."""
    el = np.asarray(elements, float)
    steps = np.minimum(np.ceil(el / INDEX_NT), INDEX_VT)
    if cache_bytes is None:
        return [steps, np.zeros_like(el)]
    cb = np.asarray(cache_bytes, float)
    pieces = np.exp2(np.ceil(np.log2(np.maximum(cb / INT32_MAX, 1.0))))
    return [steps, pieces - 1.0]


def embedding_small_index_loop(indices):
    """Indices walked one after another by index_select's small-index kernel (0 when the large-index kernel runs)."""
    n = np.asarray(indices, float)
    return np.where(n <= SMALL_INDEX_MAX, n, 0.0)


def dgamma_wave_rows(rows, width, sms: int):
    """Waves x rows of the norm backward's weight-gradient kernel over a rows x width input (KERNEL_SHAPE_FEATURES)."""
    rows, width = np.broadcast_arrays(np.asarray(rows, float), np.asarray(width, float))
    blocks = np.ceil(width / DGAMMA_COLS)
    split = (rows > DGAMMA_SPLIT_ROWS) & (blocks < sms // 2)
    return np.where(split, 0.0, np.ceil(blocks / sms) * rows)


# The norm kernels read each row twice (layer_norm_kernel.cu of the torch the rows were timed with, which runs
# rms_norm through the same kernels): the forward (vectorized_layer_norm_kernel) runs one CTA of 128 threads per row,
# a first pass over the row for its statistics and a second over the same row to normalise it; the backward's dX
# kernel (layer_norm_grad_input_kernel_vectorized, one CTA of 128 threads per row) sums over X and dY, then reads both
# again to write dX. The second pass finds the row in the SM's L1 while the rows of the CTAs resident on the SM fit
# there, and goes to L2 once they do not: the norm_width rows (device call 37, CUDA graphs) show a bandwidth that
# falls with the row width at any token count (RMSNorm forward 3.3-3.5 TB/s up to width 5120, 2.7 at 8192, 2.5 at
# 12288-16384; the backwards 1.8-1.9 TB/s at 3072-4096, 1.5-1.6 from 5120). What a CTA keeps for its second pass
# is its row of each tensor it re-reads (the forward: X; the backward: X and dY), so the backward, re-reading two
# tensors, outgrows L1 at half the forward's width. The column is the re-read bytes past L1: elements x itemsize x
# tensors re-read x a logistic in ln(row bytes / center) (RowEdge; row bytes = tensors x width x itemsize), one edge
# for the forwards and backwards together, fitted on the fit split (fit_row_edge). On another GPU the rows and
# re-read columns scale with the HBM bandwidth like the bytes (memory_scaling): the split of a memory-bound kernel's
# time between them is the fit's, and the kernel streams at the HBM's pace.
NORM_REREAD_TENSORS = {"rmsnorm": 1, "layernorm": 1, "rmsnorm.bwd": 2, "layernorm.bwd": 2}
REREAD_ALL = "all"  # row_edge value that prices every re-read byte (the fit's raw column, scaled by the edge later)
ROW_EDGE_CENTERS = tuple(float(x) for x in np.round(np.geomspace(4096, 65536, 33)))  # row bytes a CTA re-reads, tried
ROW_EDGE_SCALES = (0.05, 0.1, 0.15, 0.2, 0.3, 0.45, 0.7)  # ln-bytes scales tried


@dataclass(frozen=True)
class RowEdge:
    """Share of a norm kernel's second pass served past L1: 1 / (1 + exp(-ln(row bytes / center) / scale)), row bytes
    = tensors re-read x width x itemsize."""

    center: float
    scale: float

    def past_l1(self, row_bytes):
        """Fraction of the re-read bytes that miss L1 for CTAs re-reading row_bytes each (0 small, 1 large)."""
        z = np.log(np.maximum(np.asarray(row_bytes, dtype=float), 1.0) / self.center) / self.scale
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-z))


def norm_reread_bytes(kind: str, elements, width, itemsize: float = 2.0, row_edge=None):
    """Bytes of a norm kernel's second pass over its rows served past L1 (NORM_REREAD_TENSORS; row_edge: the fitted
    RowEdge, REREAD_ALL for every re-read byte, None for none)."""
    tensors = NORM_REREAD_TENSORS[kind]
    full = np.asarray(elements, dtype=float) * itemsize * tensors
    if isinstance(row_edge, str):
        if row_edge != REREAD_ALL:
            raise CostError(f"row_edge is a RowEdge, None or {REREAD_ALL!r}, not {row_edge!r}")
        return full
    return full * row_edge.past_l1(tensors * np.asarray(width, float) * itemsize) if row_edge is not None else full * 0.0


def _last_pow2(n):
    return np.exp2(np.floor(np.log2(np.maximum(n, 1.0))))


def argmax_shape(rows, vocab, sms: int) -> list:
    """[values per thread, 1 when split over blocks, blocks per SM x values per thread] of an argmax over the last
    dimension of a rows x vocab tensor, as Reduce.cuh's setReduceConfig lays it out."""
    rows, vocab = np.broadcast_arrays(np.asarray(rows, float), np.asarray(vocab, float))
    dim0 = np.where(vocab > 128, vocab // 4, vocab)  # vectorized loads of 4 along the row
    d0 = np.where(dim0 < REDUCE_THREADS, _last_pow2(dim0), REDUCE_THREADS)
    d1 = np.where(rows < REDUCE_THREADS, _last_pow2(rows), REDUCE_THREADS)
    bw = np.minimum(d0, 32.0)
    bh = np.minimum(d1, REDUCE_THREADS // bw)
    bw = np.minimum(d0, REDUCE_THREADS // bh)
    vpt = np.ceil(vocab / bw)
    split_y = (vpt >= bh * REDUCE_MIN_VPT) | (vpt >= REDUCE_MAX_VPT)
    step_out = np.where(split_y, 1.0, bh)
    vpt = np.where(split_y, np.ceil(vocab / (bw * bh)), vpt)
    grid = np.ceil(rows / step_out)
    target = sms * (THREADS_PER_SM // (bw * bh))
    go = split_y & (vpt >= REDUCE_MAX_VPT) & (grid <= target)
    ctas = np.maximum(np.minimum(np.ceil(target / grid), np.ceil(vpt / REDUCE_MIN_VPT)), np.ceil(vpt / REDUCE_MAX_VPT))
    ctas = np.where(go, ctas, 1.0)
    vpt = np.where(ctas > 1, np.ceil(vpt / ctas), vpt)
    per_sm = np.ceil(grid * ctas / sms)
    return [vpt, (ctas > 1).astype(float), per_sm * vpt]


def memory_scaling(kind: str, bw_ratio: float, n_coefs: int | None = None) -> np.ndarray:
    """Per-column factor of a kind's coefficients on a GPU with bw_ratio times the bandwidth: byte terms / bw_ratio,
    the width and launch-shape terms as measured, a norm's rows and re-read bytes / bw_ratio (n_coefs: the model's
    column count, when it is another kind's)."""
    rowwise = kind if kind in NORM_REREAD_TENSORS else MEMORY_PROXY.get(kind)
    norm = 2 if rowwise in NORM_REREAD_TENSORS else 0
    n = 3 + len(KERNEL_SHAPE_FEATURES.get(rowwise if norm else kind, ())) + norm if n_coefs is None else n_coefs
    out = np.ones(n)
    out[[0, 2]] = 1.0 / bw_ratio
    if norm and n >= 3 + norm:
        out[n - norm:] = 1.0 / bw_ratio
    return out


# The fused forward kernels (FlashAttention-2's kBlockM for head dims 64 and 128 on sm90) run one CTA
# per (batch x head, 128-row query tile), each looping over the 128-column KV tiles it sees (causal: up to the
# diagonal), launched query tile fastest; the block scheduler hands each CTA to the first free slot. One CTA per SM:
# chosen on the fit split (flash2 / cudnn training-row p90 3.9-7.6% at one, 14% and more at two or three per SM).
# Adopted for flash2 only: on cudnn's rows the same feature passed the held-out check (d64 4.3 / 8.2% -> 1.2 / 4.4%,
# d128 6.4 / 11.4% -> 3.8 / 6.6%) but moved the whole-layer check (benchmarks/validate_layers.py, where SDPA runs
# cudnn: fwd median 1.56% -> 1.70%, p90 3.00% -> 4.03%, bias +1.23% -> +1.82%; the blocks' 2-8 heads a rank ran
# faster than the makespan says): not adopted there.
MAKESPAN_BACKENDS = ("flash2",)
ATTN_TILE = 128
MAKESPAN_EXACT_MAX = 32768  # CTAs scheduled one by one up to here; beyond, total / slots + half the longest CTA


@lru_cache(maxsize=4096)
def _makespan_steps(bh: int, q_len: int, kv_len: int, causal: bool, slots: int) -> float:
    """KV-tile steps the busiest slot runs when bh heads x ceil(q_len / 128) query tiles are list-scheduled in launch
    order onto `slots` slots."""
    nq = -(-q_len // ATTN_TILE)
    if causal:
        work = [-(-min(kv_len, kv_len - q_len + (i + 1) * ATTN_TILE) // ATTN_TILE) for i in range(nq)]
    else:
        work = [-(-kv_len // ATTN_TILE)] * nq
    if bh * nq <= slots:
        return float(max(work))
    if bh * nq > MAKESPAN_EXACT_MAX:  # the tail is at most one CTA: within 0.4% of the busiest slot's time here
        return bh * sum(work) / slots + max(work) / 2.0
    free = [0] * slots
    for _ in range(bh):
        for w in work:
            heapq.heappush(free, heapq.heappop(free) + w)
    return float(max(free))


def makespan_sms(backend: str, sms: int | None) -> int | None:
    """The SM count the forward makespan feature of `backend` uses (None: the backend's forward is priced by FLOPs)."""
    return sms if backend in MAKESPAN_BACKENDS else None


def forward_makespan_flops(batch, heads, q_len, kv_len, head_dim, causal: bool, sms: int):
    """The fused forward's makespan in FLOPs: the busiest slot's KV-tile steps x slots x one step's 4 x 128 x 128 x
    head_dim FLOPs (the causal FLOPs when the tiles spread evenly; more when few heads leave slots idle)."""
    b, h, q, kv, d = np.broadcast_arrays(*(np.asarray(x) for x in (batch, heads, q_len, kv_len, head_dim)))
    steps = np.array([_makespan_steps(int(bi * hi), int(qi), int(ki), bool(causal), int(sms))
                      for bi, hi, qi, ki in zip(b.ravel(), h.ravel(), q.ravel(), kv.ravel())]).reshape(b.shape)
    return steps * sms * 4.0 * ATTN_TILE * ATTN_TILE * d


def attention_features(batch, heads, kv_heads, q_len, kv_len, head_dim, causal: bool, backward: bool,
                       sms: int | None = None):
    """[causal FLOPs, query rows x head_dim, KV rows x head_dim] of a training attention; a forward on a GPU of
    `sms` SMs has its makespan FLOPs (forward_makespan_flops) in the first column."""
    if sms and not backward:
        f = forward_makespan_flops(batch, heads, q_len, kv_len, head_dim, causal, sms)
    else:
        f = attention_flops(batch, heads, q_len, kv_len, head_dim, causal, backward)
    q_rows = np.asarray(batch, float) * heads * q_len * head_dim
    kv_rows = np.asarray(batch, float) * kv_heads * kv_len * head_dim
    return np.stack(np.broadcast_arrays(f, q_rows, kv_rows), axis=-1)


# Decode attention (q_len 1) as SDPA's default kernel runs it, from the decode rows (attention, decode_attention and
# the CUDA-graph decode_attn_small families, device call 37). Three things the bytes alone do not carry:
# - the KV cache of a (sequence, KV head) up to DECODE_UNSPLIT_MAX_KV rows is walked by one CTA, a serial chain of KV
#   tiles that sets the time while the cache is small (q_len 1, batch 1, 8 KV heads, d128, in graphs: KV 128 4.1 us,
#   256 6.0 us, 512 7.5 us), and a longer one is split over CTAs, each walking a part, then combined (KV 1024:
#   6.3 us, 2048: 7.1 us; the eager rows at head dims 64, 128 and 256 alike: KV 512 above KV 2048). The chain and the
#   bytes overlap (a CTA streams while it walks), so the first column is the larger of the two, the chain in bytes
#   (KV rows x head_dim x `chain`, DecodeShape); a split pays its combine (split column) and each split's walk
#   grows with the cache at a bounded split count (KV rows x head_dim: 1 sequence x 1 KV head x 65536 KV, d128,
#   33.6 MB: 16.2 us where 16 x 8 x 512, the same bytes, runs 8.4 us);
# - a cache read again and again from the same tensors (a CUDA-graph replay, a timing loop) stays in the 60 MB L2 up
#   to about half of it: 33.6 MB runs at 3.0-4.0 TB/s, 67 MB at 2.9-3.2, and 4.5 TB/s far past it; the bytes from
#   HBM past an edge (L2Edge) fitted on the decode rows themselves (fit_decode_shape);
# - unsplit CTAs beyond one an SM queue in waves, each wave paying a CTA's fixed work again (Q load, epilogue, output
#   write): 64 sequences x 8 KV heads at KV 128 (512 CTAs, 4 waves) run 12.0 us where their bytes (33.6 MB, in L2)
#   say 9.7; one CTA an SM, as the forwards' makespan (MAKESPAN_BACKENDS), fits the fit split better than two or four
#   (relative SSR 0.53 against 0.62, 0.79; half an SM a CTA 0.52);
# - the query heads (GQA groups share the KV reads; the heads column, kept, mostly fits to 0).
DECODE_UNSPLIT_MAX_KV = 512
DECODE_CHAIN_RATIOS = (128.0, 256.0, 512.0, 1024.0, 2048.0)  # chain bytes a KV row x head_dim, tried


@dataclass(frozen=True)
class DecodeShape:
    """The decode kernel's fitted shape: the unsplit chain's bytes a KV row x head_dim, and the L2 edge of its cache."""

    chain: float
    edge: L2Edge


def decode_features(batch, heads, kv_heads, kv_len, head_dim, itemsize: float = 2.0,
                    shape: DecodeShape | None = None, l2_bytes: float | None = None, bw_ratio: float = 1.0,
                    sms: int | None = None):
    """[max(KV-cache bytes, unsplit chain in bytes), query heads in the batch, KV bytes from HBM past the L2 edge,
    1 when the KV is split over CTAs, KV rows x head_dim, waves of unsplit CTAs past the first] of one decode
    attention (q_len 1); shape: the fitted DecodeShape (None: no chain and no L2 term), l2_bytes: the GPU's L2 (needed
    with a shape); bw_ratio: the GPU's HBM bandwidth over the measured one's (the byte terms / it; the rest as
    measured); sms: the GPU's SM count (one unsplit CTA an SM; None: no wave term)."""
    b, h, hk, kv, d = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (batch, heads, kv_heads, kv_len,
                                                                                  head_dim)))
    kv_bytes = 2.0 * b * hk * kv * d * itemsize
    unsplit = kv <= DECODE_UNSPLIT_MAX_KV
    first, hbm = kv_bytes / bw_ratio, np.zeros_like(kv_bytes)
    if shape is not None:
        if not l2_bytes:
            raise CostError("decode_features with a fitted shape needs the GPU's L2 (l2_bytes)")
        first = np.maximum(first, np.where(unsplit, kv * d * shape.chain, 0.0))
        hbm = kv_bytes * shape.edge.hbm_fraction(kv_bytes, l2_bytes) / bw_ratio
    waves = np.where(unsplit, np.maximum(np.ceil(b * hk / sms) - 1.0, 0.0), 0.0) if sms else np.zeros_like(kv_bytes)
    return np.stack([first, b * h, hbm, (~unsplit).astype(float), kv * d, waves], axis=-1)


# Unfused attention's kernels stream the score matrix (batch x heads x q_len x kv_len) several times: with K = head_dim
# <= 128 both batched GEMMs are bound by writing or reading it (d64 and d128 rows differ by 0-4%), and so are the scale,
# masked_fill and softmax passes. What the score elements alone miss (attn_backends rows, device call 15):
# - a score matrix inside the L2 is read back from it by the next kernel: 1 x 8, 16, 32 heads x 512 (4-17 MB of scores)
#   run 30.2, 43.3, 71.3 us, 6-7 ps a marginal element, where 4 x 48 x 512 (101 MB) runs 8.3 ps an element: the
#   elements from HBM past the memory class's fitted L2 edge (L2Edge) are a column of their own;
# - PyTorch's softmax runs rows of up to SOFTMAX_PERSISTENT_MAX_ROW elements as one warp a row in registers and
#   longer rows with a block a row (SoftMax.cu host_softmax: dim_size <= 2048 and <= 8192 bytes): the forwards step
#   from 8.5-9.4 ps an element at 2048 tokens to 9.8-10.2 at 4096;
# - the causal mask (q_len x kv_len bools) is read again for every batch x head by masked_fill (and its backward):
#   from L2 while it fits, from HBM past the edge (8192 tokens: 67 MB, 10.8-11.0 ps an element against 10.0 at 4096).
SOFTMAX_PERSISTENT_MAX_ROW = 2048  # longest softmax row (bf16 elements) of PyTorch's one-warp-a-row kernel
# Eager backward rows of fewer score elements time autograd's host work, not kernels: 219-590 us whatever their size
# (1 x 8 heads x 512, 2M scores: 362 us at d64, 547 us at d128), where rows from 2^26 scores on run 9.5-11.4 ps an
# element.
UNFUSED_BWD_MIN_SCORES = 2 ** 26


def unfused_features(batch, heads, q_len, kv_len, head_dim, backward: bool, l2_bytes: float | None = None,
                     edge: L2Edge | None = None):
    """[batched-GEMM FLOPs over the full score matrix, score elements, score elements from HBM, score elements in rows
    longer than SOFTMAX_PERSISTENT_MAX_ROW, mask bytes re-read from HBM] of one unfused attention; l2_bytes: the GPU's
    L2 (None: the last two L2 columns 0); edge: the L2 edge (None: a hinge at l2_bytes)."""
    g = np.asarray(batch, float) * heads
    q, kv = np.asarray(q_len, float), np.asarray(kv_len, float)
    scores = g * q * kv
    if l2_bytes:
        hbm = scores * _hbm_fraction(2.0 * scores, l2_bytes, edge)
        mask = scores * _hbm_fraction(q * kv, l2_bytes, edge)
    else:
        hbm = mask = np.zeros_like(scores)
    long_rows = np.where(kv > SOFTMAX_PERSISTENT_MAX_ROW, scores, 0.0)
    flops = (8.0 if backward else 4.0) * scores * np.asarray(head_dim, float)
    return np.stack(np.broadcast_arrays(flops, scores, hbm, long_rows, mask), axis=-1)


def _hbm_fraction(nbytes, l2_bytes: float, edge: L2Edge | None):
    """Share of nbytes from HBM: past the fitted edge, else all of it beyond the L2."""
    nbytes = np.asarray(nbytes, dtype=float)
    return edge.hbm_fraction(nbytes, l2_bytes) if edge is not None else (nbytes > l2_bytes).astype(float)


def attention_flops(batch, heads, q_len, kv_len, head_dim, causal: bool, backward: bool):
    """FLOPs of QK^T and PV as c3kit counts them (Attention.flops), for arrays as well as scalars."""
    f = 4.0 * np.asarray(batch, float) * heads * q_len * kv_len * head_dim
    if causal:
        f = np.where(np.asarray(q_len) == np.asarray(kv_len), 0.5 * f, f)
    return f * (2.5 if backward else 1.0)


@dataclass(frozen=True)
class OpCalibration:
    """Fitted op-class models of one GPU and where they came from."""

    gpu: str
    memory: dict  # kind -> FeatureCost over memory_features
    attention: dict  # (backend, pass, head_dim) -> FeatureCost over attention_features; pass in fwd / bwd
    decode: FeatureCost | None  # over decode_features
    floor_graph_s: float
    floor_eager_s: float
    origin: dict  # family -> file name
    l2_bytes: float  # the GPU's L2 (hw catalog): bytes beyond it come from HBM
    unfused: dict = field(default_factory=dict)  # pass -> FeatureCost over unfused_features
    decode_by_hd: dict = field(default_factory=dict)  # head_dim -> FeatureCost over decode_features (its own rows)
    sms: int | None = None  # the GPU's SM count (hw catalog): the launch shapes of its measured kernels
    after_stream: dict = field(default_factory=dict)  # COLD_KINDS kind -> AfterStream (fit_after_stream)
    l2_edge: L2Edge | None = None  # the L2 edge of L2_EDGE_KINDS (fit_l2_edge; None: the hinge at l2_bytes)
    decode_shape: DecodeShape | None = None  # decode_by_hd's chain and L2 edge (fit_decode_shape)
    row_edge: RowEdge | None = None  # the norms' L1 re-read edge (fit_row_edge; None: no re-read term)

    def decode_model(self, head_dim) -> FeatureCost | None:
        """The decode-attention model at the nearest measured head_dim with a fit of its own, else the pooled one."""
        return self.decode_by_hd[nearest(self.decode_by_hd, head_dim)] if self.decode_by_hd else self.decode

    def attention_model(self, backward: bool, head_dim: int, backend: str = "cudnn") -> FeatureCost | None:
        """The fitted model of this backend and pass at the nearest measured head_dim (None when not measured)."""
        ps = "bwd" if backward else "fwd"
        cands = [k for k in self.attention if k[0] == backend and k[1] == ps]
        if not cands:
            return None
        return self.attention[min(cands, key=lambda k: (abs(k[2] - head_dim), -k[2]))]

    def attention_backends(self) -> tuple[str, ...]:
        """The fused backends measured here."""
        return tuple(sorted({k[0] for k in self.attention}))


def fit_memory(rows: list[dict], *, l2_bytes: float, sms: int | None = None,
               held_out_width: int | None = HELD_OUT_WIDTH, edge: L2Edge | None = None,
               row_edge: RowEdge | None = None) -> dict:
    """kind -> FeatureCost from ops-memory rows (rows of held_out_width, memory_graph rows of
    MEMORY_GRAPH_HELD_OUT_TOKENS and norm_width rows of is_held_out_norm_width are left out of the fit); l2_bytes and
    sms: the measured GPU's; edge: the L2 edge of L2_EDGE_KINDS (fit_l2_edge; None: the hinge at l2_bytes);
    row_edge: the norms' RowEdge (fit_row_edge; None: no re-read term)."""
    pts = _memory_points(rows, sms, held_out_width)
    return {k: v[0] for k, v in _fit_memory_kinds(pts, l2_bytes, edge, row_edge).items()}


def fit_row_edge(rows: list[dict], *, l2_bytes: float, sms: int | None = None,
                 held_out_width: int | None = HELD_OUT_WIDTH, edge: L2Edge | None = None) -> RowEdge | None:
    """The RowEdge (center, scale from ROW_EDGE_CENTERS x ROW_EDGE_SCALES) whose fits of the NORM_REREAD_TENSORS
    kinds leave the least summed squared relative residual over the fit split, the L2 edge fixed; None when their
    rows span fewer than NORM_EDGE_MIN_WIDTHS widths (nothing to place an edge between)."""
    pts = {k: v for k, v in _memory_points(rows, sms, held_out_width).items() if k in NORM_REREAD_TENSORS}
    if not pts or max(len(np.unique(X[:, 1])) for X, _ in pts.values()) < NORM_EDGE_MIN_WIDTHS:
        return None
    best = None
    for center in ROW_EDGE_CENTERS:
        for scale in ROW_EDGE_SCALES:
            e = RowEdge(center, scale)
            ssr = sum(v[1] for v in _fit_memory_kinds(pts, l2_bytes, edge, e).values())
            if best is None or ssr < best[0]:
                best = (ssr, e)
    return best[1]


def fit_l2_edge(rows: list[dict], *, l2_bytes: float, sms: int | None = None,
                held_out_width: int | None = HELD_OUT_WIDTH) -> L2Edge | None:
    """The L2Edge (center, width from the L2_EDGE_CENTERS x L2_EDGE_WIDTHS grid) whose fits of the L2_EDGE_KINDS
    leave the least summed squared relative residual over the fit split; None without memory_graph rows (no rows
    across the edge)."""
    if not any(r.get("mode") == "graph" for r in rows):
        return None
    pts = {k: v for k, v in _memory_points(rows, sms, held_out_width).items() if k in L2_EDGE_KINDS}
    best = None
    for center in L2_EDGE_CENTERS:
        for width in L2_EDGE_WIDTHS:
            edge = L2Edge(center, width)
            ssr = sum(v[1] for v in _fit_memory_kinds(pts, l2_bytes, edge).values())
            if best is None or ssr < best[0]:
                best = (ssr, edge)
    return best[1]


# norm_width rows (device call 37) held out of every fit (benchmarks/validate_ops.py checks them): whole widths, one
# inside the re-read edge and one past it, besides the memory rows' held-out width, and the memory_graph rows'
# held-out token count
NORM_WIDTH_HELD_OUT_WIDTHS = (HELD_OUT_WIDTH, 6144, 12288)
NORM_WIDTH_HELD_OUT_TOKENS = (16384,)
NORM_EDGE_MIN_WIDTHS = 4  # fewest distinct widths a row edge is fitted on (centre and scale need both sides)


def norm_width_rows(rows: list[dict]) -> list[dict]:
    """The norm_width family's CUDA-graph rows as memory rows (tagged family 'norm_width'); its eager rows time the
    host at 4k tokens (RMSNorm 4096 x 2048: 15.3 us eager, 9.4 us in a graph) and are left out."""
    return [{**r, "family": "norm_width"} for r in rows if r.get("mode") == "graph"]


def is_held_out_norm_width(r: dict) -> bool:
    """norm_width rows held out of the fits (NORM_WIDTH_HELD_OUT_WIDTHS, NORM_WIDTH_HELD_OUT_TOKENS)."""
    return r.get("family") == "norm_width" and (int(r["width"]) in NORM_WIDTH_HELD_OUT_WIDTHS
                                                or int(r["tokens"]) in NORM_WIDTH_HELD_OUT_TOKENS)


def is_held_out_memory_graph(r: dict) -> bool:
    """memory_graph rows held out of the fits (MEMORY_GRAPH_HELD_OUT_TOKENS)."""
    return r.get("mode") == "graph" and int(r["tokens"]) in MEMORY_GRAPH_HELD_OUT_TOKENS


def gpu_time_memory_rows(rows: list[dict]) -> list[dict]:
    """The memory rows that time kernels: a backward kind timed in CUDA graphs (memory_graph) has its eager rows
    below EAGER_BWD_HOST_BOUND elements left out (autograd's host time shows in them: gelu.bwd 8192 x 2048 77.8 us
    eager, 16384 x 2048 66.0 us; 4096 x 4096 rmsnorm.bwd 84 us eager, 60 us in a graph) and the graph rows take their
    place; other eager backward rows below BWD_MIN_ELEMENTS likewise."""
    graphed = {_memory_kind(r) for r in rows if r.get("mode") == "graph"}
    out = []
    for r in rows:
        kind = _memory_kind(r)
        if kind is None or r.get("mode") == "graph" or not kind.endswith(".bwd"):
            out.append(r)
            continue
        elements = float(r["tokens"]) * float(r["width"])
        if elements >= (EAGER_BWD_HOST_BOUND if kind in graphed else BWD_MIN_ELEMENTS):
            out.append(r)
    return out


ROW_ITEMSIZE = 2.0  # the memory rows' element size (bf16): what _memory_points prices them at


def _memory_points(rows: list[dict], sms: int | None, held_out_width: int | None) -> dict:
    """kind -> (features with an L2 of infinite capacity and every norm re-read byte past L1, times) of the rows a fit
    uses: the third column (bytes from HBM) and the norms' last (re-read bytes past L1) are filled in by
    _fit_memory_kinds."""
    from c3kit.workload.memops import MEMOP_KINDS

    groups: dict = {}
    for r in gpu_time_memory_rows(rows):
        kind = _memory_kind(r)
        if kind is None or kind not in MEMOP_KINDS or r["time_s"] is None:
            continue
        if held_out_width is not None and int(r["width"]) == held_out_width or is_held_out_memory_graph(r):
            continue
        if is_held_out_norm_width(r):
            continue
        if r.get("mode") == "graph" and kind not in L2_EDGE_KINDS:
            continue
        elements = float(r["tokens"]) * float(r["width"])
        f = memory_features(kind, elements, r["width"], np.inf, ROW_ITEMSIZE, sms=sms, cache_bytes=r.get("cache_bytes"),
                            row_edge=REREAD_ALL)
        groups.setdefault(kind, []).append((f, float(r["time_s"])))
    return {k: (np.array([p[0] for p in v]), np.array([p[1] for p in v])) for k, v in groups.items()}


def constant_columns(X: np.ndarray) -> np.ndarray:
    """Columns after the first (bytes) that hold one value over every fitted row: the intercept is their only
    measured effect, so their coefficient is pinned at 0 (fitted, a least-squares split of the fixed cost onto the
    row width of the copy ladder's width-1 rows priced a 2048-wide copy of 134M elements at 1.32 ms, not 0.17)."""
    X = np.asarray(X, dtype=float)
    const = np.all(X == X[:1], axis=0)
    const[0] = False
    return const


def _fit_memory_kinds(points: dict, l2_bytes: float, edge: L2Edge | None = None, row_edge: RowEdge | None = None) -> dict:
    """kind -> (FeatureCost, sum of squared relative residuals over its fitted rows) at one L2 capacity and edge and
    the norms' row edge (None: their re-read column 0, i.e. no such term)."""
    out = {}
    for kind, (X, t) in points.items():
        if len(t) >= max(4, X.shape[1] + 1):
            X = X.copy()
            X[:, 2] = l2_column(kind, X[:, 0], l2_bytes, edge)
            if kind in NORM_REREAD_TENSORS:
                rb = NORM_REREAD_TENSORS[kind] * X[:, 1] * ROW_ITEMSIZE  # row bytes re-read (column 1: the width)
                X[:, -1] = X[:, -1] * row_edge.past_l1(rb) if row_edge is not None else 0.0
            c = fit_nonneg(np.where(constant_columns(X), 0.0, X), t)
            out[kind] = (FeatureCost(float(c[0]), tuple(float(v) for v in c[1:]), len(t)),
                         float(np.sum(((c[0] + X @ c[1:]) / t - 1.0) ** 2)))
    return out


def copy_rows(floor_rows: list[dict]) -> list[dict]:
    """The floor family's plain-copy ladder (bf16, 1k to 1G elements, CUDA graph) as memory rows of kind copy
    (width 1: a copy has no row structure)."""
    return [{"op": "copy", "pass": "fwd", "tokens": r["elements"], "width": 1, "bytes": r["bytes"],
             "time_s": r["time_s"]} for r in floor_rows if r["case"] == "copy"]


def adamw_rows(memory_rows: list[dict]) -> list[dict]:
    """The memory family's fused AdamW steps (fp32 parameters, 1M to 268M) as rows of kind adamw, one element per
    parameter (width 1)."""
    return [{"op": "adamw", "pass": "fwd", "tokens": r["width"], "width": 1, "bytes": r["bytes"],
             "time_s": r["time_s"]} for r in memory_rows if r["op"] == "adamw_fused"]


def decode_kernel_rows(rows: list[dict]) -> list[dict]:
    """The decode_kernels family's rows as memory rows: KV-cache writes (kind index_copy, width = kv_heads x
    head_dim), argmax over bf16 logits (kind argmax, width = vocabulary) and embedding gathers (width = hidden);
    tokens = the batch; a KV write's cache_bytes: the [batch, kv_heads, kv_len, head_dim] cache it writes into."""
    kinds = {"kv_write": "index_copy", "argmax": "argmax", "embedding": "embedding"}
    out = []
    for r in rows:
        kind = kinds.get(str(r["kind"]))
        if kind is None or str(r["dtype"]) != "bf16":
            continue
        width = int(r["heads"]) * int(r["width"]) if kind == "index_copy" else int(r["width"])
        row = {"op": kind, "pass": "fwd", "tokens": r["batch"], "width": width, "bytes": r["bytes"],
               "time_s": r["time_s"]}
        if kind == "index_copy":
            row["cache_bytes"] = kv_cache_span(r["batch"], r["heads"], r["kv_len"], r["width"])
        out.append(row)
    return out


def decode_cold_rows(cold: list[dict], fresh: list[dict] = (), large: list[dict] = ()) -> list[dict]:
    """The kernels timed right after a weight stream as memory rows of the memops.COLD_KINDS kinds: the norm and
    the residual add from the decode_cold rows (contiguous rows, weight / residual cold), RoPE and SwiGLU from the
    decode_fresh rows (on the views of what the stream just wrote), and both at 1k-16k rows from the
    after_stream_large rows (its fresh ones named fresh:<op>). Tokens and width as the layer description prices
    each kind: RoPE per head (tokens = rows x heads, width = 128, the benchmark's head dim), the others per row
    (tokens = rows, width = the row)."""
    from c3kit.workload.memops import COLD_KINDS

    def rows_of(rows, kinds):
        out = []
        for r in rows:
            kind = kinds.get(str(r["op"]))
            if kind is None or not r["cold_s"] or r["cold_s"] <= 0:
                continue
            rope = kind == COLD_KINDS["rope"]
            out.append({"op": kind, "pass": "fwd", "tokens": r["batch"] * (r["width"] // 128 if rope else 1),
                        "width": 128 if rope else r["width"], "bytes": r["bytes"], "time_s": r["cold_s"],
                        "rows": r["batch"], "extra_s": r["cold_s"] - r["warm_s"]})
        return out
    contiguous = {"rmsnorm": COLD_KINDS["rmsnorm"], "add": COLD_KINDS["residual_add"]}
    views = {"rope": COLD_KINDS["rope"], "swiglu_chunked": COLD_KINDS["swiglu_chunked"]}
    return (rows_of(cold, contiguous) + rows_of(fresh, views) + rows_of(large, contiguous)
            + rows_of(large, {"fresh:" + k: v for k, v in views.items()}))


AFTER_STREAM_MAX_ROWS = 1024  # above it the measured extra is inside the noise of the 1-4 ms stream (call 26)


@dataclass(frozen=True)
class AfterStream:
    """What a weight stream adds to a kernel right after it: fixed_s + per_width_s x row width (the per-row weight
    vector and its latency chain, cold) + per_element_s x elements (the cold operand's bytes, the residual), for up to
    max_rows rows (the measured extra at 4k-16k rows is lost in the stream's noise, either sign: priced zero there)."""

    fixed_s: float
    per_width_s: float
    per_element_s: float
    max_rows: int
    n_rows: int

    def __call__(self, rows, width):
        """Seconds added for `rows` rows of `width` (arrays or scalars)."""
        rows = np.asarray(rows, dtype=float)
        w = np.asarray(width, dtype=float)
        extra = np.maximum(self.fixed_s + self.per_width_s * w + self.per_element_s * rows * w, 0.0)
        return np.where(rows <= self.max_rows, extra, 0.0)


def fit_after_stream(rows: list[dict], max_rows: int = AFTER_STREAM_MAX_ROWS) -> dict:
    """kind -> AfterStream from decode_cold_rows (cold minus warm, the same kernel in the same benchmark), fitted by
    least squares on fixed + width + elements over the rows up to max_rows rows."""
    out = {}
    for kind in sorted({r["op"] for r in rows}):
        pts = [(float(r["width"]), float(r["rows"]) * float(r["width"]), float(r["extra_s"])) for r in rows
               if r["op"] == kind and r["rows"] <= max_rows]
        if len(pts) < 4:
            continue
        w, el, e = np.array(pts).T
        c, *_ = np.linalg.lstsq(np.column_stack([np.ones_like(w), w, el]), e, rcond=None)
        out[kind] = AfterStream(float(c[0]), float(c[1]), float(c[2]), max_rows, len(pts))
    return out


def nearest(measured, value) -> int:
    """The measured size nearest to value on a log scale (the largest value of an array; a tie goes to the larger)."""
    v = float(np.max(value))
    return min(measured, key=lambda k: (abs(np.log(k / v)), -k))


def _memory_kind(r: dict) -> str | None:
    """The MEMOP_KINDS name of an ops-memory row ("rmsnorm" + "bwd" -> "rmsnorm.bwd")."""
    op, ps = str(r["op"]), str(r["pass"])
    if ps == "fwd":
        return op
    if ps == "bwd":
        return op + ".bwd"
    return None


# What the ops-attention rows' `backend` column names, as workload.attention.BACKENDS: "default" is what
# SDPA picked with every backend enabled (torch 2.11 on an H200: cuDNN, see cost/data/attention_backends.toml).
# The attn_backends family (SDPA with one backend forced) names them "cudnn" and "flash"; its "unfused" rows
# (eager matmul, scale, masked_fill, softmax, matmul) are a check of cost/attention.py, not a fused class.
ATTN_BACKEND_OF_ROW = {"default": "cudnn", "flash": "flash2", "efficient": "efficient", "cudnn": "cudnn"}
HASH_HOLD_OUT_MIN_ROWS = 20  # a backend's pass with fewer rows is fitted on all of them (leave-one-out check)


def attention_row_backend(r: dict) -> str | None:
    """The workload.attention backend of an ops-attention row (None for a column value it does not know)."""
    return ATTN_BACKEND_OF_ROW.get(str(r.get("backend", "default")))


def is_held_out_attention(r: dict) -> bool:
    """Attention rows held out of the fit: about every third shape, by a fixed rule on its sizes (CUDA-graph training
    rows, whose batch x sequence is fixed and so defeats that rule: those of GRAPH_HELD_OUT_SEQS tokens a sequence;
    decode rows, graph or not, by the sizes)."""
    if r.get("mode") == "graph" and r["pass"] != "decode":
        return int(r["q_len"]) in GRAPH_HELD_OUT_SEQS
    return (int(r["kv_len"]).bit_length() + int(r["heads"]).bit_length() + int(r["batch"]).bit_length()) % 3 == 0


# The attn_graph family (runtime/bench/ops_graphed.py): SDPA flash forward / backward timed in CUDA graphs, the
# kernels' GPU time without the host. Eager rows of the same backend at <= EAGER_HOST_BOUND_SEQ tokens a sequence
# time the host instead: their forwards sit at 10-20 us and backwards at 100-150 us whatever their size (flash2
# 1 x 8 heads x 512: 10.3 / 124.6 us; 1 x 32 x 1024: 32.3 / 115.8 us), where the graph rows' kernels at 16 x 32 x 1024
# take 0.51 / 1.95 ms, i.e. about 31 / 119 us for 1 x 32 x 1024. A fused class prices the kernels (a step's
# host runs ahead of them), so where graph rows of a backend exist its host-bound eager rows leave both its fit and
# its check (gpu_time_rows) and the graph rows take their place; 2 of the 6 graph sequence lengths are held out.
GRAPH_HELD_OUT_SEQS = (4096, 16384)
EAGER_HOST_BOUND_SEQ = 1024


# the attn_graph families and the SDPA backend each timed (runtime/bench/ops_graphed.py)
GRAPH_ATTENTION_FAMILIES = {"attn_graph": "flash", "attn_graph_cudnn": "cudnn", "attn_graph_efficient": "efficient"}


def graph_attention_rows(rows: list[dict], backend: str = "flash") -> list[dict]:
    """attn_graph rows (pass, mode, batch, seq, heads, kv_heads, head_dim, causal, time_s) as attention rows of the
    backend (q_len = kv_len = seq); rows not timed in a graph are left out (events / host fallbacks)."""
    return [{"backend": backend, "mode": "graph", "pass": r["pass"], "batch": r["batch"], "heads": r["heads"],
             "kv_heads": r["kv_heads"], "q_len": r["seq"], "kv_len": r["seq"], "head_dim": r["head_dim"],
             "causal": r["causal"], "time_s": r["time_s"]} for r in rows if r["mode"] == "graph"]


def gpu_time_rows(rows: list[dict]) -> list[dict]:
    """The attention rows that time kernels: all but the eager training rows of <= EAGER_HOST_BOUND_SEQ tokens a
    sequence of a backend that has CUDA-graph rows (those time the host; see graph_attention_rows)."""
    graphed = {r.get("backend") for r in rows if r.get("mode") == "graph" and r["pass"] in ("fwd", "bwd")}
    return [r for r in rows if not (r.get("backend") in graphed and r.get("mode") != "graph"
                                    and r["pass"] in ("fwd", "bwd") and int(r["q_len"]) <= EAGER_HOST_BOUND_SEQ)]


def family_rows(family: str, doc: dict) -> list[dict]:
    """The rows of an ops-<family> document as the classes read them (attn_graph: as attention rows)."""
    rows = _rows(doc)
    backend = GRAPH_ATTENTION_FAMILIES.get(family)
    return rows if backend is None else graph_attention_rows(rows, backend)


def _row_features(r: dict, sms: int | None = None, shape: DecodeShape | None = None, l2_bytes: float | None = None):
    if r["pass"] == "decode":
        return decode_features(r["batch"], r["heads"], r["kv_heads"], r["kv_len"], r["head_dim"], shape=shape,
                               l2_bytes=l2_bytes, sms=sms)
    return attention_features(r["batch"], r["heads"], r["kv_heads"], r["q_len"], r["kv_len"], r["head_dim"],
                              bool(r["causal"]), r["pass"] == "bwd",
                              makespan_sms(attention_row_backend(r) or "", sms))


def hash_held_out_backends(rows: list[dict]) -> set[str]:
    """Backends whose training rows are many enough (per pass) to hold every third shape out of the fit."""
    n: dict = {}
    for r in rows:
        b = attention_row_backend(r)
        if b is not None and r["pass"] in ("fwd", "bwd") and r["time_s"] is not None:
            n[(b, r["pass"])] = n.get((b, r["pass"]), 0) + 1
    backends = {b for b, _ in n}
    return {b for b in backends if min(n.get((b, p), 0) for p in ("fwd", "bwd")) >= HASH_HOLD_OUT_MIN_ROWS}


SPARSE_FIT = 3  # fewest rows for a FLOPs-only fit (fixed + FLOPs); all three features need 5


def _fit_attention_group(pts: list) -> FeatureCost | None:
    """All three features with enough rows, else FLOPs alone (the other coefficients 0), else None."""
    X = np.array([p[0] for p in pts])
    t = np.array([p[1] for p in pts])
    if len(pts) >= X.shape[1] + 2:
        c = fit_nonneg(X, t)
        return FeatureCost(float(c[0]), tuple(float(v) for v in c[1:]), len(pts))
    if len(pts) >= SPARSE_FIT:
        c = fit_nonneg(X[:, :1], t)
        return FeatureCost(float(c[0]), (float(c[1]), 0.0, 0.0), len(pts))
    return None


def fit_attention(rows: list[dict], hold_out: bool = True,
                  leave_out: dict | None = None, sms: int | None = None) -> tuple[dict, FeatureCost | None]:
    """((backend, pass, head_dim) -> FeatureCost, decode FeatureCost) from ops-attention rows.

    Rows that time the host, not kernels, are left out first (gpu_time_rows).
    hold_out: leave out every third shape (is_held_out_attention) of the backends measured widely enough
    (hash_held_out_backends); leave_out: one row (by identity) also left out, for a leave-one-out check; sms: the
    measured GPU's SM count (the forwards' makespan feature; None: their FLOPs).
    Decode rows are those of the default backend (what SDPA runs for q_len 1)."""
    rows = gpu_time_rows(rows)
    hashed = hash_held_out_backends(rows) if hold_out else set()
    groups: dict = {}
    decode_pts: list = []
    for r in rows:
        b = attention_row_backend(r)
        if b is None or r["time_s"] is None or r is leave_out:
            continue
        if b in hashed and is_held_out_attention(r):
            continue
        pt = (_row_features(r, sms), float(r["time_s"]))
        if r["pass"] == "decode":
            if b == "cudnn":
                decode_pts.append(pt)
            continue
        groups.setdefault((b, r["pass"], int(r["head_dim"])), []).append(pt)
    att = {}
    for key, pts in groups.items():
        cost = _fit_attention_group(pts)
        if cost is None:  # too few rows at this head dim: FLOPs alone over every head dim of the backend's pass
            pooled = [p for k, v in groups.items() if k[:2] == key[:2] for p in v]
            if len(pooled) >= SPARSE_FIT:
                c = fit_nonneg(np.array([p[0][:1] for p in pooled]), np.array([p[1] for p in pooled]))
                cost = FeatureCost(float(c[0]), (float(c[1]), 0.0, 0.0), len(pooled))
        if cost is not None:
            att[key] = cost
    decode = None
    if len(decode_pts) >= 4:  # the pooled fallback: fixed + KV bytes + heads (the other decode columns 0)
        X = np.array([p[0] for p in decode_pts])
        c = fit_nonneg(X[:, :2], np.array([p[1] for p in decode_pts]))
        decode = FeatureCost(float(c[0]), tuple(float(v) for v in c[1:]) + (0.0,) * (X.shape[1] - 2), len(decode_pts))
    return att, decode


DECODE_MIN_ROWS = 8  # fewest fitted decode rows for a head_dim to get a model of its own


def _decode_groups(rows: list[dict], hold_out: bool) -> dict:
    """head_dim -> the cuDNN (SDPA default) decode rows a fit uses (every third shape held out by hold_out)."""
    groups: dict = {}
    for r in rows:
        if r["pass"] != "decode" or attention_row_backend(r) != "cudnn" or not r["time_s"]:
            continue
        if hold_out and is_held_out_attention(r):
            continue
        groups.setdefault(int(r["head_dim"]), []).append(r)
    return {hd: g for hd, g in groups.items() if len(g) >= DECODE_MIN_ROWS}


def fit_decode_by_head_dim(rows: list[dict], hold_out: bool = True, shape: DecodeShape | None = None,
                           l2_bytes: float | None = None, sms: int | None = None) -> dict:
    """head_dim -> FeatureCost over decode_features (with the fitted shape, the GPU's L2 and SMs) from the cuDNN (SDPA
    default) decode rows of that head_dim, every third shape held out as in fit_attention: SDPA's decode kernel
    changes its tiling with the head dim (head dim 256 runs about 20% slower than the pooled fit prices it)."""
    out = {}
    for hd, g in _decode_groups(rows, hold_out).items():
        X = np.array([_row_features(r, sms, shape, l2_bytes) for r in g])
        c = fit_nonneg(X, np.array([float(r["time_s"]) for r in g]))
        out[hd] = FeatureCost(float(c[0]), tuple(float(v) for v in c[1:]), len(g))
    return out


def fit_decode_shape(rows: list[dict], *, l2_bytes: float, hold_out: bool = True,
                     sms: int | None = None) -> DecodeShape | None:
    """The DecodeShape (chain from DECODE_CHAIN_RATIOS, L2 edge from L2_EDGE_CENTERS x L2_EDGE_WIDTHS) whose per-head-dim
    decode fits leave the least summed squared relative residual over the fit split; None without decode rows."""
    groups = _decode_groups(rows, hold_out)
    if not groups:
        return None
    data = []
    for g in groups.values():
        f = np.array([_row_features(r, sms) for r in g])  # [KV bytes, heads, 0, split, KV rows x head_dim, waves]
        walk = np.where(f[:, 3] == 0.0, f[:, 4], 0.0)  # the unsplit chain's KV rows x head_dim
        data.append((f, walk, np.array([float(r["time_s"]) for r in g])))
    best = None
    for chain in DECODE_CHAIN_RATIOS:
        for center in L2_EDGE_CENTERS:
            for width in L2_EDGE_WIDTHS:
                edge = L2Edge(center, width)
                ssr = 0.0
                for f, walk, t in data:
                    X = f.copy()
                    X[:, 0] = np.maximum(f[:, 0], walk * chain)
                    X[:, 2] = f[:, 0] * edge.hbm_fraction(f[:, 0], l2_bytes)
                    c = fit_nonneg(X, t)
                    ssr += float(np.sum(((c[0] + X @ c[1:]) / t - 1.0) ** 2))
                if best is None or ssr < best[0]:
                    best = (ssr, DecodeShape(chain, edge))
    return best[1]


def gpu_time_unfused_rows(rows: list[dict]) -> list[dict]:
    """The timed "unfused" rows that time kernels: all but the eager backwards under UNFUSED_BWD_MIN_SCORES scores."""
    def host_bound(r):
        return r["pass"] == "bwd" and r["batch"] * r["heads"] * r["q_len"] * r["kv_len"] < UNFUSED_BWD_MIN_SCORES

    return [r for r in rows if r.get("backend") == "unfused" and r["time_s"] and not host_bound(r)]


def fit_unfused(rows: list[dict], hold_out: bool = True, *, l2_bytes: float, edge: L2Edge | None = None) -> dict:
    """pass -> FeatureCost over unfused_features (l2_bytes: the measured GPU's L2, edge: the memory class's L2 edge)
    from the "unfused" rows that time kernels (gpu_time_unfused_rows), every third shape held out by hold_out."""
    groups: dict = {}
    for r in gpu_time_unfused_rows(rows):
        if hold_out and is_held_out_attention(r):
            continue
        f = unfused_features(r["batch"], r["heads"], r["q_len"], r["kv_len"], r["head_dim"], r["pass"] == "bwd",
                             l2_bytes, edge)
        groups.setdefault(r["pass"], []).append((f, float(r["time_s"])))
    out = {}
    for ps, pts in groups.items():
        if len(pts) >= len(pts[0][0]) + 2:
            c = fit_nonneg(np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
            out[ps] = FeatureCost(float(c[0]), tuple(float(v) for v in c[1:]), len(pts))
    return out


def is_bmm_row(r: dict) -> bool:
    """A bf16 torch.bmm row of an ops-gemm file (the batched GEMMs of unfused attention; benchmarks/validate_ops.py
    checks the GEMM model against them)."""
    return r.get("kind") == "bmm" and r.get("dtype") == "bf16" and bool(r.get("time_s"))


def fit_floor(rows: list[dict]) -> tuple[float, float]:
    """(per-kernel seconds inside a CUDA graph, per-kernel seconds launched eagerly) from ops-floor rows."""
    def per_kernel(mode):
        pts = [(r["kernels"], r["time_s"]) for r in rows if r["case"] == "tiny_add" and r["mode"] == mode]
        if len(pts) < 2:
            return float("nan")
        x, t = np.array(pts, dtype=float).T
        return float(np.polyfit(x, t, 1)[0])  # slope: the marginal kernel, launch of the batch excluded
    return per_kernel("graph"), per_kernel("eager")


# the op families each class reads: attention from the SDPA-default file (default, flash, efficient, decode),
# the forced-backend file, the long-KV decode file and the short-KV CUDA-graph decode file; memory kinds from the memory, eager_ops, act_chunked and
# memory_graph files, the norms' widths from the norm_width file's CUDA-graph rows (norm_width_rows), copies
# from the floor family's copy ladder, AdamW from the memory, optimizer and optimizer_mix files, KV-cache writes, argmax and small
# embedding gathers from the decode_kernels file (the gemm family: gemmclass)
ATTENTION_FAMILIES = ("attention", "attn_backends", "decode_attention", "decode_attn_small", *GRAPH_ATTENTION_FAMILIES)
MEMORY_FAMILIES = ("memory", "eager_ops", "act_chunked", "memory_graph", "optimizer", "optimizer_mix", "floor", "decode_kernels",
                   "decode_cold", "decode_fresh", "after_stream_large", "norm_width")


def ops_file(gpu_name: str, family: str):
    """Path of the shipped ops-<family> calibration file of a GPU (it may not exist)."""
    from c3kit.cost.calib_store import op_calibration_path

    return op_calibration_path(gpu_name, family)


@lru_cache(maxsize=16)
def op_calibration(gpu_name: str) -> OpCalibration | None:
    """The fitted op classes of a catalog GPU from its shipped ops-* files, or None when none is shipped."""
    found = {fam: p for fam in MEMORY_FAMILIES + ATTENTION_FAMILIES if (p := ops_file(gpu_name, fam)).is_file()}
    if not found:
        return None
    from c3kit.hw.catalog import get_gpu

    docs = {fam: family_rows(fam, json.loads(p.read_text())) for fam, p in found.items()}
    mem_rows = [r for fam in ("memory", "eager_ops", "act_chunked", "memory_graph") for r in docs.get(fam, ())]
    mem_rows += copy_rows(docs.get("floor", []))
    mem_rows += decode_kernel_rows(docs.get("decode_kernels", []))
    after = fit_after_stream(decode_cold_rows(docs.get("decode_cold", []), docs.get("decode_fresh", []),
                                              docs.get("after_stream_large", [])))
    mem_rows += adamw_rows([r for fam in ("memory", "optimizer", "optimizer_mix") for r in docs.get(fam, ())])
    gpu = get_gpu(gpu_name)
    mem_rows += norm_width_rows(docs.get("norm_width", []))
    edge = fit_l2_edge(mem_rows, l2_bytes=gpu.l2_bytes, sms=gpu.sms) if mem_rows else None
    row_edge = fit_row_edge(mem_rows, l2_bytes=gpu.l2_bytes, sms=gpu.sms, edge=edge) if mem_rows else None
    mem = fit_memory(mem_rows, l2_bytes=gpu.l2_bytes, sms=gpu.sms, edge=edge, row_edge=row_edge) if mem_rows else {}
    arows = [r for fam in ATTENTION_FAMILIES for r in docs.get(fam, ())] if "attention" in docs else []
    att, dec = fit_attention(arows, sms=gpu.sms) if arows else ({}, None)
    shape = fit_decode_shape(arows, l2_bytes=gpu.l2_bytes, sms=gpu.sms) if arows else None
    fg, fe = fit_floor(docs["floor"]) if "floor" in docs else (float("nan"), float("nan"))
    return OpCalibration(gpu_name, mem, att, dec, fg, fe, {k: v.name for k, v in found.items()}, gpu.l2_bytes,
                         fit_unfused(arows, l2_bytes=gpu.l2_bytes, edge=edge), fit_decode_by_head_dim(arows, shape=shape, l2_bytes=gpu.l2_bytes, sms=gpu.sms), gpu.sms,
                         after, edge, decode_shape=shape, row_edge=row_edge)


@dataclass(frozen=True)
class ScaledCalibration:
    """An OpCalibration applied on a GPU: compute terms / flops_ratio, bandwidth terms / bw_ratio, the GPU's L2 and
    SM count (None: the measured GPU's)."""

    cal: OpCalibration
    flops_ratio: float
    bw_ratio: float
    l2_bytes: float
    sms: int | None = None

    def kind_time(self, kind: str, elements, width, itemsize: float = 2.0, cache_bytes=None):
        """Seconds of one memory-bound kernel kind over `elements` elements in rows of `width` (scalars or
        arrays; cache_bytes: kv_cache_span of the KV cache an index_copy writes into, None for one under 2 GiB);
        None when the kind is not measured here."""
        if kind in WARM_OF:
            warm = self.kind_time(WARM_OF[kind], elements, width, itemsize, cache_bytes)
            extra = self.cal.after_stream.get(kind)
            if warm is None or extra is None:
                return warm
            rows = np.asarray(elements, dtype=float) / np.maximum(np.asarray(width, dtype=float), 1.0)
            return warm + extra(rows, width)
        m = self.cal.memory.get(kind)
        if m is None and kind in MEMORY_PROXY:
            m = self.cal.memory.get(MEMORY_PROXY[kind])
        if m is None:
            return None
        t = self._fitted(kind, m, elements, width, itemsize, cache_bytes)
        low = self.kind_time(AT_LEAST[kind], elements, width, itemsize) if kind in AT_LEAST else None
        return t if low is None else np.maximum(t, low)

    def _fitted(self, kind: str, m: FeatureCost, elements, width, itemsize: float, cache_bytes=None):
        """The class's fitted seconds, bandwidth terms scaled to this GPU."""
        f = memory_features(kind, elements, width, self.l2_bytes, itemsize, sms=self.sms or self.cal.sms,
                            cache_bytes=cache_bytes, edge=self.cal.l2_edge, row_edge=self.cal.row_edge)
        n = len(m.coefs)
        if f.shape[-1] < n:  # a proxy kind (MEMORY_PROXY) has none of its model's launch-shape work
            f = np.concatenate([f, np.zeros(f.shape[:-1] + (n - f.shape[-1],))], axis=-1)
        elif f.shape[-1] > n:  # a model given without the later columns (by hand, or older) prices none of them
            f = f[..., :n]
        return m.fixed_s + f @ _scaled_coefs(m.coefs, kind, self.bw_ratio, n)

    def parts_time(self, parts, itemsize: float = 2.0):
        """Seconds of a memory-bound op as the sum of its measured kernels ((kind, elements, width), ...; an
        index_copy part may carry a fourth item, kv_cache_span of its cache); None when any part's kind is not
        measured here (the op then keeps its roofline price)."""
        total = 0.0
        for kind, elements, width, *cache in parts:
            t = self.kind_time(kind, elements, width, itemsize, cache[0] if cache else None)
            if t is None:
                return None
            total = total + t
        return total

    def attention_time(self, batch, heads, kv_heads, q_len, kv_len, head_dim, causal, backward, itemsize=2.0,
                       backend: str = "cudnn"):
        """Seconds of a fused attention backend (training: q_len == kv_len; decode: q_len 1), None when that
        backend is not measured here."""
        cal = self.cal
        dm = cal.decode_model(head_dim) if np.all(np.asarray(q_len) == 1) else None
        if dm is not None:
            shape = cal.decode_shape if cal.decode_by_hd else None  # the pooled model was fitted without one
            f = decode_features(batch, heads, kv_heads, kv_len, head_dim, itemsize, shape, self.l2_bytes, self.bw_ratio,
                                self.sms or cal.sms)
            return dm(f)
        m = cal.attention_model(bool(backward), int(np.max(head_dim)), backend)
        if m is None:
            return None
        f = attention_features(batch, heads, kv_heads, q_len, kv_len, head_dim, causal, backward,
                               makespan_sms(backend, self.sms or cal.sms))
        return m.fixed_s + f @ (np.asarray(m.coefs) / self.flops_ratio)

    def unfused_time(self, batch, heads, q_len, kv_len, head_dim, backward: bool):
        """Seconds of unfused attention from its measured class (GEMM FLOPs / flops_ratio, the score-matrix columns /
        bw_ratio, the L2 columns at this GPU's L2), None when not measured here."""
        m = self.cal.unfused.get("bwd" if backward else "fwd")
        if m is None:
            return None
        f = unfused_features(batch, heads, q_len, kv_len, head_dim, backward, self.l2_bytes, self.cal.l2_edge)
        scale = np.full(len(m.coefs), 1.0 / self.bw_ratio)
        scale[0] = 1.0 / self.flops_ratio
        return m.fixed_s + f[..., :len(m.coefs)] @ (np.asarray(m.coefs) * scale)


@lru_cache(maxsize=1024)
def _scaled_coefs(coefs: tuple, kind: str, bw_ratio: float, n: int) -> np.ndarray:
    """A memory kind's coefficients with its bandwidth terms scaled to a GPU (memory_scaling); read-only, shared."""
    out = np.asarray(coefs) * memory_scaling(kind, bw_ratio, n)
    out.flags.writeable = False
    return out


@lru_cache(maxsize=256)
def calibration_for(gpu, op_class: str) -> ScaledCalibration | None:
    """The op calibration that prices op_class on gpu (own, transferred or projected), rescaled to gpu."""
    from c3kit.cost.basis import source_gpu

    src = source_gpu(gpu.name, op_class)
    if src is None:
        return None
    cal = op_calibration(src)
    if cal is None:
        return None
    if src == gpu.name:
        return ScaledCalibration(cal, 1.0, 1.0, gpu.l2_bytes, gpu.sms)
    from c3kit.hw.catalog import get_gpu

    ref = get_gpu(src)
    return ScaledCalibration(cal, gpu.peak_flops("bf16") / ref.peak_flops("bf16"), gpu.hbm_bw / ref.hbm_bw,
                             gpu.l2_bytes, gpu.sms)
