"""Two kernels at once on one GPU: pairs of GEMMs, a GEMM beside a memory-bound kernel and a GEMM beside a
device-to-device copy (cudaMemcpyAsync), each pair run back to back on one stream and concurrently on two streams,
beside each kernel alone; all inside CUDA graphs. How much do two GEMMs on two streams (as PyTorch's async TP
issues its steps) gain over running one after the other, and how much does a copy or an elementwise kernel slow a
GEMM beside it?

Family of `python -m c3kit.runtime.bench.ops --only gemm_pair`.
"""

from __future__ import annotations

import statistics

from c3kit.runtime.bench.timing import Budget, capture_graph, elapsed

PAIR_COLUMNS = ["kind", "a_m", "a_n", "a_k", "b_m", "b_n", "b_k", "b_bytes", "a_s", "b_s", "serial_s",
                "concurrent_s"]

# (m, n, k) of the GEMMs paired: output tiles of 128 x 256 from a quarter wave to several waves of 132 SMs,
# square, skinny and long-K, and the per-step chunk shapes of async TP on 8 GPUs (Llama-3-70B-like FFN).
GEMMS = {
    "quarter": (1024, 1024, 4096),
    "wave": (2048, 2048, 4096),
    "wave_longk": (1024, 4096, 8192),
    "skinny": (512, 8192, 8192),
    "waves4": (4096, 4096, 4096),
    "big": (8192, 8192, 8192),
    "chunk_ag": (1024, 3584, 8192),
    "chunk_rs": (1024, 8192, 3584),
}
PAIRS = [("quarter", "quarter"), ("quarter", "wave"), ("wave", "wave"), ("wave", "wave_longk"),
         ("wave_longk", "wave_longk"), ("skinny", "skinny"), ("skinny", "quarter"), ("waves4", "quarter"),
         ("waves4", "wave"), ("waves4", "waves4"), ("big", "quarter"), ("big", "waves4"), ("big", "big"),
         ("chunk_ag", "chunk_ag"), ("chunk_rs", "chunk_rs"), ("chunk_ag", "chunk_rs")]
# bytes each memory-bound kernel or copy moves (read + write)
SIDE_BYTES = (32 << 20, 256 << 20, 1 << 30)
SIDE_GEMMS = ("quarter", "wave", "waves4", "big", "chunk_ag")


def _operands(torch, shape, device, dtype):
    """(A, B, C) of a GEMM C = A @ B."""
    m, n, k = shape
    return (torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype),
            torch.empty(m, n, device=device, dtype=dtype))


def _gemm(torch, ops):
    """A call that runs the GEMM of ops in place."""
    A, B, C = ops
    return lambda: torch.matmul(A, B, out=C)


def _time(device, fns, reps: int, repeats: int = 7) -> float:
    """Median seconds of one pass over fns, from replays of a CUDA graph of reps passes."""
    g = capture_graph([f for _ in range(reps) for f in fns], device, warm=list(fns), replays=2)
    return statistics.median(elapsed(g.replay, device) / reps for _ in range(repeats))


def _pair_times(torch, device, fa, fb, reps: int) -> tuple[float, float, float, float]:
    """(a alone, b alone, a then b on one stream, a and b on two streams joined after each pass)."""
    side = torch.cuda.Stream(device)

    def concurrent():
        main = torch.cuda.current_stream(device)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            fb()
        fa()
        main.wait_stream(side)

    return (_time(device, [fa], reps), _time(device, [fb], reps), _time(device, [fa, fb], reps),
            _time(device, [concurrent], reps))


def _reps(t_est: float) -> int:
    """Passes per graph so that one replay takes about 20 ms."""
    return int(max(3, min(200, 0.02 / max(t_est, 1e-6))))


def bench_gemm_pair(device, quick: bool) -> tuple[list[str], list[list]]:
    """GEMM + GEMM, GEMM + elementwise add and GEMM + device-to-device copy: alone, serial and concurrent."""
    import torch

    if device.type != "cuda":
        # two streams need a GPU: on the CPU one small pair in order checks the plumbing of the rows only
        gemms, pairs, sides = {"quarter": (32, 32, 32)}, [("quarter", "quarter")], (1 << 16,)
    else:
        gemms, pairs, sides = GEMMS, PAIRS, SIDE_BYTES
    if quick:
        pairs, sides = pairs[:1], sides[:1]
    bf = torch.bfloat16
    ops = {name: _operands(torch, s, device, bf) for name, s in gemms.items()
           if any(name in p for p in pairs) or name in SIDE_GEMMS}
    rows = []

    def times(fa, fb, t_est):
        if device.type != "cuda":
            import time as _t

            def clock(fns):
                t0 = _t.perf_counter()
                for f in fns:
                    f()
                return _t.perf_counter() - t0

            return clock([fa]), clock([fb]), clock([fa, fb]), clock([fa, fb])
        return _pair_times(torch, device, fa, fb, _reps(t_est))

    for a, b in pairs:
        if Budget.spent():
            break
        sa, sb = gemms[a], gemms[b]
        t_est = 2.0 * (sa[0] * sa[1] * sa[2] + sb[0] * sb[1] * sb[2]) / 6e14
        rows.append(["gemm+gemm", *sa, *sb, 0, *times(_gemm(torch, ops[a]), _gemm(torch, ops[b]), t_est)])
    for a in (n for n in SIDE_GEMMS if n in ops):
        for nbytes in sides:
            if Budget.spent():
                break
            sa = gemms[a]
            n = nbytes // 2 // 2  # bf16 elements of each of the two tensors (read one, write the other)
            x, y = torch.randn(n, device=device, dtype=bf), torch.empty(n, device=device, dtype=bf)
            t_est = 2.0 * sa[0] * sa[1] * sa[2] / 6e14 + nbytes / 4e12
            fa = _gemm(torch, ops[a])
            rows.append(["gemm+add", *sa, 0, 0, 0, nbytes,
                         *times(fa, lambda x=x, y=y: torch.add(x, 1.0, out=y), t_est)])
            rows.append(["gemm+copy", *sa, 0, 0, 0, nbytes, *times(fa, lambda x=x, y=y: y.copy_(x), t_est)])
            del x, y
            if quick:
                break
        if quick:
            break
    return PAIR_COLUMNS, rows
