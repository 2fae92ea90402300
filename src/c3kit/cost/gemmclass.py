"""GEMM op classes beyond the big-GEMM curve, fitted to measured rows (runtime/bench/ops.py bench_gemm,
the '<gpu>-ops-gemm.json' calibration file), never to step times:

- small-M GEMM / GEMV (decode; M <= SMALL_M_MAX rows, one GEMM): a weight-streaming memory term whose
  achieved bandwidth grows with the output width N (few output columns keep few SMs streaming) and a
  math term over M padded to the kernel's M tile, joined by a p-norm, plus a fixed cost:
      t = fixed + (t_mem^p + t_math^p)^(1/p),  t_mem = bytes / bw x (1 + n_half / N),
      t_math = 2 ceil(M / tm) tm N K / peak
- grouped GEMM (MoE experts, torch._grouped_mm: `groups` GEMMs of M x N x K in one launch; TiledGroupedGemm):
  the weight-streaming term of all groups and a math term in waves of 128 x 128 output tiles over the SMs, each
  tile a fixed part (prologue, epilogue) plus its K loop, joined by a p-norm:
      t = fixed + (t_mem^p + t_math^p)^(1/p),  t_mem = bytes / bw,
      t_math = ceil(tiles / SMs) x (per_tile + 2 x 128 x 128 x K / tile_rate),
      tiles = ceil(N / 128) x sum over groups of ceil(M_g / 128).
  Balanced groups have M_g = M; routed ones (routed=True: each of the groups x M rows sent to a group uniformly at
  random, as the moe_train rows were and as a router spreads tokens) the expected sum (expected_row_tiles): the
  per-expert tails that make routed rows slower than balanced ones of the same mean.
- grouped wgrad (the weight gradient of MoE experts: per group a K x N output reduced over the group's M rows):
  wave quantization over the SMs (WaveGemm): the output tiles of all groups run one per SM a wave, each tile's
  time a fixed part (prologue, epilogue: writing the tile) plus a part per row of the reduction,
      t = fixed + ceil(groups x ceil(K / 128) x ceil(N / 128) / SMs) x (a + b x M),
  fitted on the moe_grad rows (runtime/bench/ops_decode.py bench_moe_grad: the expert GEMMs of five published MoE
  layers, forward and forward + wgrad by autograd.grad inside a CUDA graph, at a random router's counts and at
  balanced counts) as t_wgrad = t(forward + wgrad) - t(forward): no eager host time, no .grad accumulation. Held
  out by is_held_out_grouped on the wgrad shape. Without moe_grad rows, the moe_train rows (timed eagerly) as
  t(forward + backward) - t(forward) - the grouped class's dgrad at (M, K, N) (wgrad_rows).
  The moe_train rows' forwards join the grouped class's own rows (kind grouped_mm, M = the mean rows per expert).
- expert loop (one GEMM launch per expert, as a plain PyTorch loop or multi-stream cuBLAS runs it): no
  parameters of its own: groups x the single GEMM's price (small-M class or big-GEMM curve). Its
  held-out check in benchmarks/validate_ops.py is therefore a check of a composition.
- FP8 GEMM (torch._scaled_mm e4m3, bf16 out; FP8_KINDS: per-tensor and per-row scales, each its own class,
  Fp8Gemm): the BF16 GEMM of the same shape priced by the calibrated curve, its math at the FP8 rate, plus what
  the FP8 kernel does not speed up, a fixed cost per call and an epilogue per wave of 128 x 128 output tiles:
      t_fp8 = fixed + ratio x q x t_bf16 + per_wave x ceil(ceil(M / 128) ceil(N / 128) / SMs),
  fitted (non-negative relative least squares) on the fp8_mm rows (runtime/bench/ops_heldout.py: Llama-3-like
  per-rank training GEMMs and 1024-2048 cubes, torch.mm bf16 and both scalings per shape, CUDA graphs) after
  normalising each FP8 time by the BF16 time of the same shape in the same run (t_fp8 x curve_bf16 /
  t_bf16_measured), so the class carries the measured FP8 : BF16 speed ratio onto the calibrated BF16 curve and
  not the run's clock state. Per-tensor scaling prices the step model's FP8 GEMMs (Transformer Engine's delayed
  and current recipes and torchao's default scale per tensor). The curve's own fp8 peak fraction (fit_fp8_frac;
  cost/default_curve.py) is fitted on the same per-tensor fit rows and prices FP8 GEMMs the class does not cover.
  q is 1 for per-tensor scales (cuBLAS picks its tile as the BF16 curve does); per-row scales run PyTorch's own
  CUTLASS kernel (aten/src/ATen/native/cuda/RowwiseScaledMM.cu, SM90), whose tile is fixed by a rule on M and N:
  64 x 128 tiles where clusters of two such tiles fill at most one wave over the SMs, else 128 x 128; q is that
  tile's wave quantization (waves x SMs / tiles, rowwise_wave_factor), which the BF16 curve's best tile does not
  have (1536^3: 144 tiles of 128 x 128 on 132 SMs, q = 1.83; the large shapes 1.00-1.03).
- FP8 cast (amax + scale + cast of one BF16 tensor to e4m3, as PyTorch runs it unfused): t = fixed +
  coef x elements, both the sum of the cast's kernels (cost/fp8cast.py) where the GPU has fp8_cast_parts rows, else
  fitted on the fp8_cast rows alone.

Held-out rows (benchmarks/validate_ops.py prints their errors): small-M: the (N, K) shapes in
SMALL_M_HELD_OUT (every third shape of the benchmark's list); grouped: rows picked by
is_held_out_grouped (a fixed rule on M, N and groups); FP8 GEMM: is_held_out_fp8 (a hash of the shape, about one
shape in three); FP8 cast: every third measured shape.
A GPU without its own rows borrows another's by a documented transfer (cost/basis.py): compute terms
scaled by the dense BF16 peak ratio, bandwidth terms by the HBM bandwidth ratio.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from c3kit.cost.fp8cast import held_out_every_third
from c3kit.cost.opclass import FeatureCost, _rows, fit_nonneg
from c3kit.errors import CostError

SMALL_M_MAX = 512  # the largest M measured as small-M; larger M is priced by the big-GEMM curve
SMALL_M_HELD_OUT = ((5120, 1792), (28672, 8192), (6144, 4096))  # every third (N, K) of runtime/bench/ops.py
# The cast runtime/bench/ops.py measures, as PyTorch runs it unfused: abs (read 2 B, write 2 B), amax (read 2 B),
# three scalar kernels (float, clamp, / 448), a / s (read 2 B, write 2 B), .to(e4m3) (read 2 B, write 1 B):
# (kernels, bytes moved per element). A fused recipe's cast is priced per kernel and per byte from it.
CAST_COMPOSITION = (7, 13.0)


@dataclass(frozen=True)
class StreamingGemm:
    """t = fixed + (t_mem^p + t_math^p)^(1/p) over `groups` GEMMs (see the module docstring)."""

    fixed_s: float
    bw: float  # B/s at wide N
    n_half: float  # N at which the achieved bandwidth is halved
    peak: float  # FLOP/s of the math term
    tile_m: float  # M is padded to a multiple of this
    p: float
    n_rows: int = 0
    min_nk: float = 0.0  # the smallest N and K among the fitted rows

    def covers(self, n, k):
        """True (elementwise) where N and K are at least half the smallest measured N and K: the class
        extrapolates at most a factor 2 below its rows (far smaller GEMMs keep the big-GEMM curve)."""
        return (np.asarray(n) >= 0.5 * self.min_nk) & (np.asarray(k) >= 0.5 * self.min_nk)

    def __call__(self, m, n, k, groups=1, itemsize: float = 2.0):
        """Seconds (scalars or arrays)."""
        m, n, k, g = (np.asarray(x, dtype=float) for x in (m, n, k, groups))
        nbytes = (n * k + m * k + m * n) * itemsize * g
        t_mem = nbytes / self.bw * (1.0 + self.n_half / n)
        t_math = 2.0 * np.ceil(m / self.tile_m) * self.tile_m * n * k * g / self.peak
        hi, lo = np.maximum(t_mem, t_math), np.minimum(t_mem, t_math)
        t = self.fixed_s + hi * (1.0 + (lo / hi) ** self.p) ** (1.0 / self.p)
        return float(t) if t.ndim == 0 else t

    def scaled(self, flops_ratio: float, bw_ratio: float) -> "StreamingGemm":
        """The same kernel on a GPU with flops_ratio x the peak and bw_ratio x the HBM bandwidth."""
        return replace(self, bw=self.bw * bw_ratio, peak=self.peak * flops_ratio)


WAVE_TILE = 128  # output tile edge of the wave classes (CUTLASS's Hopper grouped kernels; 128 x 256 fits alike)


def expected_row_tiles(m, groups, tile: int = WAVE_TILE, routed=False):
    """Sum over groups of ceil(M_g / tile): groups x ceil(M / tile) when balanced; when routed, its expectation over
    groups x M rows each sent to one of the groups uniformly at random (M_g binomial; E ceil(X / tile) = sum over
    j >= 0 of P(X > j tile), by the normal approximation with continuity correction)."""
    m, g, r = np.broadcast_arrays(np.asarray(m, float), np.asarray(groups, float), np.asarray(routed, bool))
    out = (g * np.ceil(m / tile)).ravel()
    for i in np.flatnonzero(r.ravel() & (g.ravel() > 1)):
        mu, gi = float(m.flat[i]), float(g.flat[i])
        sd = math.sqrt(mu * (1.0 - 1.0 / gi))  # binomial(groups x M, 1 / groups)
        top = int(math.ceil((mu + 10.0 * sd) / tile))
        out[i] = gi * sum(0.5 * math.erfc((j * tile + 0.5 - mu) / (sd * math.sqrt(2.0))) for j in range(top + 1))
    out = out.reshape(m.shape)
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class TiledGroupedGemm:
    """t = fixed + (t_mem^p + t_math^p)^(1/p) of `groups` GEMMs in one launch, the math in waves of output tiles
    (see the module docstring)."""

    fixed_s: float
    bw: float  # B/s of the weight / activation stream
    tile_rate: float  # FLOP/s of one SM on one output tile's K loop
    per_tile_s: float  # a tile's fixed part (prologue, epilogue)
    p: float
    sms: int
    n_rows: int = 0
    min_nk: float = 0.0  # the smallest N and K among the fitted rows

    def covers(self, n, k):
        """True (elementwise) where N and K are at least half the smallest measured N and K."""
        return (np.asarray(n) >= 0.5 * self.min_nk) & (np.asarray(k) >= 0.5 * self.min_nk)

    def __call__(self, m, n, k, groups=1, itemsize: float = 2.0, routed=False):
        """Seconds (scalars or arrays); routed: group sizes from a uniform random router of mean M (else all M)."""
        m, n, k, g = (np.asarray(x, dtype=float) for x in (m, n, k, groups))
        t_mem = (n * k + m * k + m * n) * itemsize * g / self.bw
        tiles = expected_row_tiles(m, g, WAVE_TILE, routed) * np.ceil(n / WAVE_TILE)
        t_math = np.ceil(tiles / self.sms) * (self.per_tile_s + 2.0 * WAVE_TILE * WAVE_TILE * k / self.tile_rate)
        hi, lo = np.maximum(t_mem, t_math), np.minimum(t_mem, t_math)
        t = self.fixed_s + hi * (1.0 + (lo / hi) ** self.p) ** (1.0 / self.p)
        return float(t) if t.ndim == 0 else t

    def scaled(self, flops_ratio: float, bw_ratio: float) -> "TiledGroupedGemm":
        """The same kernel on a GPU with flops_ratio x the peak and bw_ratio x the HBM bandwidth (the tile work at
        the math rate; the measured GPU's SM count)."""
        return replace(self, bw=self.bw * bw_ratio, tile_rate=self.tile_rate * flops_ratio,
                       per_tile_s=self.per_tile_s / flops_ratio)


def fit_tiled_grouped(m, n, k, groups, routed, t, sms: int) -> TiledGroupedGemm:
    """TiledGroupedGemm by least squares on log time (Levenberg-Marquardt from a few starts)."""
    from c3kit.cost.efficiency import _levenberg_marquardt

    m, n, k, g, t = (np.asarray(x, dtype=float) for x in (m, n, k, groups, t))
    if len(t) < 8 or np.any(t <= 0):
        raise CostError(f"a grouped-GEMM fit needs at least 8 rows with positive times, got {len(t)}")
    tiles = expected_row_tiles(m, g, WAVE_TILE, np.asarray(routed, bool))  # fixed by the shapes: computed once
    min_nk = float(min(n.min(), k.min()))

    def make(x) -> TiledGroupedGemm:
        x = np.clip(x, -60.0, 60.0)
        return TiledGroupedGemm(math.exp(x[0]), math.exp(x[1]), math.exp(x[2]), math.exp(x[3]),
                                1.0 + math.exp(min(x[4], 3.0)), int(sms), len(t), min_nk)

    def resid(x):
        c = make(x)
        t_mem = (n * k + m * k + m * n) * 2.0 * g / c.bw
        t_math = np.ceil(tiles * np.ceil(n / WAVE_TILE) / sms) * (
            c.per_tile_s + 2.0 * WAVE_TILE * WAVE_TILE * k / c.tile_rate)
        hi, lo = np.maximum(t_mem, t_math), np.minimum(t_mem, t_math)
        return np.log(c.fixed_s + hi * (1.0 + (lo / hi) ** c.p) ** (1.0 / c.p)) - np.log(t)

    best = None
    for p in (1.0, 3.0, 8.0):
        for per_tile in (1e-7, 1e-6):
            x, cost, _ = _levenberg_marquardt(resid, np.log([5e-6, 3e12, 4e12, per_tile, p]), 300)
            if best is None or cost < best[1]:
                best = (x, cost)
    return make(best[0])


@dataclass(frozen=True)
class WaveGemm:
    """t = fixed + waves x (per_tile_s + per_k_s x K), waves = ceil(groups x ceil(M / tile) x ceil(N / tile) / sms):
    an M x N output per group reduced over K (see the module docstring)."""

    fixed_s: float
    per_tile_s: float
    per_k_s: float
    sms: int
    n_rows: int = 0
    min_nk: float = 0.0  # the smallest output edge (M or N) among the fitted rows

    def covers(self, n, m):
        """True (elementwise) where the output edges are at least half the smallest measured ones."""
        return (np.asarray(n) >= 0.5 * self.min_nk) & (np.asarray(m) >= 0.5 * self.min_nk)

    @staticmethod
    def features(m, n, k, groups, sms):
        """[waves, waves x K] of `groups` M x N outputs reduced over K on `sms` SMs."""
        m, n, k, g = (np.asarray(x, dtype=float) for x in (m, n, k, groups))
        waves = np.ceil(g * np.ceil(m / WAVE_TILE) * np.ceil(n / WAVE_TILE) / sms)
        return np.stack(np.broadcast_arrays(waves, waves * k), axis=-1)

    def __call__(self, m, n, k, groups=1, itemsize: float = 2.0):
        """Seconds (scalars or arrays)."""
        t = self.fixed_s + self.features(m, n, k, groups, self.sms) @ np.array([self.per_tile_s, self.per_k_s])
        return float(t) if np.ndim(t) == 0 else t

    def scaled(self, flops_ratio: float, bw_ratio: float) -> "WaveGemm":
        """The same kernel on a GPU with flops_ratio x the peak (the tile times scale with the math rate)."""
        return replace(self, per_tile_s=self.per_tile_s / flops_ratio, per_k_s=self.per_k_s / flops_ratio)


def fit_wave(m, n, k, groups, t, sms: int) -> WaveGemm:
    """WaveGemm by non-negative relative least squares."""
    t = np.asarray(t, dtype=float)
    c = fit_nonneg(WaveGemm.features(m, n, k, groups, sms), t)
    return WaveGemm(float(c[0]), float(c[1]), float(c[2]), int(sms), len(t),
                    float(min(np.min(m), np.min(n))))


def fit_streaming(m, n, k, groups, t) -> StreamingGemm:
    """StreamingGemm by least squares on log time (Levenberg-Marquardt from a few starts)."""
    from c3kit.cost.efficiency import _levenberg_marquardt

    m, n, k, g, t = (np.asarray(x, dtype=float) for x in (m, n, k, groups, t))
    if len(t) < 8 or np.any(t <= 0):
        raise CostError(f"a streaming-GEMM fit needs at least 8 rows with positive times, got {len(t)}")

    min_nk = float(min(n.min(), k.min()))

    def make(x) -> StreamingGemm:
        x = np.clip(x, -60.0, 60.0)
        return StreamingGemm(math.exp(x[0]), math.exp(x[1]), math.exp(x[2]), math.exp(x[3]),
                             min(max(math.exp(x[4]), 1.0), 256.0), 1.0 + math.exp(min(x[5], 3.0)), len(t), min_nk)

    def resid(x):
        return np.log(make(x)(m, n, k, g)) - np.log(t)

    best = None
    for tm in (16.0, 64.0, 128.0):
        for p in (1.0, 3.0, 8.0):
            x0 = np.log([3e-6, 4e12, 500.0, 6e14, tm, p])
            x, cost, _ = _levenberg_marquardt(resid, x0, 200)
            if best is None or cost < best[1]:
                best = (x, cost)
    return make(best[0])


def is_held_out_grouped(r: dict) -> bool:
    """Grouped-GEMM rows held out of the fit: about every third row, by a fixed rule on its sizes."""
    return (int(r["m"]).bit_length() + int(r["n"]).bit_length() + int(r["groups"]).bit_length()) % 3 == 0


def is_held_out_small_m(r: dict) -> bool:
    """Small-M rows held out of the fit: those of the (N, K) shapes in SMALL_M_HELD_OUT."""
    return (int(r["n"]), int(r["k"])) in SMALL_M_HELD_OUT


def fit_small_m(rows: list[dict], hold_out: bool = True) -> StreamingGemm | None:
    """The small-M class from the small_m_kind rows (held-out shapes left out unless hold_out is False)."""
    kind = small_m_kind(rows)
    pts = [r for r in rows if r["kind"] == kind and r["time_s"] and not (hold_out and is_held_out_small_m(r))]
    if len(pts) < 8:
        return None
    return fit_streaming(*([r[c] for r in pts] for c in ("m", "n", "k", "groups", "time_s")))


def fit_grouped(rows: list[dict], kind: str = "grouped_mm", hold_out: bool = True, *,
                sms: int) -> TiledGroupedGemm | None:
    """The grouped-GEMM class from rows of one kind (held-out rows left out unless hold_out is False; a row with
    routed True ran at a random router's counts) on a GPU of `sms` SMs."""
    pts = [r for r in rows if r["kind"] == kind and r["time_s"] and not (hold_out and is_held_out_grouped(r))]
    if len(pts) < 8:
        return None
    cols = [[r[c] for r in pts] for c in ("m", "n", "k", "groups")]
    return fit_tiled_grouped(*cols, [bool(r.get("routed")) for r in pts], [r["time_s"] for r in pts], sms)


FP8_KINDS = ("fp8_tensorwise", "fp8_rowwise")  # the fp8_mm family's FP8 rows: per-tensor and per-row scales
ROWWISE_TILE_KINDS = frozenset({"fp8_rowwise"})  # kinds run by PyTorch's rowwise CUTLASS kernel (rowwise_wave_factor)


@dataclass(frozen=True)
class Fp8Gemm:
    """t_fp8 = fixed + ratio x t_bf16 + per_wave x waves of 128 x 128 output tiles (see the module docstring)."""

    fixed_s: float
    ratio: float  # FP8 over BF16 time of the part that runs at the math rate
    per_wave_s: float  # epilogue of one wave of output tiles, not shortened by FP8 math
    sms: int
    n_rows: int = 0
    min_mnk: float = 0.0  # the smallest M, N or K among the fitted rows
    rowwise_tiles: bool = False  # math part quantized by the rowwise CUTLASS kernel's tile rule (rowwise_wave_factor)

    def covers(self, m, n, k):
        """True (elementwise) where M, N and K are at least half the smallest measured one."""
        lo = 0.5 * self.min_mnk
        return (np.asarray(m) >= lo) & (np.asarray(n) >= lo) & (np.asarray(k) >= lo)

    def waves(self, m, n, batch=1):
        """Waves of WAVE_TILE x WAVE_TILE output tiles over the SMs."""
        m, n, b = (np.asarray(x, dtype=float) for x in (m, n, batch))
        return np.ceil(np.ceil(m / WAVE_TILE) * np.ceil(n / WAVE_TILE) * b / self.sms)

    def __call__(self, m, n, t_bf16, batch=1):
        """Seconds of the FP8 GEMM whose BF16 twin (same M, N, K, batch) takes t_bf16 seconds."""
        q = rowwise_wave_factor(m, n, self.sms, batch) if self.rowwise_tiles else 1.0
        t = self.fixed_s + self.ratio * q * np.asarray(t_bf16, dtype=float) + self.per_wave_s * self.waves(m, n, batch)
        return float(t) if np.ndim(t) == 0 else t

    def scaled(self, flops_ratio: float, fp8_rate_ratio: float) -> "Fp8Gemm":
        """The same kernel on a GPU with flops_ratio x the FP8 peak and fp8_rate_ratio x the FP8 : BF16 peak ratio
        (the math part's ratio shrinks by it, the epilogue runs at the math rate, the measured GPU's SM count)."""
        return replace(self, ratio=self.ratio / fp8_rate_ratio, per_wave_s=self.per_wave_s / flops_ratio)


def rowwise_wave_factor(m, n, sms: int, batch=1):
    """Wave quantization (waves x tile slots / tiles, >= 1) of PyTorch's SM90 rowwise-scaled FP8 kernel: clusters of
    two tiles, 64 x 128 where ceil(M / 128) ceil(N / 128) clusters fit one wave over the SMs, else 128 x 128."""
    m, n, b = (np.asarray(x, dtype=float) for x in (m, n, batch))
    pairs = sms // 2  # cluster slots: every shape of the dispatch runs clusters of two CTAs
    tm = np.where(np.ceil(m / 128) * np.ceil(n / 128) <= pairs, 64.0, 128.0)
    tiles = np.ceil(m / tm) * np.ceil(n / 128) * b
    slots = 2.0 * pairs
    q = np.ceil(tiles / slots) * slots / tiles
    return float(q) if np.ndim(q) == 0 else q


def is_held_out_fp8(r: dict) -> bool:
    """FP8 GEMM shapes held out of the fit: about one in three, by a fixed hash of (M, N, K)."""
    return zlib.crc32(repr((int(r["m"]), int(r["n"]), int(r["k"]))).encode()) % 3 == 0


def fp8_pairs(rows: list[dict], kind: str = "fp8_tensorwise") -> list[tuple[dict, dict]]:
    """(FP8 row of `kind`, bf16_mm row) of each shape timed both ways in one run, in file order."""
    bf = {(r["m"], r["n"], r["k"]): r for r in rows if r["kind"] == "bf16_mm" and r["time_s"]}
    return [(r, bf[(r["m"], r["n"], r["k"])]) for r in rows
            if r["kind"] == kind and r["time_s"] and (r["m"], r["n"], r["k"]) in bf]


def fit_fp8_gemm(rows: list[dict], curve, gpu, kind: str = "fp8_tensorwise", hold_out: bool = True,
                 rowwise_tiles: bool | None = None) -> Fp8Gemm | None:
    """The FP8 GEMM class of one scaling from fp8_mm rows (held-out shapes left out unless hold_out is False),
    on the normalised targets (fp8_target) with t_bf16 from `curve` on `gpu`; rowwise_tiles: whether the math part
    carries the rowwise kernel's wave quantization (default: the kinds in ROWWISE_TILE_KINDS)."""
    keep = [p for p in fp8_pairs(rows, kind) if not (hold_out and is_held_out_fp8(p[0]))]
    if len(keep) < 4:
        return None
    tiles = kind in ROWWISE_TILE_KINDS if rowwise_tiles is None else bool(rowwise_tiles)
    shape = Fp8Gemm(0.0, 1.0, 0.0, int(gpu.sms), rowwise_tiles=tiles)
    x = np.array([[shape(f["m"], f["n"], curve.gemm_time(f["m"], f["n"], f["k"], "bf16", gpu)),
                   shape.waves(f["m"], f["n"])] for f, _ in keep])
    c = fit_nonneg(x, np.array([fp8_target(f, b, curve, gpu) for f, b in keep]))
    min_mnk = float(min(min(f["m"], f["n"], f["k"]) for f, _ in keep))
    return Fp8Gemm(float(c[0]), float(c[1]), float(c[2]), int(gpu.sms), len(keep), min_mnk, shape.rowwise_tiles)


def fit_fp8_frac(rows: list[dict], curve, gpu, hold_out: bool = True, kind: str = "fp8_tensorwise") -> float | None:
    """The fp8 peak fraction of `curve` that best prices the normalised FP8 rows of `kind` (1-D search on log
    error; held-out shapes, is_held_out_fp8, left out unless hold_out is False)."""
    keep = [p for p in fp8_pairs(rows, kind) if not (hold_out and is_held_out_fp8(p[0]))]
    if len(keep) < 3:
        return None
    target = np.log([fp8_target(f, b, curve, gpu) for f, b in keep])

    def loss(frac):
        c = curve.with_(peak_frac={**dict(curve.peak_frac), "fp8": frac})
        pred = np.log([c.gemm_time(f["m"], f["n"], f["k"], "fp8", gpu) for f, _ in keep])
        return float(np.sum((pred - target) ** 2))

    lo, hi = 0.05, 1.5  # golden-section search: the loss is unimodal in the fraction
    for _ in range(60):
        a, b = hi - 0.618 * (hi - lo), lo + 0.618 * (hi - lo)
        if loss(a) < loss(b):
            hi = b
        else:
            lo = a
    return 0.5 * (lo + hi)


def fp8_target(fp8_row: dict, bf16_row: dict, curve, gpu) -> float:
    """An FP8 row's time moved onto the calibrated curve: t_fp8 x curve_bf16 / t_bf16 (same shape, same run)."""
    c = curve.gemm_time(bf16_row["m"], bf16_row["n"], bf16_row["k"], "bf16", gpu)
    return float(fp8_row["time_s"]) * c / float(bf16_row["time_s"])


def cast_rows(rows: list[dict]) -> list[dict]:
    """The 'fp8_cast' rows (elements = m x n of the cast tensor)."""
    return [r for r in rows if r["kind"] == "fp8_cast" and r["time_s"]]


def fit_cast(rows: list[dict], hold_out: bool = True, part_rows: list[dict] | None = None) -> FeatureCost | None:
    """t = fixed + coef x elements of the measured amax + scale + cast composition: the sum of its parts
    (fp8cast.fit_cast_parts) where fp8_cast_parts rows are given, else a line through the fp8_cast rows."""
    cr = cast_rows(rows)
    if part_rows:
        from c3kit.cost.fp8cast import fit_cast_parts

        parts = fit_cast_parts(part_rows, cr, hold_out)
        if parts is not None:
            return FeatureCost(parts.fixed_s, (parts.s_per_element,), parts.n_rows)
    keep = [r for r, h in zip(cr, held_out_every_third(cr)) if not (hold_out and h)]
    if len(keep) < 3:
        return None
    x = np.array([[float(r["m"]) * float(r["n"])] for r in keep])
    c = fit_nonneg(x, np.array([float(r["time_s"]) for r in keep]))
    return FeatureCost(float(c[0]), (float(c[1]),), len(keep))


def moe_train_pairs(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(forward row, forward + backward row) of each moe_train shape, as grouped shapes: m = mean rows per local
    expert, n, k of the forward GEMM (gate+up: 2 x ffn, hidden; down: hidden, ffn), groups = local experts."""
    fwd = {}
    for r in rows:
        if r["time_s"] and r["pass"] == "fwd":
            fwd[(r["kind"], r["model"], r["tokens"], r["ep"])] = r
    out = []
    for r in rows:
        f = fwd.get((r["kind"], r["model"], r["tokens"], r["ep"]))
        if r["pass"] != "fwd_bwd" or not r["time_s"] or f is None:
            continue
        H, F, el = int(r["hidden"]), int(r["ffn"]), int(r["experts"])
        n, k = (2 * F, H) if r["kind"] == "gate_up" else (H, F)
        shape = {"m": -(-int(r["tokens"]) * int(r["top_k"]) // el), "n": n, "k": k, "groups": el}
        out.append(({**shape, "kind": "grouped_mm", "routed": True, "time_s": float(f["time_s"])},
                    {**shape, "kind": "grouped_fwd_bwd", "time_s": float(r["time_s"])}))
    return out


def wgrad_rows(pairs: list[tuple[dict, dict]], grouped: TiledGroupedGemm) -> list[dict]:
    """The wgrad of each pair as a grouped row (m = K, n = N, k = rows per expert): forward + backward - forward -
    the grouped class's dgrad; pairs whose remainder is not positive are left out."""
    out = []
    for f, fb in pairs:
        t = fb["time_s"] - f["time_s"] - grouped(f["m"], f["k"], f["n"], f["groups"], routed=f.get("routed", False))
        if t > 0:
            out.append({"kind": "grouped_wgrad", "m": f["k"], "n": f["n"], "k": f["m"], "groups": f["groups"],
                        "time_s": t})
    return out


def moe_grad_parts(rows: list[dict]) -> list[dict]:
    """Each moe_grad shape x routing as a grouped shape (m = mean rows per local expert, n, k of the forward GEMM,
    groups = local experts, routed) with its parts in seconds: fwd, dgrad, wgrad, both (forward + pass - forward)
    and acc (the weight-gradient accumulate add)."""
    by = {}
    for r in rows:
        if r["time_s"]:
            by.setdefault((r["kind"], r["model"], r["tokens"], r["ep"], r["routing"]), {})[r["pass"]] = r
    out = []
    for (kind, *_), ps in by.items():
        if not {"fwd", "fwd_dgrad", "fwd_wgrad", "fwd_bwd"} <= ps.keys():
            continue
        r = ps["fwd"]
        H, F, el = int(r["hidden"]), int(r["ffn"]), int(r["experts"])
        n, k = (2 * F, H) if kind == "gate_up" else (H, F)
        f = float(r["time_s"])
        out.append({"m": -(-int(r["tokens"]) * int(r["top_k"]) // el), "n": n, "k": k, "groups": el,
                    "routed": r["routing"] == "random", "fwd": f, "dgrad": float(ps["fwd_dgrad"]["time_s"]) - f,
                    "wgrad": float(ps["fwd_wgrad"]["time_s"]) - f, "both": float(ps["fwd_bwd"]["time_s"]) - f,
                    "acc": float(ps["grad_accumulate"]["time_s"]) if "grad_accumulate" in ps else None})
    return out


def graph_wgrad_rows(parts: list[dict]) -> list[dict]:
    """The moe_grad wgrads as grouped rows (m = K, n = N, k = rows per expert), positive ones only."""
    return [{"kind": "grouped_wgrad", "m": p["k"], "n": p["n"], "k": p["m"], "groups": p["groups"],
             "time_s": p["wgrad"]} for p in parts if p["wgrad"] > 0]


def fit_grouped_wgrad(rows: list[dict], hold_out: bool = True, *, sms: int) -> WaveGemm | None:
    """The grouped-wgrad class from wgrad rows (graph_wgrad_rows or wgrad_rows; held-out shapes left out unless
    hold_out is False) on a GPU of `sms` SMs."""
    rows = [r for r in rows if not (hold_out and is_held_out_grouped(r))]
    if len(rows) < 8:
        return None
    return fit_wave(*([r[c] for r in rows] for c in ("m", "n", "k", "groups", "time_s")), sms=sms)


@dataclass(frozen=True)
class GemmCalibration:
    """The fitted GEMM classes of one GPU (None where a class was not measured) and their file."""

    gpu: str
    small_m: StreamingGemm | None
    grouped: TiledGroupedGemm | None
    cast: FeatureCost | None
    origin: str
    grouped_wgrad: WaveGemm | None = None


def gemm_rows(gpu_name: str, families: tuple[str, ...] = ("gemm", "gemm_cold")) -> list[dict] | None:
    """Rows of the shipped ops-gemm calibration file of a GPU (and of its ops-gemm_cold file: small-M GEMMs with
    the weight read from HBM), or None when it has no ops-gemm file; other families by name."""
    from c3kit.cost.calib_store import op_calibration_path

    out = None
    for fam in families:
        p = op_calibration_path(gpu_name, fam)
        if not p.is_file():
            continue
        try:
            out = (out or []) + _rows(json.loads(p.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CostError(f"{p}: not a readable ops-{fam} calibration file ({e})") from None
    return out


def small_m_kind(rows: list[dict]) -> str:
    """The rows the small-M class is fitted on: 'small_m_cold' (weight read from HBM on every call, as in a decode
    step where the other layers' weights evict it from L2) where measured, else 'small_m' (weight reused)."""
    return "small_m_cold" if sum(r["kind"] == "small_m_cold" for r in rows) >= 8 else "small_m"


@lru_cache(maxsize=16)
def gemm_calibration(gpu_name: str) -> GemmCalibration | None:
    """The GEMM classes of a catalog GPU fitted to its own shipped ops-gemm file (None without one)."""
    rows = gemm_rows(gpu_name)
    if rows is None:
        return None
    from c3kit.cost.calib_store import op_calibration_path
    from c3kit.hw.catalog import get_gpu

    pairs = moe_train_pairs(gemm_rows(gpu_name, ("moe_train",)) or [])
    sms = get_gpu(gpu_name).sms
    grouped = fit_grouped(rows + [f for f, _ in pairs], sms=sms)
    graph = graph_wgrad_rows(moe_grad_parts(gemm_rows(gpu_name, ("moe_grad",)) or []))
    wrows = graph if graph else (wgrad_rows(pairs, grouped) if grouped is not None else [])
    return GemmCalibration(gpu_name, fit_small_m(rows), grouped,
                           fit_cast(rows, part_rows=gemm_rows(gpu_name, ("fp8_cast_parts",))),
                           op_calibration_path(gpu_name, "gemm").name, fit_grouped_wgrad(wrows, sms=sms))


@dataclass(frozen=True)
class ScaledGemmClasses:
    """A GPU's GEMM classes (own or transferred, rescaled to it); None where its basis is the datasheet."""

    small_m: StreamingGemm | None
    grouped: TiledGroupedGemm | None
    cast_fixed_s: float | None
    cast_s_per_element: float | None
    grouped_wgrad: WaveGemm | None = None

    def cast_time(self, elements):
        """Seconds of one measured amax + scale + cast of a BF16 tensor of `elements` elements, or None."""
        if self.cast_s_per_element is None:
            return None
        return self.cast_fixed_s + self.cast_s_per_element * np.asarray(elements, dtype=float)


@lru_cache(maxsize=64)
def gemm_classes_for(gpu) -> ScaledGemmClasses:
    """Each GEMM class that prices work on gpu (own, transferred or projected, cost/basis.py), rescaled."""
    from c3kit.cost.basis import source_gpu
    from c3kit.hw.catalog import get_gpu

    def part(op_class):
        src = source_gpu(gpu.name, op_class)
        cal = gemm_calibration(src) if src is not None else None
        if cal is None:
            return None, 1.0, 1.0
        ref = get_gpu(src)
        return cal, gpu.peak_flops("bf16") / ref.peak_flops("bf16"), gpu.hbm_bw / ref.hbm_bw

    sm, fr, br = part("gemm_small_m")
    small = sm.small_m.scaled(fr, br) if sm is not None and sm.small_m is not None else None
    gr, fr, br = part("gemm_grouped")
    grouped = gr.grouped.scaled(fr, br) if gr is not None and gr.grouped is not None else None
    wgrad = gr.grouped_wgrad.scaled(fr, br) if gr is not None and gr.grouped_wgrad is not None else None
    ca, _, br = part("fp8_cast")
    cast = ca.cast if ca is not None else None
    return ScaledGemmClasses(small, grouped, cast.fixed_s if cast is not None else None,
                             cast.coefs[0] / br if cast is not None else None, wgrad)


def load_rows_file(path) -> list[dict]:
    """Rows of an ops-gemm file at an explicit path (benchmarks/validate_ops.py --dir)."""
    return _rows(json.loads(open(path).read()))
