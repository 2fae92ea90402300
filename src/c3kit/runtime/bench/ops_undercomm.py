"""A bf16 GEMM while a communication stand-in runs beside it: the k-block SM copy kernel (k like NCCL's channel
counts), a copy-engine device-to-device copy and a pinned host-to-device copy, each launched first on a
high-priority stream and kept busy for longer than the GEMMs, at full rate or throttled to half duty. How much does a
concurrent collective slow compute (FSDP / DP overlap), and how much does the GEMM slow the copy?

Family of `python -m c3kit.runtime.bench.ops --only gemm_under_comm`. Run time on one H200: 37 s in call 31 (3 GEMM
shapes x 16 stand-ins; about twice that with the six shapes of call 32; --budget-s cuts whole cases), a few seconds more since the GEMM alone is timed beside each case.
Call 30 timed the GEMM alone once per shape, before its clocks had ramped up (it ran 12% slower than under the copy):
the GEMMs now run WARMUP_S before anything is timed, and each row's GEMM alone is timed right before its case.
"""

from __future__ import annotations

import math
import statistics
import time as _time

from c3kit.runtime.bench import copykernel
from c3kit.runtime.bench.timing import Budget, sm_clock_hz

COLUMNS = ["gemm_m", "gemm_n", "gemm_k", "comm", "blocks", "duty", "chunk_bytes", "gemm_alone_s", "gemm_under_s",
           "copy_alone_Bps", "copy_under_Bps", "covered"]

# (m, n, k) of training GEMMs: a square 8k cube, a 70B-class gate+up projection, a 70B-class down projection at TP 8,
# and an 8B-class layer's QKV, gate+up and output projections at 8k tokens (FSDP without TP: the GEMMs beside the gathers)
GEMMS = ((8192, 8192, 8192), (4096, 28672, 8192), (16384, 8192, 3584),
         (8192, 6144, 4096), (8192, 28672, 4096), (8192, 4096, 4096))
BLOCKS = (1, 2, 4, 8, 16, 32)  # grid sizes of the SM copy: NCCL's usual channel counts
DUTIES = (1.0, 0.5)  # share of the time the stand-in copies (0.5: a sleep as long as each chunk follows it)
BUF_BYTES = 1 << 30  # largest chunk: about 0.4 ms for the fastest copies, so few events per run
WINDOW_S = 0.03  # GEMM time per measurement
CHUNK_S = 1e-3  # copy time per chunk when alone
REPEATS = 3
WARMUP_S = 1.0  # GEMMs back to back before the first timing: the SM clock ramps up from idle over ~0.1-1 s


def _copiers(torch, device, cuda: bool):
    """[(comm, blocks, copy(nbytes))]: each call copies nbytes on the current stream."""
    src = torch.empty(BUF_BYTES, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    out = []
    if cuda and copykernel.available()[0]:
        for k in BLOCKS:
            out.append(("sm_copy", k, lambda n, k=k: copykernel.sm_copy(src[:n], dst[:n], k)))
    out.append(("ce_d2d", 0, lambda n: dst[:n].copy_(src[:n], non_blocking=True)))
    if cuda:
        host = torch.empty(BUF_BYTES, dtype=torch.uint8, pin_memory=True)
        out.append(("h2d", 0, lambda n: dst[:n].copy_(host[:n], non_blocking=True)))
    return out


def _run(torch, device, hp, copy, chunk: int, n_chunks: int, sleep_cycles: int, gemm, reps: int):
    """One schedule: n_chunks copies (each followed by a sleep of sleep_cycles) on stream hp, then (after the
    first two chunks, so the copy is running first) reps GEMMs on the current stream. Returns the chunk-end times
    and the GEMM start / end (ms from the first copy's start)."""
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    main = torch.cuda.current_stream(device)
    c = [ev() for _ in range(n_chunks + 1)]
    g0, g1 = ev(), ev()
    hp.wait_stream(main)
    lead = min(2, n_chunks)

    def chunks(lo, hi):
        with torch.cuda.stream(hp):
            if lo == 0:
                c[0].record()
            for i in range(lo, hi):
                copy(chunk)
                c[i + 1].record()
                if sleep_cycles:
                    torch.cuda._sleep(sleep_cycles)

    chunks(0, lead)
    if gemm is not None:
        main.wait_event(c[1])
        g0.record()
        for _ in range(reps):
            gemm()
        g1.record()
    chunks(lead, n_chunks)
    main.wait_stream(hp)
    torch.cuda.synchronize(device)
    ends = [c[0].elapsed_time(e) for e in c[1:]]
    if gemm is None:
        return ends, float("nan"), float("nan")
    return ends, c[0].elapsed_time(g0), c[0].elapsed_time(g1)


def _rate(ends, chunk: int, lo: float = -math.inf, hi: float = math.inf) -> float:
    """Bytes per second over the chunks that ended inside [lo, hi] ms (NaN with fewer than two)."""
    inside = [t for t in ends if lo <= t <= hi]
    if len(inside) < 2 or inside[-1] <= inside[0]:
        return float("nan")
    return (len(inside) - 1) * chunk / ((inside[-1] - inside[0]) * 1e-3)


def _gemm_alone(torch, device, gemm, reps: int) -> float:
    """Seconds per GEMM from events around reps eager launches (as in the schedule, without the copy)."""
    samples = []
    for _ in range(REPEATS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            gemm()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) * 1e-3 / reps)
    return statistics.median(samples)


