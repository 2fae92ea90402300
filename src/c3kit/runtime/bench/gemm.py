"""GEMM efficiency over a sweep of M, N, K and dtypes, and the decomposition inefficiency of splits."""

from __future__ import annotations

import math
import random
import time as _time
from dataclasses import dataclass
from typing import Sequence

from c3kit.runtime._torch import require_torch, torch_dtype
from c3kit.runtime.bench.timing import time_loop

COLUMNS = ["m", "n", "k", "dtype", "split", "chunks", "time_s", "flop_rate", "efficiency", "dil", "set"]
PASS_COLUMNS = ["passes", "spread"]  # with --passes > 1: time_s is the median over passes, spread = max/min - 1


def merge_passes(passes: Sequence[Sequence[list]]) -> list[list]:
    """One row per (m, n, k, dtype, set) with the median time over sweep passes and the spread (max / min - 1)."""
    import statistics

    by: dict[tuple, list[list]] = {}
    order: list[tuple] = []
    for rows in passes:
        for r in rows:
            key = (r[0], r[1], r[2], r[3], r[10])
            if key not in by:
                by[key] = []
                order.append(key)
            by[key].append(r)
    out = []
    for key in order:
        rs = by[key]
        ts = [r[6] for r in rs]
        t = statistics.median(ts)
        r0 = list(rs[0])
        flops = 2.0 * r0[0] * r0[1] * r0[2]
        eff = r0[8] * r0[6] / t if r0[8] == r0[8] and r0[8] is not None else r0[8]
        r0[6], r0[7], r0[8] = t, flops / t, eff
        out.append(r0 + [len(ts), max(ts) / min(ts) - 1.0])
    return out
# Rotate inputs until the working set is a few times the L2 (60 MB on H200), so that repeats do
# not measure the cache.
ROTATE_BYTES = 256e6
MAX_SETS = 8

# bf16 (the dtype that matters most) on a dense grid, about 1.5x apart, so that the lookup table
# interpolates between close neighbours; fp16 and fp32 on coarser grids.
GRID = {
    "bf16": ((64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 32768),
             (256, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 28672),
             (256, 512, 1024, 2048, 4096, 8192, 16384)),
    "other": ((128, 512, 2048, 8192, 32768), (512, 2048, 8192, 28672), (512, 2048, 8192)),
}
QUICK_GRID = ((128, 2048, 16384), (1024, 8192), (1024, 8192))
SPLIT_CHUNKS = (2, 4, 8, 16, 32, 64)
SENTINEL = (8192, 8192, 8192, "bf16")  # timed every SENTINEL_EVERY shapes to show drift over the sweep
SENTINEL_EVERY = 100


@dataclass(frozen=True)
class Shape:
    """One GEMM of the sweep: C[m, n] = A[m, k] @ B[k, n]; `set` is grid, random, odd or sentinel."""

    m: int
    n: int
    k: int
    dtype: str
    set: str = "grid"


def _logu(rng: random.Random, lo: int, hi: int) -> int:
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def sweep_shapes(dtypes: Sequence[str], n_random: int = 240, n_odd: int = 24, seed: int = 0,
                 quick: bool = False) -> list[Shape]:
    """Grid shapes per dtype, log-uniform random shapes (multiples of 8) inside the grid's range, and
    misaligned shapes (a dimension not a multiple of 8), in one fixed shuffled order."""
    rng = random.Random(seed)
    shapes = []
    for dt in dtypes:
        gm, gn, gk = QUICK_GRID if quick else GRID["bf16" if dt == "bf16" else "other"]
        shapes += [Shape(m, n, k, dt, "grid") for m in gm for n in gn for k in gk]
    lo_m, hi_m = min(GRID["bf16"][0]), max(GRID["bf16"][0])
    lo_n, hi_n = min(GRID["bf16"][1]), max(GRID["bf16"][1])
    lo_k, hi_k = min(GRID["bf16"][2]), max(GRID["bf16"][2])
    for i in range(n_random + n_odd):
        odd = i >= n_random
        dims = [_logu(rng, lo_m, hi_m), _logu(rng, lo_n, hi_n), _logu(rng, lo_k, hi_k)]
        dims = [max(8, d // 8 * 8) for d in dims]
        if odd:
            j = rng.randrange(3)
            dims[j] += rng.randrange(1, 8)
        r = rng.random()
        dt = "bf16" if r < 0.7 or len(dtypes) == 1 else dtypes[1 + int((r - 0.7) / 0.3 * (len(dtypes) - 1))]
        if dt not in dtypes:
            dt = dtypes[0]
        shapes.append(Shape(*dims, dt, "odd" if odd else "random"))
    # A fixed shuffle: a sweep cut short by its time budget still covers every region and both sets.
    rng.shuffle(shapes)
    return shapes


def warm_up(device, seconds: float = 2.0) -> None:
    """Run large bf16 GEMMs for about `seconds`, so that clocks and temperature settle before timing."""
    torch = require_torch()
    if getattr(device, "type", str(device)) != "cuda":
        return
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    t0 = _time.perf_counter()
    while _time.perf_counter() - t0 < seconds:
        for _ in range(20):
            torch.mm(a, a)
        torch.cuda.synchronize(device)


def _inputs(torch, m, n, k, dtype, device, gen):
    per_set = (m * k + k * n) * torch.tensor([], dtype=dtype).element_size()
    sets = max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / max(per_set, 1))))
    a = [torch.randn(m, k, dtype=dtype, device=device, generator=gen) for _ in range(sets)]
    b = [torch.randn(k, n, dtype=dtype, device=device, generator=gen) for _ in range(sets)]
    return a, b


