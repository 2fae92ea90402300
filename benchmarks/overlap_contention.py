"""Print the measured compute / comm contention that `--overlap contended` prices independent pairs with.

Reads (no device time) the H200's gemm_under_comm rows (device call 31: a cuBLAS bf16 GEMM while the k-block SM
copy kernel runs on a high-priority stream, launched first and busy for longer than the GEMMs; also a copy-engine
device-to-device copy and a pinned host-to-device copy, each at full rate and at half duty) and prints per stand-in
the copy's rate beside the GEMM over its rate alone and the GEMM's slowdown, then the two medians the library takes
(step.policy.measured_contention: SM copy at 8-32 blocks, no pause). An SM copy kernel stands in for NCCL's kernels:
NCCL beside compute is not yet measured on several GPUs.

    PYTHONPATH=src python3 benchmarks/overlap_contention.py
"""

from __future__ import annotations

import numpy as np

from c3kit.step.policy import CONTENTION_BLOCKS, CONTENTION_GPU, measured_contention


def table(rows: list[dict]) -> list[tuple[str, int, float, int, float, float]]:
    """(stand-in, blocks, duty, cases, median copy rate beside / alone, median GEMM slowdown) per stand-in."""
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["covered"]:
            by.setdefault((r["comm"], r["blocks"], r["duty"]), []).append(r)
    out = []
    for (comm, k, duty), rs in sorted(by.items()):
        rate = float(np.median([r["copy_under_Bps"] / r["copy_alone_Bps"] for r in rs]))
        slow = float(np.median([r["gemm_under_s"] / r["gemm_alone_s"] - 1.0 for r in rs]))
        out.append((comm, k, duty, len(rs), rate, slow))
    return out


def main() -> None:
    """Print the per-stand-in table and the library's values."""
    import json

    from c3kit.cost.calib_store import op_calibration_path

    path = op_calibration_path(CONTENTION_GPU, "gemm_under_comm")
    doc = json.loads(path.read_text())
    rows = [dict(zip(doc["columns"], r)) for r in doc["rows"]]
    print(f"{path.name} ({doc['meta'].get('gpu')}, torch {doc['meta'].get('torch')}, {doc['meta'].get('date')})")
    print(f"{'stand-in':10s} {'blocks':>6s} {'duty':>5s} {'cases':>5s} {'copy beside GEMM / alone':>25s} "
          f"{'GEMM slowdown':>14s}")
    for comm, k, duty, n, rate, slow in table(rows):
        mark = "  <- NCCL stand-in" if comm == "sm_copy" and duty == 1.0 and k in CONTENTION_BLOCKS else ""
        print(f"{comm:10s} {k:6d} {duty:5.1f} {n:5d} {rate:25.3f} {slow:+14.3f}{mark}")
    c = measured_contention()
    print(f"step.policy.measured_contention(): comm_rate {c.comm_rate:.3f}, gemm_slowdown {c.gemm_slowdown:+.3f} "
          f"(medians of {c.rows} rows; a negative slowdown is priced as 0)")


if __name__ == "__main__":
    main()