def _cuda_rows(torch, device, quick: bool) -> list[list]:
    """Rows measured on a GPU."""
    bf = torch.bfloat16
    hp = torch.cuda.Stream(device, priority=-100)  # clamped to the highest priority the device allows
    copiers = _copiers(torch, device, True)
    clock = sm_clock_hz(device)
    gemms = GEMMS[:1] if quick else GEMMS
    rows = []
    for m, n, k in gemms:
        if Budget.spent():
            break
        A, B = torch.randn(m, k, device=device, dtype=bf), torch.randn(k, n, device=device, dtype=bf)
        C = torch.empty(m, n, device=device, dtype=bf)
        gemm = lambda A=A, B=B, C=C: torch.matmul(A, B, out=C)  # noqa: E731
        gemm()
        torch.cuda.synchronize(device)
        t0 = _time.perf_counter()
        gemm()
        torch.cuda.synchronize(device)
        reps = int(max(3, min(200, WINDOW_S / max(_time.perf_counter() - t0, 1e-5))))
        alone = _gemm_alone(torch, device, gemm, reps)
        reps = int(max(3, min(400, WINDOW_S / alone)))
        t0 = _time.perf_counter()
        while _time.perf_counter() - t0 < WARMUP_S:
            _gemm_alone(torch, device, gemm, reps)
        for comm, blocks, copy in (copiers[:2] if quick else copiers):
            for duty in (DUTIES[:1] if quick else DUTIES):
                if Budget.spent():
                    break
                # size the chunks from a probe so that each takes about CHUNK_S alone
                probe = 16 << 20
                copy(probe)
                torch.cuda.synchronize(device)
                ends, _, _ = _run(torch, device, hp, copy, probe, 4, 0, None, 0)
                bw = _rate(ends, probe)
                bw = bw if bw == bw else probe / 1e-3
                chunk = int(min(BUF_BYTES, max(1 << 20, bw * CHUNK_S))) // (1 << 20) * (1 << 20)
                t_chunk = chunk / bw
                sleep = int(t_chunk * clock * (1.0 / duty - 1.0)) if duty < 1.0 and clock == clock else 0
                n_chunks = int(math.ceil((3.0 * reps * alone + 0.01) / (t_chunk / duty))) + 2
                ends, _, _ = _run(torch, device, hp, copy, chunk, n_chunks, sleep, None, 0)
                copy_alone = _rate(ends, chunk)
                alone = _gemm_alone(torch, device, gemm, reps)
                under, rates, covered = [], [], True
                for _ in range(REPEATS):
                    ends, gs, ge = _run(torch, device, hp, copy, chunk, n_chunks, sleep, gemm, reps)
                    under.append((ge - gs) * 1e-3 / reps)
                    rates.append(_rate(ends, chunk, gs, ge))
                    covered = covered and ends[0] <= gs and ends[-1] >= ge
                rows.append([m, n, k, comm, blocks, duty, chunk, alone, statistics.median(under), copy_alone,
                             statistics.median(rates), int(covered)])
        del A, B, C
    return rows


def bench_gemm_under_comm(device, quick: bool) -> tuple[list[str], list[list]]:
    """GEMM alone and under a concurrent copy stand-in (SM copy at k blocks, CE D2D, pinned H2D), with copy rates."""
    import torch

    if device.type == "cuda":
        return COLUMNS, _cuda_rows(torch, device, quick)
    # streams and events need a GPU: on the CPU one tiny GEMM after a copy checks the plumbing of the rows only
    m = n = k = 64
    A, B = torch.randn(m, k), torch.randn(k, n)
    src = torch.randn(1 << 16)
    dst = torch.empty_like(src)
    nbytes = src.numel() * src.element_size()

    def clock(fns):
        t0 = _time.perf_counter()
        for f in fns:
            f()
        return _time.perf_counter() - t0

    gemm, copy = (lambda: A @ B), (lambda: dst.copy_(src))
    alone, both, c = clock([gemm]), clock([copy, gemm]), clock([copy])
    return COLUMNS, [[m, n, k, "ce_d2d", 0, 1.0, nbytes, alone, max(both - c, 1e-9), nbytes / c, nbytes / c, 0]]
