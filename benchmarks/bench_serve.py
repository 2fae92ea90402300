"""Speed of the serving simulator: simulated requests per second of wall time at 1,000 / 10,000 / 100,000 requests.

Target (issue 15): 10,000 requests in <= 5 s on one core, cost linear in requests. The workload is
Llama-3-8B on one H200 (step-model pricing, cost model "efficiency"), ShareGPT-like lengths, Poisson
arrivals at RATE requests/s (below saturation, so batches stay realistic). The pricer is warmed once
(its grid of projected step times is built on first use) and that warm-up is printed separately.
Wall time is what the target is about; CPU time of this process is printed beside it because on a
shared machine the wall time also counts the time other processes held the core.
Also prints the pricer's largest interpolation error against exact projections.

    python benchmarks/bench_serve.py [--sizes 1000,10000,100000] [--rate 20]
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    """Print simulated requests/s per workload size, the 10k wall time and the linearity ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--rate", type=float, default=20.0)
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",")]

    from c3kit.cost.model import as_model
    from c3kit.serve.experiment import make_setup
    from c3kit.serve.sim import simulate
    from c3kit.serve.workload import poisson

    t0 = time.perf_counter()
    setup = make_setup("Llama-3-8B", "H200-SXM", cost_model=as_model("efficiency").with_(power="sustained"))
    simulate(poisson(a.rate, 5000, "sharegpt", "sharegpt", seed=99), setup.pricer, setup.sched)  # warm the pricer
    print(f"setup + pricer warm-up: {time.perf_counter() - t0:.2f} s")
    per = {}
    for n in sizes:
        w = poisson(a.rate, n, "sharegpt", "sharegpt", seed=1)
        t, c = time.perf_counter(), time.process_time()
        r = simulate(w, setup.pricer, setup.sched)
        dt, dc = time.perf_counter() - t, time.process_time() - c
        per[n] = n / dt
        print(f"{n:>8,} requests: {dt:7.2f} s wall ({dc:6.2f} s CPU), {len(r.iterations):>9,} iterations, "
              f"simulated requests/s {n / dt:10,.0f} (per CPU second {n / dc:10,.0f})")
    if 10000 in per:
        print(f"10,000 requests in {10000 / per[10000]:.2f} s (target <= 5 s)")
    if len(sizes) > 1:
        s = sorted(sizes)
        for lo, hi in zip(s, s[1:]):
            print(f"linearity: requests/s at {hi:,} / at {lo:,} = {per[hi] / per[lo]:.2f} (1.00 = linear)")
    err = setup.pricer.interpolation_error(range(65, 8192, 127))
    print(f"pricer interpolation error (token-wise part, 65..8192 tokens): max {100 * err:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
