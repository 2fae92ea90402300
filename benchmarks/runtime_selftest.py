"""Correctness of the runtime ops on several ranks: every op x schedule x dtype against fp64 references.

Usage: PYTHONPATH=src python benchmarks/runtime_selftest.py --world 8 --backend nccl --comms nccl,copy-engine
       PYTHONPATH=src python benchmarks/runtime_selftest.py --world 2 --backend gloo --comms gloo   (CPU)
Writes one JSON document (per comm: checks, failures, worst errors of rank 0) to --out; exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    ap.add_argument("--comms", default="gloo")
    ap.add_argument("--cases", type=int, default=2)
    ap.add_argument("--max-dim", type=int, default=256)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--out", default="runtime-selftest.json")
    a = ap.parse_args(argv)
    from c3kit.runtime import selftest
    from c3kit.runtime.launch import run_local

    device = "cuda" if a.backend == "nccl" else "cpu"
    report, ok = {}, True
    for comm in [c for c in a.comms.split(",") if c]:
        res = run_local(selftest.check_ops, a.world, a.backend, timeout_s=a.timeout_s,
                        args=(device, comm, a.cases, 7, ("fp32", "bf16", "fp16"), ("serial", "ring", "ficco", "auto"),
                              a.max_dim))
        bad = [r for r in res if not r["ok"]]
        if bad:
            report[comm] = {"error": f"{bad[0]['type']}: {bad[0]['error']}", "trace": bad[0].get("trace", "")[-2000:]}
            ok = False
            continue
        v = [r["value"] for r in res]
        fails = [f for x in v for f in x["failures"]]
        ok &= not fails
        report[comm] = {"world": a.world, "checks_per_rank": v[0]["checks"], "failures": fails[:20],
                        "worst": max((e for x in v for e in x["worst"].values()), default=0.0)}
        print(f"{comm}: {a.world} ranks, {v[0]['checks']} checks per rank, {len(fails)} failures, "
              f"worst rel. error {report[comm]['worst']:.2e}")
    with open(a.out, "w") as f:
        json.dump(report, f, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
