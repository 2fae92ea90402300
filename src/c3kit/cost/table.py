"""The measured GEMM lookup table with log-space interpolation, read from calibration files.

Where calibration files live, how they are named, and their format: c3kit.cost.calib_store (the
names it defines are re-exported here for existing callers). A gemm table has at least the columns
m, n, k, dtype, time_s (optional: batch).

Lookup (GemmTable.lookup): per dtype, when the measured shapes hold a full grid over M x N x K (the
axis values that occur in many rows; other rows may lie between them), trilinear interpolation of
log(time) in (log M, log N, log K), times an alignment correction fitted to the off-grid rows: for each
of M, N and K, a factor for sizes that are multiples of 8, 16 or 32 but not of the next power of two
(cuBLAS picks other kernels and pads tiles for such sizes; grid sizes are multiples of 64), plus one
overall factor (the mean bias of interpolating between grid points), fitted by robust least squares on
log(time / trilinear); none with fewer than MIN_CORRECTION_ROWS off-grid rows. Otherwise (no full
grid) inverse-distance weighting,
in the same log space, of the 8 nearest measured log(time / curve time) ratios, applied to the
efficiency curve's time at the query. Outside the measured range of any dimension (or for a dtype
not measured) the lookup says so and the caller falls back to the efficiency model.
A batched GEMM (batch b) is looked up as M x b rows, since grouped GEMMs run as one larger launch.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import numpy as np

from c3kit.cost.calib_store import (KINDS, META_KEYS, REQUIRED_COLUMNS, calib_dir, calib_stem,  # noqa: F401
                                    calibration_path, find_calibration, gemm_columns, read_calibration, validate_calibration,
                                    write_calibration)
from c3kit.errors import CostError

def load_calibration(gpu_name: str, kind: str, root: str | Path | None = None) -> "dict | GemmTable | None":
    """The calibration of a GPU (name or alias) and kind: a GemmTable for 'gemm', the document otherwise; None if absent."""
    p = find_calibration(gpu_name, kind, root)
    if p is None:
        return None
    doc = read_calibration(p)
    return GemmTable.from_doc(doc, str(p)) if kind == "gemm" else doc


@lru_cache(maxsize=64)
def cached_gemm_table(gpu_name: str) -> "GemmTable | None":
    """load_calibration(gpu_name, 'gemm') read once per process (the shipped folder only)."""
    t = load_calibration(gpu_name, "gemm")
    return t if isinstance(t, GemmTable) else None


MIN_CORRECTION_ROWS = 12
ALIGN_CLASSES = (8, 16, 32)  # sizes with this largest power-of-two divisor (< 8 counts as 8); 64+ is the base


def align_features(m: float, n: float, k: float) -> np.ndarray:
    """[1, m is class 8, 16, 32, n ..., k ...]: the alignment correction's features of one GEMM."""
    out = [1.0]
    for v in (m, n, k):
        v = int(v)
        a = min(64, v & -v) if v > 0 else 64
        a = 8 if a < 8 else a
        out += [1.0 if a == c else 0.0 for c in ALIGN_CLASSES]
    return np.array(out)


@dataclass(frozen=True)
class _Grid:
    lm: tuple[float, ...]
    ln: tuple[float, ...]
    lk: tuple[float, ...]
    logt: np.ndarray  # shape (len(lm), len(ln), len(lk))
    corr: np.ndarray | None = None  # alignment correction coefficients (align_features), log time
    corr_rows: int = 0


@dataclass(frozen=True)
class _Scatter:
    pts: np.ndarray  # (rows, 3) log m, log n, log k
    logt: np.ndarray
    lo: tuple[float, float, float]
    hi: tuple[float, float, float]


