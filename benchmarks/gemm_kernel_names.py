"""Which kernels cuBLAS runs for each GEMM of the shipped H200 tables (profiler, one call per shape).

Data for the per-shape error of the GEMM model on arbitrary multiples of 8 (docs/measurements.md):
for every row of h200-sxm-gemm.json, -holdout.json and -workload.json, one torch.mm is run between
two spin-kernel markers inside a CUDA profiler session; the kernels between markers are that
GEMM's. Written as JSON rows (m, n, k, dtype, set, kernel names).

Usage (device): PYTHONPATH=src python benchmarks/gemm_kernel_names.py --out $OUT/gemm-kernels.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from c3kit.cost.calib_store import calib_dir  # noqa: E402

CALIB = calib_dir()
FILES = ("h200-sxm-gemm.json", "h200-sxm-gemm-holdout.json", "h200-sxm-gemm-workload.json")
BATCH = 1500


def shapes() -> list[tuple[int, int, int, str, str]]:
    """(m, n, k, dtype, set) of every row of the shipped tables."""
    out = []
    for f in FILES:
        doc = json.loads((CALIB / f).read_text())
        c = doc["columns"]
        for r in doc["rows"]:
            out.append((int(r[0]), int(r[1]), int(r[2]), str(r[3]), str(r[c.index("set")])))
    return out


def kernels_of(trace: dict) -> list[str]:
    """Kernel names of a chrome trace in start order."""
    ev = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
    ev.sort(key=lambda e: e["ts"])
    return [e["name"] for e in ev]


def is_marker(name: str) -> bool:
    """True for the spin kernel torch.cuda._sleep launches (the separator between GEMMs)."""
    return "sleep" in name.lower() or "spin" in name.lower()


def group_by_markers(names: list[str]) -> list[list[str]]:
    """The kernels between consecutive markers (what one GEMM launched), in order."""
    groups: list[list[str]] = []
    cur: list[str] | None = None
    for nm in names:
        if is_marker(nm):
            if cur is not None:
                groups.append(cur)
            cur = []
        elif cur is not None:
            cur.append(nm)
    return groups


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int, default=0, help="first N shapes only (checks)")
    a = ap.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from c3kit.runtime.bench.gemm import Pools, Shape
    from c3kit.runtime.calib import machine_meta

    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    sh = shapes()[: a.limit or None]
    rows = []
    for lo in range(0, len(sh), BATCH):
        part = [Shape(m, n, k, d, s) for m, n, k, d, s in sh[lo: lo + BATCH]]
        pools = Pools(part, dev)
        views = [pools.views(s.m, s.n, s.k, s.dtype) for s in part]
        for (aa, bb, cc) in views[:3]:
            torch.mm(aa[0], bb[0], out=cc)  # handles and workspaces before the trace
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for aa, bb, cc in views:
                torch.cuda._sleep(100)
                torch.mm(aa[0], bb[0], out=cc)
            torch.cuda._sleep(100)
            torch.cuda.synchronize()
        fd, tmp = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        prof.export_chrome_trace(tmp)
        names = kernels_of(json.loads(Path(tmp).read_text()))
        os.unlink(tmp)
        groups = group_by_markers(names)
        if len(groups) != len(part):
            print(f"# batch at {lo}: {len(groups)} marker groups for {len(part)} shapes; markers seen: "
                  f"{sorted({n for n in names if is_marker(n)})[:3]}", flush=True)
        for s, g in zip(part, groups):
            rows.append([s.m, s.n, s.k, s.dtype, s.set, g])
        print(f"# {lo + len(part)} / {len(sh)} shapes", flush=True)
        del pools, views
        torch.cuda.empty_cache()
    doc = {"meta": {**machine_meta(script="benchmarks/gemm_kernel_names.py")},
           "columns": ["m", "n", "k", "dtype", "set", "kernels"], "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc) + "\n")
    from collections import Counter

    top = Counter(g[0] if g else "" for *_, g in rows).most_common(12)
    for nm, c in top:
        print(f"{c:>6}  {nm[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
