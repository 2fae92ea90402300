"""Steady-state (power-capped) times of the kernels beside GEMMs: attention forward and backward, a whole
training block, a memory-bound op, and an 8192^3 GEMM as the reference whose factor c3kit already knows.

A training step runs its kernels back to back for seconds; the op tables time each case in windows of
10-60 ms, at whatever clock the GPU had. The GEMM's sustained factor is measured (cost/power.py); this
family asks the same of the other classes. Each case is timed twice: "burst" (the table's protocol:
eager loops of about 10 ms right after a 0.3 s idle pause, clocks ramped by a 20 ms warm-up) and
"steady" (after hold_s of the case back to back), each with the SM clock probed behind the timed loop.

Family of `python -m c3kit.runtime.bench.ops --only steady_ops`: about 45 s on one H200 (estimated).
"""

from __future__ import annotations

import statistics
import sys
import time as _time

from c3kit.runtime._torch import require_torch
from c3kit.runtime.bench.blocks import block_forward, block_weights
from c3kit.runtime.bench.ops_recipes import backend_ctx
from c3kit.runtime.bench.timing import Budget, elapsed, sm_clock_hz, sync

STEADY_COLUMNS = ["op", "backend", "pass", "tokens", "seq", "heads", "kv_heads", "head_dim", "width", "mode",
                  "time_s", "sm_clock_hz", "hold_s"]
HOLD_S = 0.6  # the H200's power controller settles within about 150 ms (cost/power.py)
PAUSE_S = 0.3


def _loop_time(fn, device, seconds: float, repeats: int = 3) -> float:
    """Median seconds of one fn() from `repeats` eager loops of about `seconds` each."""
    fn()
    sync(device)
    t0 = _time.perf_counter()
    fn()
    sync(device)
    iters = int(min(5000, max(2, seconds / max(_time.perf_counter() - t0, 1e-6))))

    def loop():
        for _ in range(iters):
            fn()

    return statistics.median(elapsed(loop, device) / iters for _ in range(repeats))


def _hold(fn, device, seconds: float) -> None:
    """Run fn() back to back for about `seconds` (untimed)."""
    t_end = _time.perf_counter() + seconds
    while _time.perf_counter() < t_end:
        for _ in range(4):
            fn()
        sync(device)


def burst_and_steady(fn, device, hold_s: float = HOLD_S) -> list[tuple[str, float, float]]:
    """[(mode, seconds, SM clock Hz)] for "burst" (after an idle pause) and "steady" (after hold_s back to back)."""
    cuda = getattr(device, "type", str(device)) == "cuda"
    sync(device)
    _time.sleep(PAUSE_S if cuda else 0.0)
    _hold(fn, device, 0.02)
    tb = _loop_time(fn, device, 0.01)
    cb = sm_clock_hz(device)
    _hold(fn, device, hold_s)
    ts = _loop_time(fn, device, hold_s / 4)
    cs = sm_clock_hz(device)
    return [("burst", tb, cb), ("steady", ts, cs)]


def steady_cases(quick: bool) -> list[tuple]:
    """(op, backend, pass, tokens, seq, heads, kv_heads, head_dim, width) of every case, in run order."""
    if quick:
        return [("attention", "default", "fwd", 64, 64, 4, 2, 32, 0), ("attention", "default", "bwd", 64, 64, 4, 2, 32, 0),
                ("gemm", "", "fwd", 64, 0, 0, 0, 0, 64), ("rmsnorm", "", "fwd", 64, 0, 0, 0, 0, 64),
                ("block", "", "fwd_bwd", 64, 64, 4, 2, 32, 128)]
    cases: list[tuple] = [("gemm", "", "fwd", 8192, 0, 0, 0, 0, 8192)]
    for backend in ("flash", "cudnn"):
        for seq in (4096, 16384, 65536):
            tokens = max(seq, 32768)
            for p in ("fwd", "bwd"):
                cases.append(("attention", backend, p, tokens, seq, 32, 8, 128, 0))
    cases += [("attention", "flash", p, 32768, 8192, 32, 8, 64, 0) for p in ("fwd", "bwd")]
    cases += [("rmsnorm", "", "fwd", 16384, 0, 0, 0, 0, 8192)]
    cases += [("block", "", "fwd_bwd", 8192, 8192, 32, 8, 128, 4096), ("block", "", "fwd_bwd", 16384, 16384, 16, 2, 128, 5120)]
    return cases


def _case_fn(torch, case, device):
    """The callable that runs one case (its tensors captured)."""
    op, backend, pss, tokens, seq, hq, hk, hd, width = case
    F = torch.nn.functional
    bf = torch.bfloat16
    if op == "gemm":
        a = torch.randn(tokens, width, device=device, dtype=bf)
        b = torch.randn(width, width, device=device, dtype=bf)
        return lambda: a @ b
    if op == "rmsnorm":
        x = torch.randn(tokens, width, device=device, dtype=bf)
        w = torch.ones(width, device=device, dtype=bf)
        return lambda: F.rms_norm(x, (width,), w, 1e-5)
    if op == "attention":
        b = max(1, tokens // seq)
        q = torch.randn(b, hq, seq, hd, device=device, dtype=bf, requires_grad=True)
        k = torch.randn(b, hk, seq, hd, device=device, dtype=bf, requires_grad=True)
        v = torch.randn(b, hk, seq, hd, device=device, dtype=bf, requires_grad=True)

        def fwd():
            with backend_ctx(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hk)
        if pss == "fwd":
            return fwd
        o = fwd()
        go = torch.randn_like(o)
        return lambda: torch.autograd.grad(o, (q, k, v), go, retain_graph=True)
    ffn = {4096: 14336, 5120: 13824, 128: 256}.get(width, 4 * width)
    p = block_weights(torch, width, hq, hk, hd, ffn, device, bf)
    x = torch.randn(1, seq, width, device=device, dtype=bf, requires_grad=True)
    cos = torch.randn(seq, 1, hd, device=device, dtype=bf)
    sin = torch.randn(seq, 1, hd, device=device, dtype=bf)
    g = torch.randn(1, seq, width, device=device, dtype=bf)

    def fb():
        torch.autograd.backward(block_forward(torch, p, x, cos, sin, hq, hk, hd), g)
    return fb


def bench_steady_ops(device, quick: bool) -> tuple[list[str], list[list]]:
    """Burst and steady-state times (with SM clocks) of attention, a block, RMSNorm and a reference GEMM."""
    torch = require_torch()
    rows: list[list] = []
    hold = HOLD_S if not quick else 0.01
    for case in steady_cases(quick):
        if Budget.spent():
            break
        try:
            fn = _case_fn(torch, case, device)
            for mode, t, clk in burst_and_steady(fn, device, hold):
                rows.append(list(case) + [mode, t, clk, hold if mode == "steady" else 0.0])
        except Exception as ex:  # noqa: BLE001 - one case that cannot run must not lose the rest
            print(f"steady_ops {case}: {type(ex).__name__}: {str(ex)[:160]}", file=sys.stderr)
        if getattr(device, "type", "") == "cuda":
            torch.cuda.empty_cache()
    return STEADY_COLUMNS, rows
