"""Attention priced by the backend that runs it (workload.attention.BACKENDS).

- Fused backends (cudnn, flash2, flash1, efficient): the GPU's measured class of that backend (cost/opclass.py,
  own or transferred through cost/basis.py); a backend that class lacks (or every backend, without one) runs
  at the rate of the published rows of its kernel on this GPU (cost/published.py: flash1 on the A100 and the
  H100 from FlashAttention (v1)'s published figures); without either, the roofline with the cost model's
  attn_eff and mem_eff ("datasheet").
- unfused: on a GPU with a measured unfused class (the H200's rows: matmul, scale, masked_fill, softmax,
  matmul; the H100 by transfer) that class: streaming the score matrix, from HBM past the L2 edge, its long
  softmax rows and the mask's re-reads (opclass.unfused_features). Megatron-LM's path has the same two
  batched GEMMs and instead of the scale and masked_fill passes one fused scale-mask-softmax and a dropout
  pass: about the same traffic over the score matrix, not measured separately. Elsewhere the sum of its
  kernels (workload.attention.unfused_parts): the batched GEMMs by the cost model's GEMM pricing, the
  softmax and dropout kernels from the measured memory-bound class (opclass.MEMORY_PROXY), else their bytes
  at HBM bandwidth x mem_eff. On the H200 that sum is well below the measured rows' time
  (benchmarks/validate_ops.py prints it as a reference: the timed code runs more kernels than Megatron's
  path, and its kernels run slower than their prices, not yet profiled): optimistic.
- An op without a backend ("") runs the GPU's default: what current PyTorch's SDPA picks there
  (cost/data/attention_backends.toml).
- Context parallelism (an op marked balanced: this rank's load-balanced q_len = kv_len / cp queries
  against the whole kv_len): ring attention, one call of the backend per ring step, as torch's context
  parallelism runs it (workload.cp_torch.sdpa_calls): the own chunk causally (q_len x q_len), then cp - 1
  steps in which, on cp rank r, step i runs the whole local queries against the first half of the received
  chunk (q_len x q_len / 2) when i <= r, else the second half of the queries against all of it
  (q_len / 2 x q_len), neither causal. The last rank runs only the first shape, the first only the second:
  the busiest rank takes the slower of the two at every step. Their FLOPs sum to the balanced count; each
  call pays the class's fixed cost. The measured rows are causal: the non-causal steps take the class's
  FLOP rate as measured on causal shapes (not yet measured).
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from functools import lru_cache
from importlib import resources

import numpy as np

from c3kit.workload.attention import BACKENDS, UNFUSED_GEMM, check_backend, unfused_parts


@lru_cache(maxsize=1)
def _doc() -> dict:
    text = resources.files("c3kit.cost").joinpath("data", "attention_backends.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


@lru_cache(maxsize=1)
def _defaults() -> tuple[dict, str]:
    doc = _doc()
    table = {name: (str(v["backend"]), str(v["source"])) for name, v in doc.get("default", {}).items()}
    for b, _ in table.values():
        check_backend(b)
    return table, check_backend(str(doc["other"]))


@lru_cache(maxsize=1)
def _ratios() -> dict[str, tuple[str, str]]:
    """backend -> (the backend it is priced from, the GPU whose published rows give the rate ratio)."""
    out = {}
    for name, v in _doc().get("ratio", {}).items():
        out[check_backend(name)] = (check_backend(str(v["of"])), str(v["rows"]))
    return out


def ratio_transfer(backend: str, gpu_name: str) -> tuple[str, str] | None:
    """(other backend, rows GPU) where backend is priced on this GPU as the other backend's time x their published
    rate ratio on the rows GPU (cost/data/attention_backends.toml [ratio]): backend has no measured class and no
    published rows here, and the other backend is not on the datasheet here; else None."""
    hit = _ratios().get(backend)
    if hit is None:
        return None
    basis = _own_basis(gpu_name)
    return hit if basis[backend] == "datasheet" and basis[hit[0]] != "datasheet" else None


def rate_ratio(backend: str, gpu_name: str, head_dim, causal: bool, seq):
    """ratio_transfer's factor on this GPU: the other backend's published rate over backend's on the rows GPU at
    this head dim, causality and sequence length (cost/published.attention_fraction; scalars or arrays)."""
    from c3kit.cost.published import attention_fraction

    of, rows = _ratios()[backend]
    hd, sq = np.broadcast_arrays(np.asarray(head_dim), np.asarray(seq))
    memo: dict = {}
    out = np.empty(hd.shape)
    for i, key in enumerate(zip(hd.ravel().tolist(), sq.ravel().tolist())):
        if key not in memo:
            memo[key] = (attention_fraction(rows, 1.0, of, int(key[0]), causal, key[1]) /
                         attention_fraction(rows, 1.0, backend, int(key[0]), causal, key[1]))
        out.flat[i] = memo[key]
    return out if out.ndim else float(out)


def default_backend(gpu_name: str) -> str:
    """The backend current PyTorch's SDPA picks on this GPU (cost/data/attention_backends.toml)."""
    from c3kit.cost.basis import catalog_name

    table, other = _defaults()
    hit = table.get(catalog_name(gpu_name))
    return hit[0] if hit else other


