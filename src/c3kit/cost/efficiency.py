"""GEMM efficiency curve: roofline x a size-dependent efficiency, and its least-squares fit to measurements.

For C[m, n] = A[m, k] @ B[k, n] (x batch) on a GPU with `sms` SMs/CUs:

    t = overhead + (t_math ** p + t_mem ** p) ** (1 / p)
    t_mem  = bytes / (hbm_bw * mem_frac)
    t_math = flops / (peak(dtype) * peak_frac[dtype] * s_mn * best_tile)
    s_mn   = 1 / (1 + (mn_half / max(min(m, n), d0)) ** mn_exp)   small-dimension penalty; d0 = the
             smallest tile side, below which the waste is already counted as tile padding in q
    best_tile = max over tiles (tm, tn) and split-K s in {1, s_max} of
                q ** wave_weight * tau * k_eff / (k_eff + k_half)
    q      = m n batch / (waves * sms * tm * tn),  waves = ceil(ceil(m/tm) ceil(n/tn) batch s / sms)
             (tile padding and wave quantization of output tiles over the SMs)
    tau    = 1 / (1 + tile_cost * (1/tm + 1/tn))                    smaller tiles reuse less
    k_eff  = k / s                                                   K-dependent saturation (prologue,
             epilogue and pipeline fill cost about k_half elements of K per tile)
    s_max  = min(max_split_k, sms // tiles) when a single pass fills less than half the SMs

Parameter names and defaults (DEFAULT_CURVE) are documented on EfficiencyCurve; the defaults are
plausible for a Hopper-class GPU with cuBLAS and meant to be replaced by `fit_efficiency` on a
measured gemm calibration table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np

from c3kit.errors import CostError
from c3kit.hw.model import GPU, dtype_bytes

DEFAULT_TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))

# Starting peak fractions: large bf16 cuBLAS GEMMs reach ~75-80% of the dense datasheet peak on Hopper
# (clock throttling under full tensor-core load); fp8 a little less. Assumed until fitted.
DEFAULT_PEAK_FRAC = {"bf16": 0.80, "fp16": 0.80, "fp8": 0.72, "tf32": 0.75, "fp32": 0.85}


@dataclass(frozen=True)
class EfficiencyCurve:
    """Named parameters of the GEMM efficiency curve (see the module docstring for the formula).

    peak_frac: fraction of the datasheet dense peak a large GEMM reaches, by dtype;
    default_frac: the same for dtypes not in peak_frac;
    tiles: output tile shapes (tm, tn) the library may choose from;
    tile_cost: how fast efficiency falls with smaller tiles (elements; tau = 1/(1 + c (1/tm + 1/tn)));
    wave_weight: exponent on the wave/padding quantization efficiency (1 = sharp waves, 0 = none);
    k_half: K (elements) at which the K-saturation term is 1/2;
    mn_half, mn_exp: min(M, N) at which the small-dimension term is 1/2, and its steepness (min(M, N)
        is floored at the smallest tile side: tinier dimensions pay as tile padding instead);
    mem_frac: fraction of HBM bandwidth the GEMM's compulsory traffic reaches;
    overhead: fixed seconds per GEMM (launch and tail, as measured back to back);
    blend: p of the p-norm that joins math and memory time (large p -> max);
    max_split_k: largest split-K factor considered for GEMMs with few output tiles.
    """

    peak_frac: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_PEAK_FRAC))
    default_frac: float = 0.75
    tiles: tuple[tuple[int, int], ...] = DEFAULT_TILES
    tile_cost: float = 2.0
    wave_weight: float = 1.0
    k_half: float = 96.0
    mn_half: float = 16.0
    mn_exp: float = 1.0
    mem_frac: float = 0.85
    overhead: float = 3e-6
    blend: float = 4.0
    max_split_k: int = 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "peak_frac", MappingProxyType(dict(self.peak_frac)))
        object.__setattr__(self, "tiles", tuple((int(a), int(b)) for a, b in self.tiles))
        bad = [k for k, v in self.peak_frac.items() if not 0 < v <= 1.5]
        if bad or not 0 < self.default_frac <= 1.5:
            raise CostError(f"efficiency curve: peak fractions must be in (0, 1.5], bad: {bad or ['default_frac']}")
        if not self.tiles or any(a <= 0 or b <= 0 for a, b in self.tiles):
            raise CostError("efficiency curve: needs at least one tile shape with positive sides")
        for name in ("tile_cost", "k_half", "mn_half", "overhead", "wave_weight"):
            if getattr(self, name) < 0:
                raise CostError(f"efficiency curve: {name} must be >= 0")
        if self.mn_exp <= 0 or not 0 < self.mem_frac <= 1.5 or self.blend < 1 or self.max_split_k < 1:
            raise CostError("efficiency curve: mn_exp > 0, 0 < mem_frac <= 1.5, blend >= 1, max_split_k >= 1")
        # precomputed tile constants for the hot path: (tm, tn, tm * tn, tau)
        taus = tuple((a, b, a * b, 1.0 / (1.0 + self.tile_cost * (1.0 / a + 1.0 / b))) for a, b in self.tiles)
        object.__setattr__(self, "_tile_consts", taus)
        object.__setattr__(self, "_d0", float(min(min(a, b) for a, b in self.tiles)))

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.peak_frac.items())), self.default_frac, self.tiles, self.tile_cost,
                     self.wave_weight, self.k_half, self.mn_half, self.mn_exp, self.mem_frac, self.overhead,
                     self.blend, self.max_split_k))

    def frac(self, dtype: str) -> float:
        """Peak fraction for a dtype (default_frac when not listed)."""
        return self.peak_frac.get(dtype, self.default_frac)

    def with_(self, **changes) -> "EfficiencyCurve":
        """A copy with some parameters replaced."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-ready parameters."""
        return {"peak_frac": dict(self.peak_frac), "default_frac": self.default_frac,
                "tiles": [list(t) for t in self.tiles], "tile_cost": self.tile_cost,
                "wave_weight": self.wave_weight, "k_half": self.k_half, "mn_half": self.mn_half,
                "mn_exp": self.mn_exp, "mem_frac": self.mem_frac, "overhead": self.overhead,
                "blend": self.blend, "max_split_k": self.max_split_k}

    @classmethod
    def from_dict(cls, d: Mapping) -> "EfficiencyCurve":
        """Inverse of to_dict (unknown keys are an error)."""
        known = {f for f in cls.__dataclass_fields__}
        extra = set(d) - known
        if extra:
            raise CostError(f"efficiency curve: unknown parameters {sorted(extra)}")
        d = dict(d)
        if "tiles" in d:
            d["tiles"] = tuple(tuple(t) for t in d["tiles"])
        return cls(**d)

    def tile_efficiency(self, m: int, n: int, k: int, batch: int, sms: int) -> float:
        """Best over tiles and split-K of wave/padding efficiency x tile efficiency x K saturation."""
        w, kh, msk = self.wave_weight, self.k_half, self.max_split_k
        mnb = m * n * batch
        best = 0.0
        for tm, tn, area, tau in self._tile_consts:  # type: ignore[attr-defined]
            tiles = -(-m // tm) * (-(-n // tn)) * batch
            waves = -(-tiles // sms)
            q = mnb / (waves * sms * area)
            e = (q if w == 1.0 else q ** w) * tau * k / (k + kh)
            if e > best:
                best = e
            if tiles * 2 <= sms and msk > 1:
                s = min(msk, sms // tiles, k)
                ke = k / s
                waves = -(-(tiles * s) // sms)
                q = mnb * s / (waves * sms * area)
                e = (q if w == 1.0 else q ** w) * tau * ke / (ke + kh)
                if e > best:
                    best = e
        return best

    def gemm_time(self, m: int, n: int, k: int, dtype: str, gpu: GPU, batch: int = 1) -> float:
        """Seconds for an m x n x k (x batch) GEMM of dtype on gpu under this curve."""
        if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
            raise CostError(f"GEMM sizes must be positive, got {m}x{n}x{k} x{batch}")
        flops = 2.0 * m * n * k * batch
        byts = (m * k + k * n + m * n) * dtype_bytes(dtype) * batch
        d = m if m < n else n
        if d < self._d0:  # type: ignore[attr-defined]
            d = self._d0  # type: ignore[attr-defined]
        s_mn = 1.0 / (1.0 + (self.mn_half / d) ** self.mn_exp) if self.mn_half > 0 else 1.0
        eff = self.frac(dtype) * s_mn * self.tile_efficiency(m, n, k, batch, gpu.sms)
        t_math = flops / (gpu.peak_flops(dtype) * eff)
        t_mem = byts / (gpu.hbm_bw * self.mem_frac)
        p = self.blend
        if t_math >= t_mem:
            t = t_math * (1.0 + (t_mem / t_math) ** p) ** (1.0 / p)
        else:
            t = t_mem * (1.0 + (t_math / t_mem) ** p) ** (1.0 / p)
        return self.overhead + t

    def efficiency(self, m: int, n: int, k: int, dtype: str, gpu: GPU, batch: int = 1) -> float:
        """Achieved fraction of dense peak FLOP/s for this GEMM (roofline-math time / curve time)."""
        return 2.0 * m * n * k * batch / gpu.peak_flops(dtype) / self.gemm_time(m, n, k, dtype, gpu, batch)


DEFAULT_CURVE = EfficiencyCurve()


def curve_times(curve: EfficiencyCurve, gpu: GPU, m, n, k, dtype: Sequence[str], batch=None) -> np.ndarray:
    """Vectorized EfficiencyCurve.gemm_time over arrays of shapes (same formula, numpy)."""
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    b = np.ones_like(m) if batch is None else np.asarray(batch, dtype=float)
    dts = np.asarray(list(dtype), dtype=object)
    if min(m.min(initial=1), n.min(initial=1), k.min(initial=1), b.min(initial=1)) <= 0:
        raise CostError("GEMM sizes must be positive")
    uniq = sorted(set(dts.tolist()))
    peak = np.empty_like(m)
    frac = np.empty_like(m)
    eb = np.empty_like(m)
    for d in uniq:
        sel = dts == d
        peak[sel] = gpu.peak_flops(d)
        frac[sel] = curve.frac(d)
        eb[sel] = dtype_bytes(d)
    sms = float(gpu.sms)
    mnb = m * n * b
    best = np.zeros_like(m)
    w, kh = curve.wave_weight, curve.k_half
    for tm, tn, area, tau in curve._tile_consts:  # type: ignore[attr-defined]
        tiles = np.ceil(m / tm) * np.ceil(n / tn) * b
        waves = np.ceil(tiles / sms)
        q = mnb / (waves * sms * area)
        best = np.maximum(best, q ** w * tau * k / (k + kh))
        if curve.max_split_k > 1:
            s = np.minimum(np.minimum(curve.max_split_k, np.floor(sms / tiles)), k)
            ok = (tiles * 2 <= sms) & (s >= 1)
            s = np.where(ok, s, 1.0)
            ke = k / s
            waves = np.ceil(tiles * s / sms)
            q = mnb * s / (waves * sms * area)
            best = np.where(ok, np.maximum(best, q ** w * tau * ke / (ke + kh)), best)
    d = np.maximum(np.minimum(m, n), curve._d0)  # type: ignore[attr-defined]
    s_mn = 1.0 / (1.0 + (curve.mn_half / d) ** curve.mn_exp) if curve.mn_half > 0 else 1.0
    t_math = 2.0 * m * n * k * b / (peak * frac * s_mn * best)
    t_mem = (m * k + k * n + m * n) * eb * b / (gpu.hbm_bw * curve.mem_frac)
    p = curve.blend
    hi = np.maximum(t_math, t_mem)
    lo = np.minimum(t_math, t_mem)
    return curve.overhead + hi * (1.0 + (lo / hi) ** p) ** (1.0 / p)


# ---------------------------------------------------------------------------------------------- fitting

@dataclass(frozen=True)
class FitResult:
    """A fitted curve with its errors on the rows it was fitted to (relative: |pred / meas - 1|)."""

    curve: EfficiencyCurve
    median_error: float
    mean_error: float
    max_error: float
    rows: int
    iterations: int

    def to_dict(self) -> dict:
        """JSON-ready summary."""
        return {"curve": self.curve.to_dict(), "median_error": self.median_error, "mean_error": self.mean_error,
                "max_error": self.max_error, "rows": self.rows, "iterations": self.iterations}


# parameters the fit may move, each with its transform (unconstrained x <-> parameter)
_FIT_PARAMS = ("tile_cost", "wave_weight", "k_half", "mn_half", "mn_exp", "mem_frac", "overhead", "blend")


def _pack(curve: EfficiencyCurve, dtypes: Sequence[str], names: Sequence[str]) -> np.ndarray:
    x = [math.log(curve.frac(d)) for d in dtypes]
    for nm in names:
        v = getattr(curve, nm)
        if nm == "blend":
            x.append(math.log(max(v - 1.0, 1e-3)))
        elif nm == "wave_weight":
            x.append(v)
        else:
            x.append(math.log(max(v, 1e-12)))
    return np.array(x, dtype=float)


def _unpack(x: np.ndarray, base: EfficiencyCurve, dtypes: Sequence[str], names: Sequence[str]) -> EfficiencyCurve:
    pf = dict(base.peak_frac)
    for i, d in enumerate(dtypes):
        pf[d] = float(min(math.exp(min(max(x[i], -20.0), 0.4)), 1.5))
    ch: dict = {"peak_frac": pf}
    for j, nm in enumerate(names):
        v = min(max(float(x[len(dtypes) + j]), -30.0), 30.0)  # keep exp() finite and non-zero
        if nm == "blend":
            ch[nm] = 1.0 + math.exp(min(v, 4.0))
        elif nm == "mn_exp":
            ch[nm] = max(math.exp(min(v, 3.0)), 1e-3)
        elif nm == "wave_weight":
            ch[nm] = min(max(v, 0.0), 3.0)
        elif nm == "mem_frac":
            ch[nm] = min(math.exp(min(v, 0.4)), 1.5)
        else:
            ch[nm] = math.exp(v)
    return replace(base, **ch)


def _rows_of(data) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list, np.ndarray]:
    """(m, n, k, batch, dtype, time_s) of a GemmTable (anything with .arrays()) or a calibration document."""
    arrays = getattr(data, "arrays", None)
    if callable(arrays):
        return arrays()
    if isinstance(data, Mapping) and "columns" in data:
        from c3kit.cost.calib_store import gemm_columns

        m, n, k, batch, dtype, time_s = gemm_columns(data)
        m = np.asarray(m, dtype=float)
        return (m, np.asarray(n, dtype=float), np.asarray(k, dtype=float),
                np.ones_like(m) if batch is None else np.asarray(batch, dtype=float), [str(d) for d in dtype],
                np.asarray(time_s, dtype=float))
    raise CostError("fit_efficiency needs a GemmTable or a calibration document of kind 'gemm'")


LARGE_TILES: tuple[tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128))
SKINNY_TILES: tuple[tuple[int, int], ...] = DEFAULT_TILES + ((32, 128), (128, 32), (16, 256), (256, 16))


def _huber(r: np.ndarray, delta: float) -> float:
    a = np.abs(r)
    return float(np.where(a <= delta, 0.5 * a * a, delta * (a - 0.5 * delta)).sum()) if delta > 0 else float(r @ r)


def fit_efficiency(data, gpu: GPU, init: EfficiencyCurve | None = None, fit: Sequence[str] = _FIT_PARAMS,
                   max_iter: int = 60, starts: int = 3, robust: float = 0.05,
                   tile_sets: Sequence[tuple[tuple[int, int], ...]] | None = None) -> FitResult:
    """Fit the curve's parameters to a gemm calibration table by (Huber-robust) least squares on log time.

    Continuous parameters (`fit`) by Levenberg-Marquardt from several starts, then Huber IRLS with
    threshold `robust` (in log time; 0 = plain least squares); the tile set, which is discrete, is
    chosen among `tile_sets` (default: init's tiles, LARGE_TILES, SKINNY_TILES) by the lower loss.
    """
    m, n, k, b, dts, t = _rows_of(data)
    if len(t) < 3:
        raise CostError(f"fit_efficiency needs at least 3 measured GEMMs, got {len(t)}")
    if np.any(t <= 0):
        raise CostError("fit_efficiency: measured times must be positive")
    unknown = set(fit) - set(_FIT_PARAMS)
    if unknown:
        raise CostError(f"fit_efficiency: cannot fit {sorted(unknown)}; fittable: {', '.join(_FIT_PARAMS)}")
    init = init or DEFAULT_CURVE
    if tile_sets is None:
        tile_sets = [init.tiles] + [ts for ts in (LARGE_TILES, SKINNY_TILES) if ts != init.tiles]
    dtypes = sorted(set(dts))
    names = [p for p in _FIT_PARAMS if p in fit]
    logt = np.log(t)
    best: tuple[float, EfficiencyCurve, np.ndarray] | None = None
    total_it = 0
    for tiles in tile_sets:
        base = init.with_(tiles=tuple(tiles))
        curve, r, it = _fit_one(base, gpu, m, n, k, b, dts, logt, dtypes, names, max_iter, starts, robust)
        total_it += it
        loss = _huber(r, robust)
        if best is None or loss < best[0]:
            best = (loss, curve, r)
    assert best is not None
    err = np.abs(np.exp(best[2]) - 1.0)
    return FitResult(best[1], float(np.median(err)), float(np.mean(err)), float(np.max(err)), len(t), total_it)


def _fit_one(base, gpu, m, n, k, b, dts, logt, dtypes, names, max_iter, starts, robust):
    """One tile set: multi-start LM, then Huber IRLS; (curve, log residuals, iterations)."""

    def resid(x: np.ndarray) -> np.ndarray:
        c = _unpack(x, base, dtypes, names)
        return np.log(curve_times(c, gpu, m, n, k, dts, b)) - logt

    x0 = _pack(base, dtypes, names)
    starts_x = [x0]
    # other starts: different K saturation and tile-cost scales (the least smooth directions)
    for kh, tc in ((32.0, 1.0), (256.0, 16.0), (512.0, 2.0))[: max(0, starts - 1)]:
        xs = x0.copy()
        for j, nm in enumerate(names):
            if nm == "k_half":
                xs[len(dtypes) + j] = math.log(kh)
            if nm == "tile_cost":
                xs[len(dtypes) + j] = math.log(tc)
        starts_x.append(xs)
    best_x, best_cost, total_it = x0, float("inf"), 0
    for xs in starts_x:
        x, cost, it = _levenberg_marquardt(resid, xs, max_iter)
        total_it += it
        if cost < best_cost:
            best_x, best_cost = x, cost
    if robust > 0:
        # Huber loss by iteratively reweighted least squares: shapes the curve cannot describe (a
        # library's special kernel for one shape class) must not pull the fit away from the rest,
        # since what matters is the typical (median) error
        for _ in range(4):
            r = np.abs(resid(best_x))
            w = np.sqrt(np.minimum(1.0, robust / np.maximum(r, 1e-12)))
            x, _, it = _levenberg_marquardt(lambda z: resid(z) * w, best_x, max_iter)
            total_it += it
            best_x = x
    return _unpack(best_x, base, dtypes, names), resid(best_x), total_it


def _levenberg_marquardt(f, x0: np.ndarray, max_iter: int) -> tuple[np.ndarray, float, int]:
    """Minimize |f(x)|^2 with a forward-difference Jacobian; robust to the curve's kinks (damping)."""
    x = x0.astype(float).copy()
    r = f(x)
    cost = float(r @ r)
    lam = 1e-2
    it = 0
    for it in range(1, max_iter + 1):
        h = 1e-4 * np.maximum(1.0, np.abs(x))
        jac = np.empty((r.size, x.size))
        for i in range(x.size):
            xp = x.copy()
            xp[i] += h[i]
            jac[:, i] = (f(xp) - r) / h[i]
        g = jac.T @ r
        a = jac.T @ jac
        improved = False
        for _ in range(8):
            try:
                step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-9), -g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            xn = x + step
            rn = f(xn)
            cn = float(rn @ rn)
            if np.isfinite(cn) and cn < cost:
                improved = cost - cn > 1e-12 * max(cost, 1e-30)
                x, r, cost = xn, rn, cn
                lam = max(lam / 3, 1e-7)
                break
            lam *= 4
        if not improved:
            break
    return x, cost, it


def relative_errors(curve: EfficiencyCurve, data, gpu: GPU) -> np.ndarray:
    """|predicted / measured - 1| for every row of a gemm table (to check a fit on held-out shapes)."""
    m, n, k, b, dts, t = _rows_of(data)
    return np.abs(curve_times(curve, gpu, m, n, k, dts, b) / t - 1.0)
