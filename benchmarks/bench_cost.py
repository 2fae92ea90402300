"""Per-call time of c3kit.cost.time for a GEMM and two collectives, per cost model, on one core.

Prints microseconds per call and the ratio to the roofline model measured in the same run.
"""

from __future__ import annotations

import time as _time

from c3kit import cost
from c3kit.hw import get_gpu
from c3kit.workload.ops import Collective, Gemm


def per_call(fn, n: int = 20000) -> float:
    """Seconds per call of fn, after one warm-up call."""
    fn()
    t0 = _time.perf_counter()
    for _ in range(n):
        fn()
    return (_time.perf_counter() - t0) / n


def main() -> None:
    """Print the table."""
    gpu = get_gpu("H200-SXM")
    ops = {"gemm 4096x28672x8192": Gemm("g", 4096, 28672, 8192),
           "all-reduce 64MB x8": Collective("ar", "all_reduce", 64e6, 8),
           "all-gather 64MB x16 inter": Collective("ag", "all_gather", 64e6, 16, group="dp", span="inter")}
    print(f"{'op':28s} {'model':11s} {'us/call':>9s} {'x roofline':>11s}")
    for name, op in ops.items():
        times = {m: per_call(lambda m=m: cost.time(op, gpu, m)) for m in (None, "efficiency", "table")}
        for model, t in times.items():
            print(f"{name:28s} {str(model or 'roofline'):11s} {t * 1e6:9.2f} {t / times[None]:11.2f}")


if __name__ == "__main__":
    main()