def default_source(gpu_name: str) -> str:
    """Where default_backend's answer for this GPU comes from."""
    from c3kit.cost.basis import catalog_name

    table, _ = _defaults()
    hit = table.get(catalog_name(gpu_name))
    return hit[1] if hit else "PyTorch SDPA priority order (flash first) for GPUs without a listed default"


def resolve_backend(backend: str, gpu_name: str) -> str:
    """backend itself, or the GPU's default for ""."""
    return check_backend(backend) or default_backend(gpu_name)


def attention_basis(gpu_name: str) -> dict[str, str]:
    """backend -> "measured" | "transferred from X" | ... | "datasheet" on this GPU, for every backend.

    Fused backends: the basis of the attention class where that backend has rows in it, else published rows of
    its kernel on this GPU, else a rate-ratio transfer from another backend (ratio_transfer), else datasheet;
    unfused: that of its parts (batched GEMMs: the GEMM class; softmax and dropout: the memory class)."""
    out = dict(_own_basis(gpu_name))
    for k in out:
        hit = ratio_transfer(k, gpu_name)
        if hit is not None:
            out[k] = f"{out[hit[0]]} {hit[0]} x published {k}/{hit[0]} rate ratio of {hit[1]}"
    return out


def _own_basis(gpu_name: str) -> dict[str, str]:
    """attention_basis without rate-ratio transfers (what each backend's own rows give)."""
    from c3kit.cost.basis import basis, source_gpu
    from c3kit.cost.opclass import op_calibration
    from c3kit.cost.published import attention_labels

    b = basis(gpu_name)
    src = source_gpu(gpu_name, "attention")
    cal = op_calibration(src) if src else None
    measured = set(cal.attention_backends()) if cal else set()
    _published = attention_labels(gpu_name)  # cost/published.py
    out = {k: (b["attention"] if k in measured else _published.get(k, "datasheet")) for k in BACKENDS if k != "unfused"}
    out["unfused"] = (b["attention"] if cal is not None and cal.unfused else
                      f"batched GEMMs: {b['gemm']}; softmax/dropout: {b['memory']}")
    return out


def _cal(hw, op_class: str):
    from c3kit.cost.opclass import calibration_for

    return calibration_for(hw, op_class)


def unfused_breakdown(batch, heads, q_len, kv_len, head_dim, backward: bool, dropout: bool, hw, model,
                      dtype: str = "bf16", *, price) -> list[tuple[str, float]]:
    """(kernel, seconds) of every kernel of one unfused attention on hw under the cost model; price is
    c3kit.cost.time (passed in: this module sits below the package that dispatches to it)."""
    from c3kit.hw.model import dtype_bytes
    from c3kit.workload.memops import memop_traffic
    from c3kit.workload.ops import Gemm, MemOp

    eb = dtype_bytes(dtype)
    gemms, mems = unfused_parts(batch, heads, q_len, kv_len, head_dim, backward, dropout)
    mem = _cal(hw, "memory") if model.kind != "roofline" else None
    out = []
    for g, m, n, k in gemms:
        t = price(Gemm(UNFUSED_GEMM, int(m), int(n), int(k), dtype, int(g)), hw, model)
        out.append((f"bmm {m}x{n}x{k} x{g}", float(t)))
    for kind, elements, width in mems:
        t = mem.kind_time(kind, elements, width, eb) if mem is not None else None
        if t is None:
            nbytes, flops = memop_traffic(kind, float(elements), eb)
            t = price(MemOp("unfused." + kind, nbytes, flops), hw, model)
        out.append((kind, float(t)))
    return out


