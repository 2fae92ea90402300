"""Op classes beyond GEMMs priced from measured rows: memory-bound kinds, attention (training and decode)
and the per-kernel floor, each a small physical model whose few parameters are fitted to op-level
measurements (runtime/bench/ops.py), never to step times.

- memory-bound kind k: t = a_k + bytes / B_k (a_k: the kernel's fixed cost; B_k: its achieved bandwidth).
- attention forward / backward (flash-style, causal): t = a + F x (1 + tile / kv_len) / R_(pass, head_dim)
  + bytes / B, with F the causal FLOPs; the (1 + tile / kv_len) term is the diagonal tiles' waste.
- decode attention (q_len 1): t = a + KV bytes / B_decode.
- kernel floor: the graph-replay time of a one-element kernel (per kernel inside a CUDA graph) and the
  eager per-kernel time (host launch included).

Fits weight every row by 1 / time (relative least squares). The measured files are found through
the calibration store (`calibration_path`); a GPU without them is priced by the roofline with the
documented efficiencies of cost/model.py, and `basis` says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from c3kit.errors import CostError

ATTN_TILE = 128  # query / key tile of the flash kernels on Hopper (FlashAttention-2/3 use 128 for d <= 128)
HELD_OUT_WIDTH = 5120  # memory-bound rows of this width are held out of the fit (benchmarks/validate_ops.py)


def _rows(doc: dict) -> list[dict]:
    return [dict(zip(doc["columns"], r)) for r in doc["rows"]]


def fit_linear(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """(a, s) minimising sum(((a + s x) / t - 1)^2) with a, s >= 0: fixed cost and seconds per unit of x."""
    x = np.asarray(x, dtype=float)
    t = np.asarray(t, dtype=float)
    if len(t) < 2 or np.any(t <= 0):
        raise CostError("fit_linear needs at least two rows with positive times")
    A = np.column_stack([1.0 / t, x / t])
    (a, s), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    if a < 0:  # no negative fixed cost: refit through the origin
        a, s = 0.0, float(np.sum(x / t) / np.sum((x / t) ** 2))
    if s < 0:
        a, s = float(np.median(t)), 0.0
    return float(a), float(s)


@dataclass(frozen=True)
class LinearCost:
    """t = fixed_s + units x per_unit_s; `units` is bytes for memory-bound kinds, FLOPs for attention math."""

    fixed_s: float
    per_unit_s: float
    n_rows: int = 0

    def __call__(self, units):
        """Seconds for `units` (float or numpy array)."""
        return self.fixed_s + np.asarray(units, dtype=float) * self.per_unit_s

    @property
    def rate(self) -> float:
        """Units per second at large sizes (achieved bandwidth or FLOP/s)."""
        return 1.0 / self.per_unit_s if self.per_unit_s > 0 else float("inf")


def attention_flops(batch, heads, q_len, kv_len, head_dim, causal: bool, backward: bool):
    """FLOPs of QK^T and PV as c3kit counts them (Attention.flops), for arrays as well as scalars."""
    f = 4.0 * np.asarray(batch, float) * heads * q_len * kv_len * head_dim
    if causal:
        f = np.where(np.asarray(q_len) == np.asarray(kv_len), 0.5 * f, f)
    return f * (2.5 if backward else 1.0)


def attention_work(batch, heads, q_len, kv_len, head_dim, causal: bool, backward: bool):
    """FLOPs including the causal diagonal tiles that a tiled kernel computes and masks."""
    f = attention_flops(batch, heads, q_len, kv_len, head_dim, causal, backward)
    if causal:
        f = f * (1.0 + ATTN_TILE / np.asarray(kv_len, float))
    return f


@dataclass(frozen=True)
class OpCalibration:
    """Fitted op-class models of one GPU and where they came from."""

    gpu: str
    memory: dict  # kind -> LinearCost over bytes
    attention: dict  # (pass, head_dim) -> LinearCost over attention_work FLOPs; pass in fwd / bwd
    decode: LinearCost | None  # over KV-cache bytes
    floor_graph_s: float
    floor_eager_s: float
    origin: dict  # family -> file name

    def memory_time(self, kind: str, nbytes):
        """Seconds of a memory-bound op of this kind moving nbytes, or None when the kind is not measured."""
        m = self.memory.get(kind)
        return None if m is None else m(nbytes)

    def attention_time(self, batch, heads, kv_heads, q_len, kv_len, head_dim, causal, backward, itemsize=2.0):
        """Seconds of SDPA (training: q_len == kv_len; decode: q_len 1), None when not measured here."""
        if np.all(np.asarray(q_len) == 1) and self.decode is not None:
            kv_bytes = 2.0 * np.asarray(batch, float) * kv_heads * kv_len * head_dim * itemsize
            return self.decode(kv_bytes)
        key = ("bwd" if backward else "fwd", int(head_dim) if np.ndim(head_dim) == 0 else None)
        m = self.attention.get(key) or self._nearest_head_dim(key)
        if m is None:
            return None
        return m(attention_work(batch, heads, q_len, kv_len, head_dim, causal, backward))

    def _nearest_head_dim(self, key):
        cands = [k for k in self.attention if k[0] == key[0]]
        if not cands or key[1] is None:
            return None
        return self.attention[min(cands, key=lambda k: abs(k[1] - key[1]))]


def fit_memory(rows: list[dict], held_out_width: int | None = HELD_OUT_WIDTH) -> dict:
    """kind -> LinearCost from ops-memory rows (rows of held_out_width are left out of the fit)."""
    from c3kit.workload.memops import MEMOP_KINDS, memop_traffic

    groups: dict = {}
    for r in rows:
        kind = _memory_kind(r)
        if kind is None or kind not in MEMOP_KINDS or r["time_s"] is None:
            continue
        if held_out_width is not None and int(r["width"]) == held_out_width:
            continue
        nbytes = memop_traffic(kind, float(r["tokens"]) * float(r["width"]), 2.0)[0]
        groups.setdefault(kind, []).append((nbytes, float(r["time_s"])))
    out = {}
    for kind, pts in groups.items():
        if len(pts) >= 2:
            x, t = np.array(pts).T
            out[kind] = LinearCost(*fit_linear(x, t), n_rows=len(pts))
    return out


def _memory_kind(r: dict) -> str | None:
    """The MEMOP_KINDS name of an ops-memory row ("rmsnorm" + "bwd" -> "rmsnorm.bwd")."""
    op, ps = str(r["op"]), str(r["pass"])
    if ps == "fwd":
        return op
    if ps == "bwd":
        return op + ".bwd"
    return None


def is_held_out_attention(r: dict) -> bool:
    """Attention rows held out of the fit: every third shape by a fixed hash of its sizes."""
    return (int(r["batch"]) * 7 + int(r["heads"]) * 3 + int(r["kv_heads"]) + int(r["kv_len"]) // 512) % 3 == 0


def fit_attention(rows: list[dict], hold_out: bool = True) -> tuple[dict, LinearCost | None]:
    """((pass, head_dim) -> LinearCost, decode LinearCost) from ops-attention rows of the default backend."""
    groups: dict = {}
    dec = []
    for r in rows:
        if r["backend"] != "default" or r["time_s"] is None or (hold_out and is_held_out_attention(r)):
            continue
        if r["pass"] == "decode":
            kv_bytes = 2.0 * r["batch"] * r["kv_heads"] * r["kv_len"] * r["head_dim"] * 2.0
            dec.append((kv_bytes, r["time_s"]))
            continue
        w = attention_work(r["batch"], r["heads"], r["q_len"], r["kv_len"], r["head_dim"], bool(r["causal"]),
                           r["pass"] == "bwd")
        groups.setdefault((r["pass"], int(r["head_dim"])), []).append((float(w), float(r["time_s"])))
    att = {}
    for key, pts in groups.items():
        if len(pts) >= 2:
            x, t = np.array(pts).T
            att[key] = LinearCost(*fit_linear(x, t), n_rows=len(pts))
    decode = None
    if len(dec) >= 2:
        x, t = np.array(dec).T
        decode = LinearCost(*fit_linear(x, t), n_rows=len(dec))
    return att, decode


def fit_floor(rows: list[dict]) -> tuple[float, float]:
    """(per-kernel seconds inside a CUDA graph, per-kernel seconds launched eagerly) from ops-floor rows."""
    def per_kernel(mode):
        pts = [(r["kernels"], r["time_s"]) for r in rows if r["case"] == "tiny_add" and r["mode"] == mode]
        if len(pts) < 2:
            return float("nan")
        x, t = np.array(pts, dtype=float).T
        return float(np.polyfit(x, t, 1)[0])  # slope: the marginal kernel, launch of the batch excluded
    return per_kernel("graph"), per_kernel("eager")


@lru_cache(maxsize=16)
def op_calibration(gpu_name: str) -> OpCalibration | None:
    """The fitted op classes of a catalog GPU from its shipped ops-* files, or None when none is shipped."""
    from c3kit.cost.calib_store import OP_FAMILIES, op_calibration_path

    found = {}
    for fam in OP_FAMILIES:
        p = op_calibration_path(gpu_name, fam)
        if p.is_file():
            found[fam] = p
    if not found:
        return None
    docs = {fam: json.loads(p.read_text()) for fam, p in found.items()}
    mem = fit_memory(_rows(docs["memory"])) if "memory" in docs else {}
    att, dec = fit_attention(_rows(docs["attention"])) if "attention" in docs else ({}, None)
    fg, fe = fit_floor(_rows(docs["floor"])) if "floor" in docs else (float("nan"), float("nan"))
    return OpCalibration(gpu_name, mem, att, dec, fg, fe, {k: v.name for k, v in found.items()})


@dataclass(frozen=True)
class ScaledCalibration:
    """An OpCalibration applied on another GPU: compute rates x flops_ratio, bandwidths x bw_ratio."""

    cal: OpCalibration
    flops_ratio: float
    bw_ratio: float

    def memory_time(self, kind: str, nbytes):
        """Seconds of a memory-bound op (bandwidth term rescaled), None when the kind is not measured."""
        m = self.cal.memory.get(kind)
        if m is None:
            return None
        return m.fixed_s + np.asarray(nbytes, dtype=float) * m.per_unit_s / self.bw_ratio

    def attention_time(self, batch, heads, kv_heads, q_len, kv_len, head_dim, causal, backward, itemsize=2.0):
        """Seconds of attention (FLOP term / flops_ratio, decode KV term / bw_ratio), None when not measured."""
        cal = self.cal
        if np.all(np.asarray(q_len) == 1) and cal.decode is not None:
            kv_bytes = 2.0 * np.asarray(batch, float) * kv_heads * kv_len * head_dim * itemsize
            return cal.decode.fixed_s + kv_bytes * cal.decode.per_unit_s / self.bw_ratio
        key = ("bwd" if backward else "fwd", int(head_dim) if np.ndim(head_dim) == 0 else None)
        m = cal.attention.get(key) or cal._nearest_head_dim(key)
        if m is None:
            return None
        w = attention_work(batch, heads, q_len, kv_len, head_dim, causal, backward)
        return m.fixed_s + w * m.per_unit_s / self.flops_ratio


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
        return ScaledCalibration(cal, 1.0, 1.0)
    from c3kit.hw.catalog import get_gpu

    ref = get_gpu(src)
    return ScaledCalibration(cal, gpu.peak_flops("bf16") / ref.peak_flops("bf16"), gpu.hbm_bw / ref.hbm_bw)
