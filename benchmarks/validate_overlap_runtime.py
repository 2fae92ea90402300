"""Issue 7, step 4: the calibrated simulator against measured `c3kit bench overlap` runs.

For every measured c3kit schedule (serial, ring, ficco x nccl / copy-engine) the overlap engine
simulates the same problem (pattern, M, N, K, GPUs, experts) with the shipped H200 contention
calibration; the matching simulated schedule is serial, ring-sm / ring-dma, ficco-sm / ficco-dma
(an SM-kernel collective for NCCL, DMA for copy-engine). Printed: the median and 90th-percentile
|predicted / measured - 1| (target median <= 10%), and the heuristic's pick (c3kit.overlap.select,
what "auto" runs) against the measured best: share of cases where it is the fastest, and the mean
of its measured time over the best.

Usage: PYTHONPATH=src python benchmarks/validate_overlap_runtime.py --dir OUT [--gpu H200-SXM] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

PATTERN = {"ag": "ag_gemm", "rs": "gemm_rs", "moe": "moe"}


def sim_name(schedule: str, comm: str) -> str:
    """The overlap engine's schedule for a runtime schedule and comm backend."""
    if schedule == "serial":
        return "serial"
    return f"{schedule}-{'dma' if comm == 'copy-engine' else 'sm'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="folder with *-overlap-tp*.json from `c3kit bench overlap`")
    ap.add_argument("--gpu", default="H200-SXM")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from c3kit.overlap import OverlapProblem, evaluate
    from c3kit.runtime.schedules import heuristic_schedule

    files = sorted(Path(a.dir).glob("*-overlap-tp*.json"))
    if not files:
        print(f"error: no *-overlap-tp*.json in {a.dir}", file=sys.stderr)
        return 2
    errs, picks, report = [], [], []
    for f in files:
        doc = json.loads(f.read_text())
        cols = doc["columns"]
        rows = [dict(zip(cols, r)) for r in doc["rows"]]
        cases: dict[tuple, list] = {}
        for r in rows:
            cases.setdefault((r["op"], r["model"], r["tp"]), []).append(r)
        for (op, model, tp), rs in cases.items():
            r0 = rs[0]
            # the overlap engine's m: gathered rows (ag), M (rs), rows this GPU routes (moe) = the bench's m
            prob = OverlapProblem(PATTERN[op], int(r0["m"]), int(r0["n"]), int(r0["k"]), gpus=int(tp),
                                  experts=int(r0["experts"] or 0))
            measured = {(r["schedule"], r["comm"]): r["time_s"] for r in rs if r["impl"] == "c3kit"
                        and r["schedule"] != "auto"}
            for (sched, comm), t in measured.items():
                try:
                    pred = evaluate(prob, a.gpu, schedules=[sim_name(sched, comm)])[0].time
                except Exception as e:  # noqa: BLE001 - a schedule the simulator cannot build is reported
                    report.append({"case": [op, model, tp, sched, comm], "error": str(e)})
                    continue
                errs.append(abs(pred / t - 1.0))
                report.append({"case": [op, model, tp, sched, comm], "measured_s": t, "predicted_s": pred})
            if measured:
                best = min(measured.values())
                for comm in sorted({c for _, c in measured}):
                    # as the runtime's "auto" asks it (MoE: the rows of all ranks)
                    op_name = {"ag": "all_gather_matmul", "rs": "matmul_reduce_scatter", "moe": "moe"}[op]
                    m_all = int(r0["m"]) * (int(tp) if op == "moe" else 1)
                    pick = heuristic_schedule(op_name, m_all, int(r0["n"]), int(r0["k"]), int(tp), 2, a.gpu,
                                              int(r0["experts"] or 0)) or "serial"
                    t_pick = measured.get((pick, comm))
                    if t_pick is not None:
                        picks.append(t_pick / best)
    out = {"schedules": len(errs), "median_error": float(np.median(errs)) if errs else None,
           "p90_error": float(np.percentile(errs, 90)) if errs else None,
           "heuristic_share_optimal": float(np.mean([p <= 1.0 + 1e-9 for p in picks])) if picks else None,
           "heuristic_mean_ratio_to_best": float(np.mean(picks)) if picks else None, "cases": report}
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"# {len(files)} overlap files, {len(errs)} measured schedules simulated with the shipped calibration")
        if errs:
            print(f"# simulator |pred/meas - 1|: median {out['median_error']:.1%} (target <= 10%), "
                  f"p90 {out['p90_error']:.1%}")
        if picks:
            print(f"# heuristic pick: optimal in {out['heuristic_share_optimal']:.0%} of cases, "
                  f"mean time / best {out['heuristic_mean_ratio_to_best']:.3f}")
        for c in report:
            if "error" in c:
                print(f"# not simulated {c['case']}: {c['error'][:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
