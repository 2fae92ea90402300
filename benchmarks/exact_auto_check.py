"""Bit-for-bit check of the engine-priced overlap modes before and after a change to their pricing internals.

Run: .venv/bin/python benchmarks/exact_auto_check.py --save before.npz   (at the base commit)
     .venv/bin/python benchmarks/exact_auto_check.py --compare before.npz (after the change)
Prices, from empty caches: (1) a few thousand random dense training scenarios (benchmarks/bench_scale.py's future
H200 generations, and catalog GPUs of both scale-up topologies) through the vectorized sweep under auto and every
schedule family, keeping every scenario's exposed communication and step time; (2) a grid of single pairs
(every pattern, MoE and bulk included, several GPU counts and sizes) through step.policy.price_pair under auto and
every family, keeping the schedule and its saved share. --compare says how many values differ (exit 1 if any);
the speed of the change is bench_scale.py's to report.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_scale  # noqa: E402

from c3kit.hw import get_gpu  # noqa: E402
from c3kit.overlap.problem import OverlapProblem  # noqa: E402
from c3kit.step.fast import project_many  # noqa: E402
from c3kit.step.policy import FAMILIES, EngineOverlap, price_pair  # noqa: E402

MODES = ("auto", *(f for f in FAMILIES if f != "serial"))
CATALOG = ("H100-SXM", "MI300X", "B200", "A100-SXM-80G", "MI355X")


def sweep_tables(n: int) -> list[tuple[str, object, dict]]:
    """(label, scenario table, gpus) for the sweep: future H200 generations, then catalog GPUs."""
    df, gpus = bench_scale.scenarios(n, seed=7)
    df2, _ = bench_scale.scenarios(n, seed=8)
    cat = {name: get_gpu(name) for name in CATALOG}
    df2["gpu"] = np.random.default_rng(9).choice(list(cat), len(df2))
    return [("future", df, gpus), ("catalog", df2, cat)]


def pair_grid() -> list[tuple[OverlapProblem, str]]:
    """Single pairs of every pattern on catalog GPUs: GPU counts 2-8, skinny to square GEMMs."""
    out = []
    for gpu in ("H200-SXM", "MI300X", "B200", "H100-SXM"):
        for r in (2, 4, 8):
            for m in (r * r * 64, 2048, 8192, 32768):
                for n, k in ((1024, 8192), (4096, 4096), (16384, 2048), (3072, 12288)):
                    for pat in ("ag_gemm", "gemm_rs", "gemm_ar", "moe", "bulk"):
                        if m % r:
                            continue
                        ex = 4 * r if pat == "moe" else 0
                        out.append((OverlapProblem(pat, m, n, k, "bf16", r, experts=ex), gpu))
    return out


def run(n: int) -> dict[str, np.ndarray]:
    """Every checked value by name."""
    vals: dict[str, np.ndarray] = {}
    for label, df, gpus in sweep_tables(n):
        for mode in MODES:
            bench_scale.clear_caches()
            out = project_many(df, gpus, "efficiency", policy=EngineOverlap(mode))
            vals[f"sweep/{label}/{mode}/exposed"] = out["exposed"].to_numpy()
            vals[f"sweep/{label}/{mode}/step_time"] = out["step_time"].to_numpy()
    grid = pair_grid()
    for mode in MODES:
        bench_scale.clear_caches()
        prices = [price_pair(prob, get_gpu(g), mode) for prob, g in grid]
        vals[f"pairs/{mode}/saved"] = np.array([np.nan if p is None else p.saved for p in prices])
        vals[f"pairs/{mode}/schedule"] = np.array(["" if p is None else p.schedule for p in prices])
    return vals


def main() -> None:
    """Save or compare the checked values."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", type=int, default=3000, help="scenarios per sweep table")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save")
    g.add_argument("--compare")
    args = ap.parse_args()
    t0 = time.process_time()
    vals = run(args.scenarios)
    print(f"priced {sum(v.size for v in vals.values()):,} values in {time.process_time() - t0:.1f} CPU s")
    if args.save:
        np.savez(args.save, **vals)
        print(f"saved {len(vals)} arrays to {args.save}")
        return
    ref = np.load(args.compare)
    bad = 0
    for name in sorted(set(ref.files) | set(vals)):
        if name not in ref.files or name not in vals:
            print(f"{name}: only in {'the reference' if name in ref.files else 'this run'}")
            bad += 1
            continue
        a, b = ref[name], vals[name]
        if a.dtype.kind == "f":
            same = a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))
        else:
            same = a.shape == b.shape and bool(np.all(a == b))
        if not same:
            diff = int(np.sum(a != b)) if a.shape == b.shape else -1
            print(f"{name}: {diff} of {a.size} values differ")
            bad += 1
    print(f"{len(vals)} arrays compared bit for bit: {'all identical' if not bad else f'{bad} differ'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
