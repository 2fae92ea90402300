"""Scenarios per second of the vectorized training-step projection (c3kit.step.fast) on one core.

Run: .venv/bin/python benchmarks/bench_scale.py [--cost-model efficiency]
Prints scenarios/s for 1k, 10k and 100k random dense training scenarios with the `simple` overlap
policy and the ratio of per-scenario cost between the largest and smallest run (1.0 = perfectly
linear; < 1 means larger runs are cheaper per scenario because fixed per-structure costs amortize);
then, in the same run, the rate with `contended` (the default mode of analyze and scale) and with `auto`
(collective-GEMM pairs priced by the overlap engine, one price per distinct pair shape on the power-of-two
grid, every other pair by contended's rule) beside it, cold (every cache of c3kit emptied at the
start of the timed run: lru_caches, the engine's cost caches with everything they share between pair shapes
(sub-GEMM and transfer task fields with their alone times and numbers, schedules' walk graphs, serial engines,
collective baselines, the selector's per-task and pair-cost memos), its price memo, the collective tables, the
sweep's templates) and warm, with the ratios to `simple`.
Rates are given by wall clock and per CPU second of this process (time.process_time): on a machine whose cores
other processes share, the CPU-time rate is the one-core figure and the wall-clock rate is lower.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from c3kit.hw import get_gpu  # noqa: E402
from c3kit.hw.future import project as project_gpu  # noqa: E402
from c3kit.step import fast  # noqa: E402
from c3kit.step.fast import project_many  # noqa: E402
from c3kit.step.policy import EngineOverlap, contended_policy, price_pair  # noqa: E402


def scenarios(n: int, seed: int = 0) -> tuple[pd.DataFrame, dict]:
    """n random memory-agnostic scenarios: future models x hardware generations x parallelism."""
    rng = np.random.default_rng(seed)
    base = get_gpu("H200-SXM")
    gpus = {f"g{g}-{r}": project_gpu(base, r, g) for g in range(5) for r in ("historical", "compute-heavy", "balanced")}
    heads = rng.choice([32, 64, 96, 128, 160, 192, 256], n)
    hidden = heads * 128
    pp = rng.choice([1, 2, 4, 8, 16], n)
    layers = pp * rng.choice([4, 6, 8], n)
    tp = rng.choice([1, 2, 4, 8], n)
    dp = rng.choice([1, 8, 32, 128], n)
    mb = rng.choice([1, 2], n)
    df = pd.DataFrame({
        "hidden": hidden, "layers": layers, "heads": heads, "kv_heads": heads, "ffn_hidden": 4 * hidden,
        "vocab": 51200, "gated_mlp": False, "layernorm": True, "tied_embeddings": False,
        "seq": rng.choice([2048, 4096, 8192, 32768], n), "micro_batch": mb,
        "global_batch": mb * dp * rng.choice([1, 4, 16], n), "tp": tp, "sp": rng.random(n) < 0.7, "dp": dp,
        "pp": pp, "fsdp": False, "dist_optimizer": rng.random(n) < 0.5,
        "recompute": rng.choice([0, 1, 2], n), "gpu": rng.choice(list(gpus), n)})
    return df, gpus


def clear_caches() -> int:
    """Empty every cache of c3kit loaded so far (each functools.lru_cache of its modules and the module-level
    memo dicts of the engine and the sweep) so that the next run starts cold; returns how many were cleared."""
    import functools
    import sys

    n = 0
    for name, mod in list(sys.modules.items()):
        if not name.startswith("c3kit") or mod is None:
            continue
        for obj in list(vars(mod).values()):
            if isinstance(obj, functools._lru_cache_wrapper) and getattr(obj, "__module__", "") == name:
                obj.cache_clear()
                n += 1
    from c3kit.cost import collectives
    from c3kit.overlap import costs, heuristic

    # costs._SHARED holds the engine's cost caches and, in each, the memos shared between pair shapes (derived);
    # heuristic._COMPUTE_PAIR the selector's prices of two compute tasks side by side
    for memo in (costs._SHARED, fast._SAVED, fast._TEMPLATES, collectives._TABLES, heuristic._COMPUTE_PAIR):
        memo.clear()
        n += 1
    return n


def main() -> None:
    """Time project_many on 1k, 10k and 100k scenarios."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--cost-model", default="efficiency")
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--no-auto", action="store_true", help="skip the auto-overlap rates")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    df, gpus = scenarios(1000, seed=99)
    project_many(df, gpus, args.cost_model)  # warm caches and imports
    per = {}
    for n in sizes:
        df, gpus = scenarios(n)
        t0 = time.perf_counter()
        out = project_many(df, gpus, args.cost_model)
        dt = time.perf_counter() - t0
        assert np.all(out["step_time"] > 0)
        per[n] = dt / n
        print(f"{n:>7} scenarios  {dt:7.3f} s  {n / dt:10,.0f} scenarios/s")
    lo, hi = min(sizes), max(sizes)
    print(f"per-scenario cost ratio {hi}/{lo}: {per[hi] / per[lo]:.3f} (1.0 = linear)")
    if len(sizes) >= 2:
        n = np.array(sizes, dtype=float)
        t = np.array([per[s] * s for s in sizes])
        b, a = np.polyfit(n, t, 1)
        worst = np.max(np.abs(a + b * n - t) / t)
        print(f"fit t = a + b n: a = {a * 1e3:.1f} ms fixed (one template per graph structure), "
              f"b = {b * 1e6:.2f} us per scenario; worst deviation from the line {100 * worst:.1f}%")
    if args.no_auto:
        return
    n = max(sizes)
    df, gpus = scenarios(n)
    rates = {}
    modes = (("simple", None), ("contended", contended_policy()), ("auto (cold cache)", EngineOverlap("auto")),
             ("auto (warm cache)", EngineOverlap("auto")))
    for label, pol in modes:
        if label.startswith("auto (cold"):
            cleared = clear_caches()
        t0, c0 = time.perf_counter(), time.process_time()
        out = project_many(df, gpus, args.cost_model, policy=pol)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        rates[label] = (n / dt, n / dc, float(out["exposed"].sum()))
    info = price_pair.cache_info()
    for label, (r, rc, e) in rates.items():
        print(f"{n:>7} scenarios  {label:18s} {r:10,.0f} scenarios/s wall, {rc:10,.0f} per CPU second  "
              f"(total exposed comm {e:,.1f} s)")
    print(f"cold: {cleared} caches emptied at the start of its timed run (every lru_cache of c3kit, the engine's "
          "cost caches with the memos they share between pair shapes, its price memo, the sweep's graph templates)")
    cold, warm, simple = rates["auto (cold cache)"], rates["auto (warm cache)"], rates["simple"]
    cont = rates["contended"]
    print(f"contended / simple rate in this run (wall; CPU): {cont[0] / simple[0]:.2f}; {cont[1] / simple[1]:.2f}")
    print(f"distinct pair shapes priced by the engine: {info.currsize}; auto / simple rate in this run (wall; CPU): "
          f"cold {cold[0] / simple[0]:.2f}; {cold[1] / simple[1]:.2f}, warm {warm[0] / simple[0]:.2f}; "
          f"{warm[1] / simple[1]:.2f}")
    print(f"target: auto cold >= 10,000 scenarios/s on one core: {'met' if cold[1] >= 1e4 else 'NOT met'} "
          f"({cold[1]:,.0f} per CPU second; wall-clock rates drop when other processes share the cores)")


if __name__ == "__main__":
    main()