def attention_time(op, hw, model, price) -> float:
    """Seconds of one workload.ops.Attention on hw under the cost model, by its backend (price: c3kit.cost.time,
    for the kernels of unfused attention)."""
    from c3kit.cost.roofline import roofline_time
    from c3kit.hw.model import dtype_bytes

    backend = resolve_backend(op.backend, hw.name)
    hit = ratio_transfer(backend, hw.name) if model.kind != "roofline" else None
    if hit is not None:
        return attention_time(replace(op, backend=hit[0]), hw, model, price) * rate_ratio(
            backend, hw.name, op.head_dim, op.causal, op.kv_len)
    if backend == "unfused":
        cal = _cal(hw, "attention") if model.kind != "roofline" else None
        t = cal.unfused_time(op.batch, op.heads, op.q_len, op.kv_len, op.head_dim, op.backward) if cal else None
        if t is not None:
            return float(t)
        return sum(t for _, t in unfused_breakdown(op.batch, op.heads, op.q_len, op.kv_len, op.head_dim, op.backward,
                                                   op.dropout, hw, model, op.dtype, price=price))
    if model.kind != "roofline":
        cal = _cal(hw, "attention")
        if cal is not None:
            t = _fused(cal, op.batch, op.heads, op.kv_heads, op.q_len, op.kv_len, op.head_dim, op.causal,
                       op.backward, op.balanced, backend, dtype_bytes(op.dtype))
            if t is not None:
                return float(t)
    from c3kit.cost.published import attention_eff

    return roofline_time(op, hw, attention_eff(op, hw, backend, model), model.mem_eff)  # published rows, else attn_eff


def _fused(cal, batch, heads, kv_heads, q_len, kv_len, head_dim, causal, backward, balanced, backend, itemsize):
    """A measured fused backend's time (scalars or arrays); ring steps for balanced (context-parallel) chunks."""
    if not balanced:
        return cal.attention_time(batch, heads, kv_heads, q_len, kv_len, head_dim, causal, backward, itemsize,
                                  backend)
    own = cal.attention_time(batch, heads, kv_heads, q_len, q_len, head_dim, True, backward, itemsize, backend)
    if own is None:
        return None
    steps = np.asarray(kv_len) // np.asarray(q_len) - 1
    half_q = cal.attention_time(batch, heads, kv_heads, np.asarray(q_len) // 2, q_len, head_dim, False, backward,
                                itemsize, backend)
    half_kv = cal.attention_time(batch, heads, kv_heads, q_len, np.asarray(q_len) // 2, head_dim, False, backward,
                                 itemsize, backend)
    return own + steps * np.maximum(half_q, half_kv)


def attention_rows(shape, hw, model, n: int, sel=None, *, price) -> np.ndarray | None:
    """attention_time over the scenarios of a layer-description AttnShape (arrays) on one GPU; None where
    the fused roofline the caller already has stands (fused backend without a measured class)."""
    def arr(v):
        a = np.broadcast_to(np.asarray(v), (n,))
        return a if sel is None else a[sel]

    from c3kit.cost.published import published_rows

    a = {k: arr(getattr(shape, k)) for k in ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim")}
    backend = resolve_backend(shape.backend, hw.name)
    hit = ratio_transfer(backend, hw.name) if model.kind != "roofline" else None
    if hit is not None:
        t = attention_rows(replace(shape, backend=hit[0]), hw, model, n, sel, price=price)
        return None if t is None else t * rate_ratio(backend, hw.name, a["head_dim"], shape.causal, a["kv_len"])
    if backend == "unfused":  # as attention_time: the measured class, else the kernels one scenario at a time
        cal = _cal(hw, "attention") if model.kind != "roofline" else None
        t = cal.unfused_time(a["batch"], a["heads"], a["q_len"], a["kv_len"], a["head_dim"], shape.backward) \
            if cal else None
        if t is not None:
            return t
        return np.array([sum(t for _, t in unfused_breakdown(int(b), int(h), int(q), int(kv), int(d), shape.backward,
                                                             shape.dropout, hw, model, price=price))
                         for b, h, q, kv, d in zip(a["batch"], a["heads"], a["q_len"], a["kv_len"], a["head_dim"])])
    if model.kind == "roofline":
        return None
    cal = _cal(hw, "attention")
    t = None if cal is None else _fused(cal, a["batch"], a["heads"], a["kv_heads"], a["q_len"], a["kv_len"],
                                         a["head_dim"], shape.causal, shape.backward, shape.balanced, backend, 2.0)
    # a backend the measured class lacks: its published rows (cost/published.py); None without rows
    return t if t is not None else published_rows(a, shape, backend, hw, model, price)