class GemmTable:
    """Measured GEMM times by dtype with log-space interpolation (see the module docstring)."""

    def __init__(self, m, n, k, dtype, time_s, batch=None, meta: Mapping | None = None, origin: str = "<table>"):
        self.m = np.asarray(m, dtype=float)
        self.n = np.asarray(n, dtype=float)
        self.k = np.asarray(k, dtype=float)
        self.batch = np.ones_like(self.m) if batch is None else np.asarray(batch, dtype=float)
        self.dtype = [str(d) for d in dtype]
        self.time_s = np.asarray(time_s, dtype=float)
        self.meta = dict(meta or {})
        self.origin = origin
        sizes = {len(self.m), len(self.n), len(self.k), len(self.batch), len(self.dtype), len(self.time_s)}
        if len(sizes) != 1:
            raise CostError(f"{origin}: gemm table columns have different lengths")
        if len(self.m) == 0:
            raise CostError(f"{origin}: gemm table has no rows")
        if min(self.m.min(), self.n.min(), self.k.min(), self.batch.min(), self.time_s.min()) <= 0:
            raise CostError(f"{origin}: gemm table needs positive m, n, k, batch and time_s")
        self._by_dtype: dict[str, _Grid | _Scatter] = {}
        rows_m = self.m * self.batch  # batched GEMMs are indexed as M x batch rows
        for d in sorted(set(self.dtype)):
            sel = np.array([x == d for x in self.dtype])
            self._by_dtype[d] = self._build(rows_m[sel], self.n[sel], self.k[sel], self.time_s[sel])

    @staticmethod
    def _build(m, n, k, t) -> "_Grid | _Scatter":
        lm, ln, lk, lt = np.log(m), np.log(n), np.log(k), np.log(t)
        grid = _full_grid(lm, ln, lk, lt)
        if grid is not None:
            axes, cube, on = grid
            g = _Grid(*axes, cube)
            off = ~on
            if off.sum() >= MIN_CORRECTION_ROWS:
                x = np.stack([align_features(a, b, c) for a, b, c in zip(m[off], n[off], k[off])])
                r = lt[off] - np.array([_trilinear(g, q) for q in zip(lm[off], ln[off], lk[off])])
                g = _Grid(*axes, cube, _robust_lstsq(x, r), int(off.sum()))
            return g
        pts = np.stack([lm, ln, lk], axis=1)
        um, un, uk = np.unique(lm), np.unique(ln), np.unique(lk)
        return _Scatter(pts, lt, (um[0], un[0], uk[0]), (um[-1], un[-1], uk[-1]))

    def correction(self, dtype: str) -> dict | None:
        """The alignment correction of a dtype's grid as factors ({'all': f, 'm8': f, ...}), or None."""
        part = self._by_dtype.get(dtype)
        if not isinstance(part, _Grid) or part.corr is None:
            return None
        names = ["all"] + [f"{d}{c}" for d in "mnk" for c in ALIGN_CLASSES]
        return {**{nm: float(math.exp(v)) for nm, v in zip(names, part.corr)}, "rows": part.corr_rows}

    @classmethod
    def from_doc(cls, doc: Mapping, origin: str = "<calibration>") -> "GemmTable":
        """A table from a calibration document of kind 'gemm'."""
        m, n, k, batch, dtype, time_s = gemm_columns(doc, origin)
        return cls(m, n, k, dtype, time_s, batch, meta=doc["meta"], origin=origin)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list, np.ndarray]:
        """(m, n, k, batch, dtype, time_s) as arrays, one entry per measured row."""
        return self.m, self.n, self.k, self.batch, list(self.dtype), self.time_s

    def dtypes(self) -> list[str]:
        """Measured dtypes."""
        return list(self._by_dtype)

    def __len__(self) -> int:
        return len(self.time_s)

    def covers(self, m: float, n: float, k: float, dtype: str, batch: int = 1) -> bool:
        """True when (m x batch, n, k) lies inside the measured range of dtype in every dimension."""
        part = self._by_dtype.get(dtype)
        if part is None:
            return False
        q = (math.log(m * batch), math.log(n), math.log(k))
        if isinstance(part, _Grid):
            lo, hi = (part.lm[0], part.ln[0], part.lk[0]), (part.lm[-1], part.ln[-1], part.lk[-1])
        else:
            lo, hi = part.lo, part.hi
        eps = 1e-9
        return all(lo[i] - eps <= q[i] <= hi[i] + eps for i in range(3))

    def lookup(self, m: int, n: int, k: int, dtype: str, batch: int = 1, curve=None, gpu=None) -> float | None:
        """Interpolated seconds, or None outside the table (the caller then falls back)."""
        if not self.covers(m, n, k, dtype, batch):
            return None
        part = self._by_dtype[dtype]
        q = (math.log(m * batch), math.log(n), math.log(k))
        if isinstance(part, _Grid):
            v = _trilinear(part, q)
            if part.corr is not None:
                v += float(align_features(m * batch, n, k) @ part.corr)
            return math.exp(v)
        if curve is None or gpu is None:
            from c3kit.cost.efficiency import DEFAULT_CURVE

            if gpu is None:
                raise CostError("scattered gemm tables interpolate against the efficiency curve: pass gpu")
            curve = curve or DEFAULT_CURVE
        return _idw_ratio(part, q, m * batch, n, k, dtype, curve, gpu)


