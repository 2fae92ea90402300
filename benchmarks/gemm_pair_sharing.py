"""Held-out check of the engine's sharing model on device call 29's gemm_pair rows (two GEMMs, or a GEMM and an
elementwise add or device-to-device copy, run back to back on one stream and concurrently on two, H200, CUDA graphs;
benchmarks/ops_h200/h200-sxm-ops-gemm_pair.json). No parameter is fitted to these rows.

Per row: measured concurrent / back-to-back time against the engine's: each kernel alone priced as the overlap
engine prices it (a GEMM by the GEMM curve, the add and the copy as memory-bound kernels / a copy-engine copy),
both simulated on two streams, over the sum of their alone times. The ratio cancels most of the error of the alone
prices, so it scores the sharing of SMs and HBM (run: python benchmarks/gemm_pair_sharing.py)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

DATA = Path(__file__).resolve().parent / "ops_h200" / "h200-sxm-ops-gemm_pair.json"


def rows(path: Path = DATA) -> list[dict]:
    """The measured rows as dicts of the file's columns."""
    doc = json.loads(path.read_text())
    return [dict(zip(doc["columns"], r)) for r in doc["rows"]]


def predicted_ratio(r: dict, gpu_name: str = "H200-SXM", power: str = "sustained") -> float:
    """The engine's concurrent / back-to-back time for one row."""
    from c3kit.hw.catalog import get_gpu
    from c3kit.overlap.costs import CostCache
    from c3kit.overlap.evaluate import default_params
    from c3kit.overlap.problem import OverlapProblem
    from c3kit.overlap.schedules import Ctx
    from c3kit.sim.engine import Stream, Task, alone_time, makespan

    gpu = get_gpu(gpu_name)
    p = default_params(gpu.name)
    cache = CostCache.shared(gpu, p.tile_m, p.tile_n, p.gemm_hbm_traffic, power=power)

    def gemm(name, stream, m, n, k):
        ctx = Ctx(OverlapProblem("ag_gemm", m, n, k, "bf16", 2), gpu, p, cache)
        return ctx.gemm(name, stream, m)

    a = gemm("a", "s0", r["a_m"], r["a_n"], r["a_k"])
    if r["kind"] == "gemm+gemm":
        b = gemm("b", "s1", r["b_m"], r["b_n"], r["b_k"])
    else:
        nbytes = float(r["b_bytes"])  # read + write
        t = cache.mem(nbytes)
        if r["kind"] == "gemm+add":
            b = Task("b", "s1", t, kind="compute", category="comm", hbm=nbytes / t, phi=0.0)
        else:  # Tensor.copy_ between two buffers of one GPU: cudaMemcpyAsync, a copy engine
            ctx = Ctx(OverlapProblem("ag_gemm", 8, 8, 8, "bf16", 2), gpu, p, cache)
            b = ctx.comm("b", "s1", nbytes / 2.0, 1, "dma")._replace(links=0, bw=float("inf"))
    res = Ctx(OverlapProblem("ag_gemm", 8, 8, 8, "bf16", 2), gpu, p, cache).res
    both = makespan([a, b], res, [Stream("s0"), Stream("s1")], p)
    return both / (alone_time(a, res) + alone_time(b, res))


def main() -> None:
    """Print every row and the median and worst |predicted / measured - 1| of the ratio per kind."""
    errs: dict[str, list[float]] = {}
    print(f"{'kind':10s} {'a (m n k)':>18s} {'b':>18s} {'measured':>9s} {'engine':>7s} {'error':>7s}")
    for r in rows():
        meas = r["concurrent_s"] / r["serial_s"]
        pred = predicted_ratio(r)
        e = pred / meas - 1.0
        errs.setdefault(r["kind"], []).append(abs(e))
        b = f"{r['b_m']} {r['b_n']} {r['b_k']}" if r["kind"] == "gemm+gemm" else f"{r['b_bytes'] / 2**20:.0f} MiB"
        print(f"{r['kind']:10s} {r['a_m']:>6d} {r['a_n']:>5d} {r['a_k']:>5d} {b:>18s} {meas:9.3f} {pred:7.3f} {100 * e:+6.1f}%")
    for kind, es in errs.items():
        print(f"{kind}: {len(es)} rows, median |error| {100 * statistics.median(es):.1f}%, worst {100 * max(es):.1f}%")


if __name__ == "__main__":
    main()
