"""GEMM efficiency over a sweep of M, N, K and dtypes, and the decomposition inefficiency of splits."""

from __future__ import annotations

import math
import random
import time as _time
from dataclasses import dataclass
from typing import Sequence

from c3kit.runtime._torch import require_torch, torch_dtype
from c3kit.runtime.bench.timing import enqueue_clock_probe, probe_clock_hz, time_loop

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
# ------------------------------------------------------------------------------------------ the sweep
#
# Protocol (run 3): every dtype's inputs are views into one pool of random normal values (made once);
# each shape rotates over enough input sets to cover ROTATE_BYTES (3x the H200's 60 MB L2) so that
# repeats read HBM, not the L2; C is written to a preallocated output (out=). A shape is timed with
# CUDA events: GEMMs shorter than graph_below_s as replays of a CUDA graph of back-to-back launches
# (no host launch gaps), longer ones as an eager loop; each of `passes` interleaved passes visits
# every shape once in its own shuffled order, and a sentinel GEMM (SENTINEL) is timed between blocks
# of `sentinel_every` shapes. A measurement's drift-corrected time is raw x (median sentinel time) /
# (geometric mean of the two sentinels around its block); a shape's time is the median over passes.

ROTATE_BYTES = 192e6
MAX_SETS = 128
MAX_GRAPH_CALLS = 256
SAMPLE_S = 0.5e-3  # GPU time per timed sample (graph replay or eager loop)

# log2 grid steps and ranges per dtype: bf16 at factors of sqrt(2), fp16 / fp32 at factors of 2.
# Grid sizes are multiples of 64 (of 32 below 256); sizes that are only multiples of 8, 16 or 32 are
# measured as the "align" set (grid points with dimensions moved by -8, -16 or -32) and the
# "random" set (log-uniform multiples of 8), both used for fitting; "holdout" is a separate draw
# of the same kind that is never fitted. The model is claimed inside these ranges only.
GRID_RANGE = {"bf16": ((64, 32768), (256, 32768), (256, 16384)),
              "fp16": ((64, 16384), (256, 16384), (256, 16384)),
              "fp32": ((64, 16384), (256, 16384), (256, 8192))}
GRID_STEP = {"bf16": 0.5, "fp16": 1.0, "fp32": 1.0}
QUICK_RANGE = ((64, 256), (64, 256), (64, 256))
# run 5's counts (the shipped H200 table); run 3 had 360 / 360 bf16 and 60 / 60 fp16 / fp32 align / random,
# with the same held-out draw
SET_COUNTS = {"bf16": {"align": 1500, "random": 2000, "holdout": 300},
              "fp16": {"align": 300, "random": 400, "holdout": 60},
              "fp32": {"align": 300, "random": 400, "holdout": 60}}
N_ODD = 40
# --quick (trying the benchmark on a CPU, tests): the small range, a handful of shapes per set, small splits
QUICK_COUNTS = {"align": 6, "random": 12, "holdout": 6}
QUICK_ODD = 4
QUICK_SPLIT_SHAPES = ((256, 256, 256), (128, 512, 256))
QUICK_MAX_CHUNKS = 8
SPLIT_CHUNKS = (2, 4, 8, 16, 32, 64)
SENTINEL = (8192, 8192, 8192, "bf16")  # timed between blocks of shapes: drift over the sweep
SENTINEL_EVERY = 12
SWEEP_COLUMNS = COLUMNS + ["passes", "spread", "time_raw_s", "spread_raw", "sentinel_ratio", "sm_clock_hz",
                           "time_ref_s", "spread_ref"]
# time_ref_s: median over passes of raw time x probed clock / CLOCK_REF_HZ (the time at the reference
# clock if the GEMM's cycles do not depend on the clock), spread_ref its max / min - 1 (None when not probed)
CLOCK_REF_HZ = 1.98e9  # the H200's highest SM clock (nvidia-smi max clocks; seen on the lent H200s)
# sm_clock_hz: median over passes of the SM clock probed right after each timing (None when not probed)
# sentinel rows (own file): pass, seconds since the sweep began, the timing over the geometric mean of
# its two neighbours - 1 (what the drift correction leaves), and the timing over the median sentinel
SENTINEL_COLUMNS = COLUMNS + ["pass", "at_s", "dev_from_neighbours", "ratio_to_median"]


