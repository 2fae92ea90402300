"""Time the overlap engine: every schedule of one operator, and every pair of a 126-layer model.

Run: .venv/bin/python benchmarks/bench_overlap.py [--repeat N]
Targets (issue 3): all schedules of one operator in under 5 ms on one core.
"""

from __future__ import annotations

import argparse
import statistics
import time

from c3kit.hw import get_gpu
from c3kit.overlap import OverlapProblem, evaluate, select
from c3kit.overlap.scenarios import model_pairs

OPS = [
    ("ag_gemm", 8192, 1024, 8192, 0),
    ("gemm_rs", 8192, 8192, 1024, 0),
    ("gemm_ar", 8192, 8192, 1024, 0),
    ("moe", 16384, 2048, 4096, 64),
    ("bulk", 8192, 8192, 8192, 0),
]


def _time(fn, repeat: int) -> tuple[float, float]:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--model", default="Llama-3-405B")
    args = ap.parse_args()
    print("all schedules of one operator (evaluate), and the selector alone (select); ms, min / median")
    worst = 0.0
    for hw in ("H200", "MI300X"):
        gpu = get_gpu(hw)
        for pat, m, n, k, e in OPS:
            p = OverlapProblem(pat, m, n, k, gpus=8, experts=e)
            evaluate(p, gpu)  # warm imports
            nsched = len(evaluate(p, gpu))
            lo, med = _time(lambda: evaluate(p, gpu), args.repeat)
            slo, smed = _time(lambda: select(p, gpu), args.repeat)
            worst = max(worst, med)
            print(f"  {hw:7s} {p.label():45s} {nsched:2d} schedules  evaluate {lo * 1e3:6.2f} / {med * 1e3:6.2f}"
                  f"   select {slo * 1e3:5.2f} / {smed * 1e3:5.2f}")
    print(f"worst median: {worst * 1e3:.2f} ms per operator (target < 5 ms)")
    for hw in ("H200", "MI300X"):
        gpu = get_gpu(hw)
        pairs = model_pairs(args.model, tp=8, tokens=8192)
        layers = pairs[0].count
        t0 = time.perf_counter()
        for pr in pairs:
            evaluate(pr.problem, gpu)
        t_unique = time.perf_counter() - t0
        t0 = time.perf_counter()
        n = 0
        for pr in pairs:
            for _ in range(pr.count):
                evaluate(pr.problem, gpu)
                n += 1
        t_all = time.perf_counter() - t0
        print(f"{args.model} ({layers} layers) TP 8 on {hw}: {len(pairs)} pairs per layer; every schedule of "
              f"every pair of every layer ({n} evaluations) {t_all:.2f} s, of the {len(pairs)} distinct pairs "
              f"{t_unique * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