def time_gemm(m: int, n: int, k: int, dtype: str, device, target_s: float = 0.02, gen=None,
              graph_below_s: float = 0.0) -> float:
    """Median seconds of one m x n x k GEMM on device (random inputs, rotated past the L2)."""
    torch = require_torch()
    a, b = _inputs(torch, m, n, k, torch_dtype(dtype), device, gen)
    s = len(a)
    return time_loop(lambda i: torch.mm(a[i % s], b[i % s]), device, target_s=target_s, graph_below_s=graph_below_s)


def time_split(m: int, n: int, k: int, dtype: str, split: str, chunks: int, device, target_s: float = 0.02,
               gen=None) -> float:
    """Median seconds of the same GEMM run as `chunks` sub-GEMMs in a row along split (m, n or k)."""
    torch = require_torch()
    a, b = _inputs(torch, m, n, k, torch_dtype(dtype), device, gen)
    s = len(a)
    size = {"m": m, "n": n, "k": k}[split]
    if size % chunks:
        raise ValueError(f"{split}={size} does not divide into {chunks} chunks")
    step = size // chunks
    out = torch.empty(m, n, dtype=a[0].dtype, device=device)

    def run(i: int) -> None:
        ai, bi = a[i % s], b[i % s]
        for c in range(chunks):
            sl = slice(c * step, (c + 1) * step)
            if split == "m":
                torch.mm(ai[sl], bi, out=out[sl])
            elif split == "n":
                torch.mm(ai, bi[:, sl])
            elif c == 0:
                torch.mm(ai[:, sl], bi[sl], out=out)
            else:
                out.addmm_(ai[:, sl], bi[sl])

    return time_loop(run, device, target_s=target_s)


def run_sweep(shapes: Sequence[Shape], device, peak: dict[str, float], target_s: float = 0.02,
              seed: int = 0, on_row=None, budget_s: float = 0.0, errors: list | None = None,
              sentinel_every: int = 0, graph_below_s: float = 0.0) -> list[list]:
    """Rows (COLUMNS) for every shape (until budget_s seconds, if > 0); efficiency = FLOP/s over peak[dtype].

    With sentinel_every > 0 the SENTINEL shape is timed before every sentinel_every-th shape (set "sentinel")."""
    torch = require_torch()
    gen = torch.Generator(device=device).manual_seed(seed)
    errors = errors if errors is not None else []
    rows = []
    t_start = _time.perf_counter()
    if sentinel_every:
        m, n, k, dt = SENTINEL
        with_sentinels = []
        for i, sh in enumerate(shapes):
            if i % sentinel_every == 0 and dt in peak:
                with_sentinels.append(Shape(m, n, k, dt, "sentinel"))
            with_sentinels.append(sh)
        shapes = with_sentinels
    for i, sh in enumerate(shapes):
        if budget_s > 0 and _time.perf_counter() - t_start > budget_s:
            errors.append(f"time budget of {budget_s:.0f} s reached: {len(shapes) - i} shapes not run")
            break
        try:
            t = time_gemm(sh.m, sh.n, sh.k, sh.dtype, device, target_s, gen, graph_below_s)
        except Exception as e:  # noqa: BLE001 - one failing shape (memory, library) must not lose the sweep
            errors.append(f"{sh}: {type(e).__name__}: {str(e)[:200]}")
            _free(torch, device)
            continue
        rate = 2.0 * sh.m * sh.n * sh.k / t
        row = [sh.m, sh.n, sh.k, sh.dtype, "none", 1, t, rate, rate / peak[sh.dtype], 0.0, sh.set]
        rows.append(row)
        if on_row:
            on_row(row)
        _free(torch, device)
    return rows


DEFAULT_SPLIT_SHAPES = ((8192, 8192, 8192), (4096, 4096, 4096), (16384, 2048, 8192), (2048, 8192, 2048),
                        (1024, 16384, 4096))


def run_splits(base: Sequence[tuple[int, int, int]], dtype: str, device, peak: dict[str, float],
               chunks: Sequence[int] = SPLIT_CHUNKS, target_s: float = 0.02, seed: int = 0, on_row=None,
               budget_s: float = 0.0, errors: list | None = None) -> list[list]:
    """Rows (COLUMNS) for every base GEMM split into each chunk count along M, N and K; dil vs the whole."""
    torch = require_torch()
    gen = torch.Generator(device=device).manual_seed(seed)
    errors = errors if errors is not None else []
    t_start = _time.perf_counter()
    rows = []
    for m, n, k in base:
        if budget_s > 0 and _time.perf_counter() - t_start > budget_s:
            errors.append(f"split time budget of {budget_s:.0f} s reached before {m}x{n}x{k}")
            break
        whole = time_gemm(m, n, k, dtype, device, target_s, gen)
        flops = 2.0 * m * n * k
        rows.append([m, n, k, dtype, "none", 1, whole, flops / whole, flops / whole / peak[dtype], 0.0, "split-base"])
        if on_row:
            on_row(rows[-1])
        for split in ("m", "n", "k"):
            size = {"m": m, "n": n, "k": k}[split]
            for c in chunks:
                if size % c:
                    continue
                t = time_split(m, n, k, dtype, split, c, device, target_s, gen)
                rows.append([m, n, k, dtype, split, c, t, flops / t, flops / t / peak[dtype], t / whole - 1.0, "split"])
                if on_row:
                    on_row(rows[-1])
        _free(torch, device)
    return rows


def _free(torch, device) -> None:
    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.empty_cache()