def _full_grid(lm, ln, lk, lt):
    """((lm, ln, lk) axes, log-time cube, on-grid mask) when the rows hold a full grid, else None.

    Axis values are those that occur in at least half as many rows as the most frequent value of the
    axis (and in more than one row); every cell of their product must be measured (repeats: median)."""
    axes, idx = [], []
    for col in (lm, ln, lk):
        u, inv, cnt = np.unique(col, return_inverse=True, return_counts=True)
        keep = (cnt >= 0.5 * cnt.max()) & (cnt >= 2) if len(u) > 1 else np.ones(1, bool)
        if len(u) > 1 and keep.sum() < 2:
            return None
        pos = np.full(len(u), -1)
        pos[keep] = np.arange(int(keep.sum()))
        axes.append(tuple(u[keep].tolist()))
        idx.append(pos[inv])
    on = (idx[0] >= 0) & (idx[1] >= 0) & (idx[2] >= 0)
    shape = tuple(len(a) for a in axes)
    cells: dict[tuple[int, int, int], list[float]] = {}
    for a, b, c, v in zip(idx[0][on], idx[1][on], idx[2][on], lt[on]):
        cells.setdefault((int(a), int(b), int(c)), []).append(float(v))
    if len(cells) != shape[0] * shape[1] * shape[2]:
        return None
    cube = np.empty(shape)
    for (a, b, c), vs in cells.items():
        cube[a, b, c] = float(np.median(vs))
    return tuple(axes), cube, on


def _robust_lstsq(x: np.ndarray, r: np.ndarray, delta: float = 0.05, ridge: float = 1.0) -> np.ndarray:
    """Huber (delta, in log time) least squares with a small ridge toward 0 (features seen rarely stay ~0)."""
    w = np.ones(len(r))
    beta = np.zeros(x.shape[1])
    reg = ridge * np.eye(x.shape[1])
    reg[0, 0] = 1e-6
    for _ in range(8):
        xw = x * w[:, None]
        beta = np.linalg.solve(x.T @ xw + reg, xw.T @ r)
        a = np.abs(r - x @ beta)
        w = np.minimum(1.0, delta / np.maximum(a, 1e-12))
    return beta


def _bracket(axis: tuple[float, ...], v: float) -> tuple[int, int, float]:
    if len(axis) == 1:
        return 0, 0, 0.0
    j = bisect.bisect_right(axis, v)
    j = min(max(j, 1), len(axis) - 1)
    lo, hi = axis[j - 1], axis[j]
    w = (v - lo) / (hi - lo)
    return j - 1, j, min(max(w, 0.0), 1.0)


def _trilinear(g: _Grid, q: tuple[float, float, float]) -> float:
    a0, a1, wa = _bracket(g.lm, q[0])
    b0, b1, wb = _bracket(g.ln, q[1])
    c0, c1, wc = _bracket(g.lk, q[2])
    t = g.logt
    out = 0.0
    for a, fa in ((a0, 1 - wa), (a1, wa)):
        if fa == 0.0:
            continue
        for b, fb in ((b0, 1 - wb), (b1, wb)):
            if fb == 0.0:
                continue
            for c, fc in ((c0, 1 - wc), (c1, wc)):
                if fc == 0.0:
                    continue
                out += fa * fb * fc * float(t[a, b, c])
    return out


def _idw_ratio(s: _Scatter, q, m, n, k, dtype, curve, gpu) -> float:
    from c3kit.cost.efficiency import curve_times

    d2 = ((s.pts - np.asarray(q)) ** 2).sum(axis=1)
    nn = np.argsort(d2)[:8]
    if d2[nn[0]] < 1e-18:
        return float(math.exp(s.logt[nn[0]]))
    pts = np.exp(s.pts[nn])
    model = curve_times(curve, gpu, pts[:, 0], pts[:, 1], pts[:, 2], [dtype] * len(nn))
    ratio = s.logt[nn] - np.log(model)
    w = 1.0 / d2[nn]
    return float(curve.gemm_time(int(m), int(n), int(k), dtype, gpu) * math.exp(float((w * ratio).sum() / w.sum())))


def c3_variant_family(variant: str) -> str:
    """The strategy family of a variant name in a 'c3' calibration table (written by `c3kit bench c3`).

    Names start with 'sm' (an SM copy kernel) or 'ce' (copy engine); 'prio' marks a high-priority
    stream and 'gemm' a GEMM confined to fewer SMs.
    """
    if "gemm" in variant and variant.startswith("ce"):
        return "dma+fewer-cus"
    if "gemm" in variant:
        return "cu-partitioned"
    if "prio" in variant and variant.startswith("sm"):
        return "prioritized"
    return "dma" if variant.startswith("ce") else "plain"