@dataclass(frozen=True)
class Shape:
    """One GEMM of the sweep: C[m, n] = A[m, k] @ B[k, n]; `set` is grid, align, random, holdout, odd,
    given or sentinel."""

    m: int
    n: int
    k: int
    dtype: str
    set: str = "grid"


def grid_axis(lo: int, hi: int, step: float) -> tuple[int, ...]:
    """Sizes 2^(i * step) from lo to hi, rounded to multiples of 64 (of 32 below 256)."""
    out = []
    e = math.log2(lo)
    while e <= math.log2(hi) + 1e-9:
        v = 2.0 ** e
        q = 32 if v < 256 else 64
        out.append(int(max(q, round(v / q) * q)))
        e += step
    return tuple(sorted(set(out)))


def dtype_range(dtype: str, quick: bool = False) -> tuple[tuple[int, int], ...]:
    """(lo, hi) of M, N and K of a dtype's grid (the range the model is claimed in)."""
    return QUICK_RANGE if quick else GRID_RANGE[dtype]


def _log_mult8(rng: random.Random, lo: int, hi: int) -> int:
    v = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return int(min(hi // 8 * 8, max(-(-lo // 8) * 8, round(v / 8) * 8)))


def alignment(v: int) -> int:
    """Largest power of two dividing v, capped at 64."""
    return min(64, v & -v)


def sweep_shapes(dtypes: Sequence[str], n_random: int | None = None, n_odd: int = N_ODD, seed: int = 0,
                 quick: bool = False, n_holdout: int | None = None, n_align: int | None = None) -> list[Shape]:
    """Grid shapes per dtype, then the align, random, holdout and odd sets (see the comments above)."""
    shapes: list[Shape] = []
    for dt in dtypes:
        rg = dtype_range(dt, quick)
        step = 1.0 if quick else GRID_STEP[dt]
        axes = [grid_axis(lo, hi, step) for lo, hi in rg]
        shapes += [Shape(m, n, k, dt, "grid") for m in axes[0] for n in axes[1] for k in axes[2]]
        counts = dict(QUICK_COUNTS if quick else SET_COUNTS.get(dt, SET_COUNTS["fp16"]))
        for name, override in (("align", n_align), ("random", n_random), ("holdout", n_holdout)):
            if override is not None:
                counts[name] = override if dt == dtypes[0] else max(0, override // 5)
        # separate generators: the held-out draw does not depend on the other sets' counts
        rng_a = random.Random(f"{seed}-align-{dt}")
        for _ in range(counts["align"]):
            g = [rng_a.choice(ax[1:]) for ax in axes]
            moved = [rng_a.random() < 0.5 for _ in range(3)]
            if not any(moved):
                moved[rng_a.randrange(3)] = True
            dims = [v - rng_a.choice((8, 16, 32)) if mv else v for v, mv in zip(g, moved)]
            shapes.append(Shape(*dims, dt, "align"))
        for name in ("random", "holdout"):
            r = random.Random(f"{seed}-{name}-{dt}")
            for _ in range(counts[name]):
                shapes.append(Shape(*[_log_mult8(r, lo, hi) for lo, hi in rg], dt, name))
    rng = random.Random(f"{seed}-odd")
    for _ in range(n_odd):
        dt = dtypes[0]
        dims = [_log_mult8(rng, lo, hi) for lo, hi in dtype_range(dt, quick)]
        j = rng.randrange(3)
        dims[j] += rng.randrange(1, 8)
        shapes.append(Shape(*dims, dt, "odd"))
    return shapes


WORKLOAD_TP = (1, 2, 4, 8)
WORKLOAD_MICRO_BATCH = (1, 2)


def workload_shapes(dtype: str = "bf16", n: int | None = None, seed: int = 0, quick: bool = False) -> list[Shape]:
    """Up to n distinct GEMMs (set "workload") of the catalog's models in training: forward, dgrad and wgrad
    of every preset at TP 1..8 (with sequence parallelism), micro-batch 1 and 2, its own sequence length;
    only plain (unbatched) GEMMs with every dimension a multiple of 8, inside the dtype's claimed range and
    off its grid (n: a random subset). Held out, never fitted."""
    from c3kit.errors import C3kitError
    from c3kit.workload.graph import build_step
    from c3kit.workload.model import get_model, list_models
    from c3kit.workload.ops import Gemm
    from c3kit.workload.parallel import Parallelism

    rg = dtype_range(dtype, quick)
    step = 1.0 if quick else GRID_STEP[dtype]
    on_grid = [set(grid_axis(lo, hi, step)) for lo, hi in rg]
    found: set[tuple[int, int, int]] = set()
    for name in list_models():
        model = get_model(name)
        for tp in WORKLOAD_TP:
            for mb in WORKLOAD_MICRO_BATCH:
                try:
                    par = Parallelism(tp=tp, sp=tp > 1, micro_batch=mb).validate(model, tp)
                    graph = build_step(model, par, "train")
                except C3kitError:
                    continue  # a layout the model does not divide into
                for node in graph.nodes:
                    op = node.op
                    if not isinstance(op, Gemm) or op.batch != 1:
                        continue
                    dims = (op.m, op.n, op.k)
                    inside = all(lo <= v <= hi and v % 8 == 0 for v, (lo, hi) in zip(dims, rg))
                    if inside and not all(v in g for v, g in zip(dims, on_grid)):
                        found.add(dims)
    picked = sorted(found)
    random.Random(f"{seed}-workload-{dtype}").shuffle(picked)
    return [Shape(m, n, k, dtype, "workload") for m, n, k in sorted(picked[:n] if n is not None else picked)]


def warm_up(device, seconds: float = 3.0) -> None:
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


def _ru(x: int, q: int = 128) -> int:
    return -(-x // q) * q


def _esize(dtype: str) -> int:
    return {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]


def _sets(m: int, n: int, k: int, dtype: str) -> tuple[int, int]:
    """(input sets, elements per set) for one shape."""
    stride = _ru(m * k) + _ru(k * n)
    return max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / (stride * _esize(dtype))))), stride


class Pools:
    """Per dtype: one tensor of random normal inputs and one output buffer, sized for a shape list."""

    def __init__(self, shapes: Sequence[Shape], device, seed: int = 0):
        torch = require_torch()
        self.torch, self.device = torch, device
        need_in: dict[str, int] = {}
        need_out: dict[str, int] = {}
        for sh in shapes:
            s, stride = _sets(sh.m, sh.n, sh.k, sh.dtype)
            need_in[sh.dtype] = max(need_in.get(sh.dtype, 0), s * stride)
            need_out[sh.dtype] = max(need_out.get(sh.dtype, 0), _ru(sh.m * sh.n))
        gen = torch.Generator(device=device).manual_seed(seed)
        self.inp, self.out = {}, {}
        for dt, ne in need_in.items():
            self.inp[dt] = torch.randn(ne, dtype=torch_dtype(dt), device=device, generator=gen)
            self.out[dt] = torch.empty(need_out[dt], dtype=torch_dtype(dt), device=device)

    def views(self, m: int, n: int, k: int, dtype: str):
        """(A list, B list, C): rotating input sets and the output, all views into the pools."""
        s, stride = _sets(m, n, k, dtype)
        p = self.inp[dtype]
        sa = _ru(m * k)
        a = [p[i * stride: i * stride + m * k].view(m, k) for i in range(s)]
        b = [p[i * stride + sa: i * stride + sa + k * n].view(k, n) for i in range(s)]
        return a, b, self.out[dtype][: m * n].view(m, n)


_STREAMS: dict = {}


def _capture_stream(torch, device):
    key = str(device)
    if key not in _STREAMS:
        _STREAMS[key] = torch.cuda.Stream(device)
    return _STREAMS[key]


def time_views(a, b, c, device, graph_below_s: float = 200e-6, sample_s: float = SAMPLE_S,
               repeats: int = 3, warm_s: float = 0.0, clocks: list | None = None) -> tuple[float, str]:
    """(seconds per GEMM, method): CUDA graph of back-to-back launches, eager loop with events, or host clock.

    warm_s > 0 first runs the same GEMM untimed for about that many GPU seconds, so that the power
    controller settles at this GEMM's own clock before the timed samples. With a `clocks` list, the SM
    clock is probed right behind each timed sample (while the GPU is still busy) and the median appended."""
    torch = require_torch()
    s = len(a)

    def call(i: int) -> None:
        torch.mm(a[i % s], b[i % s], out=c)

    if getattr(device, "type", str(device)) != "cuda":
        call(0)
        t0 = _time.perf_counter()
        call(1)
        est = max(_time.perf_counter() - t0, 1e-7)
        iters = max(1, min(1000, int(sample_s / est)))
        samples = []
        for _ in range(repeats):
            t0 = _time.perf_counter()
            for i in range(iters):
                call(i)
            samples.append((_time.perf_counter() - t0) / iters)
        return sorted(samples)[len(samples) // 2], "host"
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    call(0)
    e0, e1 = ev(), ev()
    e0.record()
    call(1)
    call(2)
    e1.record()
    e1.synchronize()
    est = e0.elapsed_time(e1) * 1e-3 / 2
    if est < graph_below_s:
        calls = int(min(MAX_GRAPH_CALLS, max(s, math.ceil(sample_s / max(est, 1e-7)))))
        try:
            # one capture stream for the whole sweep (cuBLAS keeps a workspace per stream: a new
            # stream per shape would leak one each), warmed up before the capture
            side = _capture_stream(torch, device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                call(0)
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # capture_begin / capture_end, not torch.cuda.graph(): that one runs gc.collect() and
            # empty_cache() on entry, tens of ms per shape once the sweep holds many rows
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                graph.capture_begin()
                try:
                    for i in range(calls):
                        call(i)
                finally:
                    graph.capture_end()
            torch.cuda.current_stream(device).wait_stream(side)
            for _ in range(max(1, math.ceil(warm_s / (calls * max(est, 1e-7))))):
                graph.replay()
            t = _event_samples(torch, graph.replay, repeats, calls, clocks)
            del graph
            return t, "graph"
        except Exception:  # noqa: BLE001 - capture not possible: time the eager loop
            torch.cuda.synchronize(device)
    iters = max(1, math.ceil(sample_s / max(est, 1e-7)))
    reps = repeats if est < 5e-3 else 2
    for i in range(math.ceil(warm_s / max(est, 1e-7))):
        call(i)

    def loop() -> None:
        for i in range(iters):
            call(i)

    return _event_samples(torch, loop, reps, iters, clocks), "eager"


def _event_samples(torch, run, reps: int, calls: int, clocks: list | None) -> float:
    """Median seconds per call over `reps` event-timed run()s of `calls` GEMMs each; with `clocks`, the
    median SM clock probed behind each sample (while the GPU is still busy) is appended to it."""
    samples, clk = [], []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        run()
        e1.record()
        if clocks is not None:
            clk.append(probe_clock_hz(enqueue_clock_probe()))
        e1.synchronize()
        samples.append(e0.elapsed_time(e1) * 1e-3 / calls)
    if clocks is not None:
        clocks.append(sorted(clk)[len(clk) // 2])
    return sorted(samples)[len(samples) // 2]


def _inputs(torch, m, n, k, dtype, device, gen):
    per_set = (m * k + k * n) * torch.tensor([], dtype=dtype).element_size()
    sets = max(1, min(8, math.ceil(256e6 / max(per_set, 1))))
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


def run_sweep(shapes: Sequence[Shape], device, peak: dict[str, float], passes: int = 3, seed: int = 0,
              on_row=None, budget_s: float = 0.0, errors: list | None = None,
              sentinel_every: int = SENTINEL_EVERY, graph_below_s: float = 200e-6, sample_s: float = SAMPLE_S,
              correct: bool = True, log=None, probe_clock: bool = False) -> tuple[list[list], list[list], dict]:
    """(rows, sentinel rows, stats): every shape timed in `passes` interleaved shuffled passes.

    Rows have SWEEP_COLUMNS (sentinel rows SENTINEL_COLUMNS): time_s is the median over passes of the drift-corrected time when
    `correct` (else of the raw time), time_raw_s the median of raw times, spread / spread_raw the
    max / min - 1 over passes, sentinel_ratio the median local sentinel / median sentinel, sm_clock_hz the
    median SM clock probed after each timing (probe_clock). Sentinel rows
    (set "sentinel", in time order) hold each sentinel timing. Stops at budget_s (a shape then has fewer
    passes; shapes never timed are reported in errors)."""
    import statistics

    torch = require_torch()
    errors = errors if errors is not None else []
    cuda = getattr(device, "type", str(device)) == "cuda"
    sent = Shape(*SENTINEL[:3], SENTINEL[3], "sentinel")
    use_sent = sentinel_every > 0 and SENTINEL[3] in peak
    pools = Pools(list(shapes) + ([sent] if use_sent else []), device, seed)
    meas: dict[int, list[tuple[float, float]]] = {i: [] for i in range(len(shapes))}
    clocks: dict[int, list[float]] = {i: [] for i in range(len(shapes))}
    sent_t: list[tuple[int, float, float]] = []  # (pass, seconds since start, time)
    methods: dict[str, int] = {}
    t_start = _time.perf_counter()
    stop = False
    pass_s = []

    def time_one(sh: Shape, clock_to: list | None = None) -> float:
        """Seconds per GEMM of sh; with probe_clock on CUDA its probed clock is appended to clock_to."""
        a, b, c = pools.views(sh.m, sh.n, sh.k, sh.dtype)
        t, how = time_views(a, b, c, device, graph_below_s, sample_s,
                            clocks=clock_to if (probe_clock and cuda) else None)
        methods[how] = methods.get(how, 0) + 1
        return t

    for p in range(max(1, passes)):
        tp = _time.perf_counter()
        order = list(range(len(shapes)))
        random.Random(f"{seed}-pass-{p}").shuffle(order)
        blocks = [order[i: i + sentinel_every] for i in range(0, len(order), sentinel_every)] if use_sent else [order]
        prev = None
        if use_sent:
            prev = time_one(sent)
            sent_t.append((p, _time.perf_counter() - t_start, prev))
        for blk in blocks:
            got = []
            for i in blk:
                if budget_s > 0 and _time.perf_counter() - t_start > budget_s:
                    stop = True
                    break
                sh = shapes[i]
                try:
                    got.append((i, time_one(sh, clocks[i])))
                except Exception as e:  # noqa: BLE001 - one failing shape (memory, library) must not lose the sweep
                    errors.append(f"{sh}: {type(e).__name__}: {str(e)[:200]}")
                    if cuda:
                        torch.cuda.synchronize(device)
            if use_sent:
                nxt = time_one(sent)
                sent_t.append((p, _time.perf_counter() - t_start, nxt))
                local = math.sqrt(prev * nxt)
                prev = nxt
            else:
                local = float("nan")
            for i, t in got:
                meas[i].append((t, local))
            if stop:
                break
        pass_s.append(_time.perf_counter() - tp)
        if log:
            log(f"# pass {p + 1}: {pass_s[-1]:.1f} s, {len(sent_t)} sentinel timings so far")
        if stop:
            errors.append(f"time budget of {budget_s:.0f} s reached in pass {p + 1}")
            break
    s_med = statistics.median([t for _, _, t in sent_t]) if sent_t else float("nan")
    rows = []
    for i, sh in enumerate(shapes):
        ms = meas[i]
        if not ms:
            errors.append(f"{sh}: not timed")
            continue
        raw = [t for t, _ in ms]
        cor = [t * s_med / loc for t, loc in ms] if use_sent else raw
        used = cor if correct else raw
        t = statistics.median(used)
        rate = 2.0 * sh.m * sh.n * sh.k / t
        ratio = statistics.median([loc / s_med for _, loc in ms]) if use_sent else 1.0
        row = [sh.m, sh.n, sh.k, sh.dtype, "none", 1, t, rate, rate / peak[sh.dtype], 0.0, sh.set,
               len(ms), max(used) / min(used) - 1.0, statistics.median(raw), max(raw) / min(raw) - 1.0, ratio,
               statistics.median(clocks[i]) if clocks[i] else None]
        if clocks[i] and len(clocks[i]) == len(ms):
            ref = [t * c / CLOCK_REF_HZ for t, c in zip(raw, clocks[i])]
            row += [statistics.median(ref), max(ref) / min(ref) - 1.0]
        else:
            row += [None, None]
        rows.append(row)
        if on_row:
            on_row(row)
    srows = []
    m, n, k, dt = SENTINEL
    for j, (p, ts, t) in enumerate(sent_t):
        # leave-one-out: the sentinel against the geometric mean of its neighbours (what the correction sees)
        nb = [sent_t[x][2] for x in (j - 1, j + 1) if 0 <= x < len(sent_t)]
        loo = t / math.exp(sum(math.log(v) for v in nb) / len(nb)) if nb else 1.0
        rate = 2.0 * m * n * k / t
        srows.append([m, n, k, dt, "none", 1, t, rate, rate / peak[dt], 0.0, "sentinel", p + 1, round(ts, 2),
                      loo - 1.0, t / s_med])
    stats = {"passes_s": [round(x, 1) for x in pass_s], "methods": methods, "sentinel_median_s": s_med,
             "time_s": "drift-corrected" if (correct and use_sent) else "raw",
             "wall_s": round(_time.perf_counter() - t_start, 1)}
    return rows, srows, stats


STEADY_COLUMNS = COLUMNS + ["sm_clock_hz", "time_ref_s", "hold_s"]


def run_steady(shapes: Sequence[Shape], device, peak: dict[str, float], hold_s: float = 0.4, seed: int = 0,
               on_row=None, errors: list | None = None, budget_s: float = 0.0) -> list[list]:
    """Rows (STEADY_COLUMNS): each shape first run back to back, untimed, for 5/8 of hold_s (the power
    controller settles within about 150 ms on the H200), then timed: 3 samples of about hold_s / 8 each
    as an eager loop, or 3 graph replays for GEMMs under 200 us; the SM clock probed behind each sample."""
    torch = require_torch()
    errors = errors if errors is not None else []
    pools = Pools(shapes, device, seed)
    order = list(range(len(shapes)))
    random.Random(f"{seed}-steady").shuffle(order)
    rows: list[list] = []
    cuda = getattr(device, "type", str(device)) == "cuda"
    t0 = _time.perf_counter()
    for i in order:
        sh = shapes[i]
        if budget_s > 0 and _time.perf_counter() - t0 > budget_s:
            errors.append(f"steady time budget of {budget_s:.0f} s reached after {len(rows)} shapes")
            break
        a, b, c = pools.views(sh.m, sh.n, sh.k, sh.dtype)
        clk: list[float] = []
        try:
            t, _ = time_views(a, b, c, device, 200e-6, sample_s=hold_s / 8, repeats=3, warm_s=hold_s * 5 / 8,
                              clocks=clk if cuda else None)
        except Exception as e:  # noqa: BLE001 - one failing shape must not lose the rest
            errors.append(f"steady {sh}: {type(e).__name__}: {str(e)[:200]}")
            if cuda:
                torch.cuda.synchronize(device)
            continue
        rate = 2.0 * sh.m * sh.n * sh.k / t
        f = clk[0] if clk else None
        rows.append([sh.m, sh.n, sh.k, sh.dtype, "none", 1, t, rate, rate / peak[sh.dtype], 0.0, sh.set, f,
                     t * f / CLOCK_REF_HZ if f else None, hold_s])
        if on_row:
            on_row(rows[-1])
    return rows


def steady_shapes(shapes: Sequence[Shape], n: int, seed: int = 0) -> list[Shape]:
    """Up to n shapes of each of the random (fit), holdout and workload sets, drawn at random from each."""
    out: list[Shape] = []
    for name in ("random", "holdout", "workload"):
        pool = [s for s in shapes if s.set == name]
        random.Random(f"{seed}-steady-{name}").shuffle(pool)
        out += pool[:n]
    return out


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
