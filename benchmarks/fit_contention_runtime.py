"""Fit the simulator's contention parameters to a measured `c3kit bench c3` table and write the
contention calibration file (src/c3kit/cost/data/calib/<gpu>-contention.json).

Each measured case (one GEMM beside one copy on one GPU) becomes two sim tasks: the GEMM (its time
alone on the whole GPU, its HBM traffic, the measured speeds in green contexts of fewer SMs as its
SM curve) and the copy (its bytes at its measured solo bandwidth; an SM kernel holds `blocks` SMs, a
copy-engine transfer one engine; HBM bytes per byte: 2 on the GPU, 1 to or from the host). The fit
moves noprio_comm_sm_share, gemm_interference, gemm_mem_interference, comm_interference and
hbm_efficiency by coordinate search on the median |log(predicted / measured)| of the concurrent time
and of each op's end time. Printed: the errors with the default and with the fitted parameters, per
variant family.

Usage: PYTHONPATH=src python benchmarks/fit_contention_runtime.py [--c3 file] [--out file] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

PARAMS = {  # name: candidate values searched (coordinate descent over these grids)
    "noprio_comm_sm_share": [0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0],
    "gemm_interference": [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6],
    "gemm_mem_interference": [0.0, 0.2, 0.4, 0.8, 1.2, 1.6, 2.4, 3.2],
    "comm_interference": [0.0, 0.1, 0.3, 1.0, 2.0, 4.0, 8.0],
    "hbm_efficiency": [0.6, 0.7, 0.8, 0.9, 1.0],
}


def cases(doc: dict) -> tuple[list[dict], dict]:
    """Measured concurrent cases and the GEMMs' SM curves ((sms, speed), ...) from the gemm-alone rows."""
    cols = doc["columns"]
    rows = [dict(zip(cols, r)) for r in doc["rows"]]
    curves: dict[str, list] = {}
    for r in rows:
        if r["variant"].startswith("gemm-alone"):
            curves.setdefault(r["gemm"], []).append((int(r["gemm_sms"]), 1.0 / (1.0 + float(r["comp_loss"]))))
    full = max((int(r["gemm_sms"]) for r in rows if not r["variant"].startswith("gemm-alone")), default=132)
    curve = {g: tuple(sorted([(full, 1.0), *v], reverse=True)) for g, v in curves.items()}
    meas = [r for r in rows if not r["variant"].startswith("gemm-alone") and r["t_concurrent_s"]]
    return meas, curve


def simulate_case(r: dict, curve: tuple, params, gpu):
    """(t_concurrent, gemm end, copy end) predicted by the simulator for one measured case."""
    from c3kit.sim.engine import Resources, Stream, Task, simulate

    res = Resources(sms=gpu.sms, hbm_bw=gpu.hbm_bw * params.hbm_efficiency, dma_engines=max(1, gpu.dma.engines),
                    link_bw=1e15, links=1)  # a local copy: no scale-up link in the way
    m, n, k, reps = int(r["m"]), int(r["n"]), int(r["k"]), int(r["gemm_reps"])
    t_comp = float(r["t_comp_s"])
    gemm_bytes = 2.0 * (m * k + k * n + m * n) * reps
    sms = int(r["gemm_sms"]) if int(r["gemm_sms"]) < gpu.sms else 0
    g = Task("gemm", "gemm", t_comp, "compute", sms=sms, hbm=gemm_bytes / t_comp, phi=1.0, curve=curve)
    nbytes, t_comm = float(r["comm_bytes"]), float(r["t_comm_s"])
    comm = r["comm"]
    if comm == "sm-copy":
        c = Task("copy", "copy", nbytes, "comm", sms=float(r["blocks"]), bw=nbytes / t_comm, hbm=2.0)
    else:
        c = Task("copy", "copy", nbytes, "comm", engines=1, bw=nbytes / t_comm, hbm=2.0 if comm == "ce-d2d" else 1.0)
    streams = (Stream("gemm", 0), Stream("copy", 1 if int(r["priority"]) < 0 else 0))
    tl = simulate([g, c], res, streams, params)
    return tl.makespan, tl.get("gemm").end, tl.get("copy").end


def errors(meas: list[dict], curve: dict, params, gpu) -> np.ndarray:
    """|log(pred / meas)| for the concurrent time, the GEMM's end and the copy's end of every case (n x 3)."""
    out = []
    for r in meas:
        p = simulate_case(r, curve.get(r["gemm"], ()), params, gpu)
        want = (float(r["t_concurrent_s"]), float(r["t_comp_conc_s"]), float(r["t_comm_conc_s"]))
        out.append([abs(math.log(a / b)) for a, b in zip(p, want)])
    return np.asarray(out)


def objective(meas, curve, params, gpu) -> float:
    e = errors(meas, curve, params, gpu)
    return float(np.median(e[:, 0]) + 0.5 * np.median(e[:, 1:]))


def fit(meas, curve, gpu, sweeps: int = 2):
    """Coordinate search over PARAMS; returns (params, objective)."""
    from c3kit.sim.params import ContentionParams

    best = ContentionParams()
    best_f = objective(meas, curve, best, gpu)
    for _ in range(sweeps):
        for name, grid in PARAMS.items():
            for v in grid:
                cand = best.with_(**{name: v})
                f = objective(meas, curve, cand, gpu)
                if f < best_f - 1e-9:
                    best, best_f = cand, f
    return best, best_f


def family(variant: str, comm: str) -> str:
    """Variant family as `c3kit bench c3` reports it (copy-engine split into PCIe and same-GPU D2D)."""
    if "gemm" in variant:
        return "dma+fewer-sms" if variant.startswith("ce") else "sm-partitioned"
    if variant.startswith("ce"):
        return "dma-d2d" if comm == "ce-d2d" else "dma-pcie"
    return "prioritized" if "prio" in variant else "plain"


def main(argv: list[str] | None = None) -> int:
    from c3kit.cost.calib_store import calibration_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--c3", default=str(calibration_path("H200-SXM", "c3")))
    ap.add_argument("--gpu", default="H200-SXM")
    ap.add_argument("--out", default=str(calibration_path("H200-SXM", "contention")))
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args(argv)
    from c3kit.hw.catalog import get_gpu
    from c3kit.sim.params import ContentionParams

    gpu = get_gpu(a.gpu)
    doc = json.loads(Path(a.c3).read_text())
    meas, curve = cases(doc)
    default = ContentionParams()
    fitted, f = fit(meas, curve, gpu)
    e0, e1 = errors(meas, curve, default, gpu), errors(meas, curve, fitted, gpu)
    rel = lambda e: np.exp(e) - 1.0  # noqa: E731 - |log ratio| back to a relative error
    print(f"# {a.c3}: {len(meas)} measured cases ({doc['meta'].get('date')}, {doc['meta'].get('gpu')})")
    print("# error = |pred / meas - 1| (from |log ratio|) of the concurrent time; median (p90)")
    print(f"#{'family':>16} {'n':>4} {'default':>16} {'fitted':>16}")
    fams = sorted({family(r['variant'], r['comm']) for r in meas})
    for fam in [*fams, "all"]:
        idx = [i for i, r in enumerate(meas) if fam == "all" or family(r["variant"], r["comm"]) == fam]
        d0, d1 = rel(e0[idx, 0]), rel(e1[idx, 0])
        print(f" {fam:>16} {len(idx):>4} {np.median(d0):>8.1%} ({np.percentile(d0, 90):>5.1%}) "
              f"{np.median(d1):>8.1%} ({np.percentile(d1, 90):>5.1%})")
    # two-fold check: fit on the cases of every other copy size, predict the others
    held = []
    for fold in (0, 1):
        tr = [r for i, r in enumerate(meas) if i % 2 == fold]
        te = [r for i, r in enumerate(meas) if i % 2 != fold]
        p_fold, _ = fit(tr, curve, gpu)
        held.extend(rel(errors(te, curve, p_fold, gpu)[:, 0]))
    print(f"# two-fold held-out (fit on half the cases, predict the other half): median {np.median(held):.1%}, "
          f"p90 {np.percentile(held, 90):.1%}")
    names = list(PARAMS)
    print("# fitted: " + ", ".join(f"{k}={getattr(fitted, k)}" for k in names)
          + "; defaults: " + ", ".join(f"{k}={getattr(default, k)}" for k in names))
    if not a.no_write:
        from c3kit.cost.table import write_calibration

        meta = {k: doc["meta"].get(k) for k in ("machine", "gpu", "driver", "torch", "cuda", "date")}
        meta["command"] = "PYTHONPATH=src python benchmarks/fit_contention_runtime.py"
        meta["script"] = "benchmarks/fit_contention_runtime.py"
        meta["source"] = f"fitted to {Path(a.c3).name} (measured {doc['meta'].get('date')}: {doc['meta'].get('command')})"
        meta["fit"] = json.dumps({"median_rel_error_concurrent_default": float(np.median(rel(e0[:, 0]))),
                                  "median_rel_error_concurrent_fitted": float(np.median(rel(e1[:, 0]))),
                                  "median_rel_error_concurrent_two_fold_held_out": float(np.median(held)),
                                  "cases": len(meas)})
        write_calibration(a.out, "contention", ["parameter", "value"], [[k, getattr(fitted, k)] for k in names], meta)
        print(f"# wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
