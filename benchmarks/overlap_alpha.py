"""Derive SlowdownOverlap's alpha for independent compute / comm pairs from the H200 op-level measurements.

SlowdownOverlap prices an independent pair as max(c, m) + alpha * min(c, m): it realizes 1 - alpha of the ideal
overlap speedup (serial c + m down to max(c, m)). So each measured pair gives alpha = (t_together - max) / min, and
a family of pairs 1 - its mean fraction of the ideal speedup.

Reads (no device time):
- src/c3kit/cost/data/calib/h200-sxm-c3.json (`c3kit bench c3`, run 2): a same-priority SM copy kernel (8, 32, 132
  blocks: the stand-in for an NCCL collective's SM kernels) beside a cuBLAS GEMM; also the prioritized copy.
- benchmarks/ops_h200/h200-sxm-ops-gemm_pair.json (call 29): two GEMMs, and a GEMM beside an add or a copy, on two
  streams against each alone.
The library's value is step.policy.measured_contention_alpha (the plain SM copy rows, clipped to [0, 1]).
An SM copy kernel stands in for NCCL: not yet measured with NCCL on several GPUs.

    PYTHONPATH=src python3 benchmarks/overlap_alpha.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
C3 = ROOT / "src/c3kit/cost/data/calib/h200-sxm-c3.json"
PAIRS = ROOT / "benchmarks/ops_h200/h200-sxm-ops-gemm_pair.json"


def rows(path: Path) -> list[dict]:
    """The rows of a measurement file as dicts."""
    doc = json.loads(path.read_text())
    return [dict(zip(doc["columns"], r)) for r in doc["rows"]]


def pair_alpha(a: float, b: float, together: float) -> float:
    """alpha of one measured pair: (time together - max) / min of the two times alone."""
    return (together - max(a, b)) / min(a, b)


def c3_table() -> list[tuple[str, int, float, float]]:
    """(variant, cases, mean fraction of ideal, alpha = 1 - it) per C3 variant."""
    by: dict[str, list[float]] = {}
    for r in rows(C3):
        if r["fraction_of_ideal"] is not None:
            by.setdefault(r["variant"], []).append(float(r["fraction_of_ideal"]))
    return [(v, len(f), float(np.mean(f)), 1.0 - float(np.mean(f))) for v, f in by.items()]


def pair_table() -> list[tuple[str, int, float, float, float]]:
    """(kind, pairs, median alpha, min two-stream / back-to-back, max of it) per gemm_pair kind."""
    by: dict[str, list[tuple[float, float]]] = {}
    for r in rows(PAIRS):
        by.setdefault(r["kind"], []).append((pair_alpha(r["a_s"], r["b_s"], r["concurrent_s"]),
                                             r["concurrent_s"] / r["serial_s"]))
    return [(k, len(v), float(np.median([x[0] for x in v])), min(x[1] for x in v), max(x[1] for x in v))
            for k, v in by.items()]


def main() -> None:
    """Print the derivation and the library's alpha."""
    from c3kit.step.policy import CONTENTION_VARIANTS, measured_contention_alpha

    print(f"{C3.relative_to(ROOT)}: fraction of the ideal overlap speedup per variant (alpha = 1 - it)")
    plain = []
    for v, n, f, a in c3_table():
        mark = " <- stand-in for NCCL beside compute" if v in CONTENTION_VARIANTS else ""
        print(f"  {v:24s} {n:3d} cases  fraction {f:+.3f}  alpha {a:.3f}{mark}")
        if v in CONTENTION_VARIANTS:
            plain.append(f)
    print(f"{PAIRS.relative_to(ROOT)}: two streams against each kernel alone")
    for k, n, a, lo, hi in pair_table():
        print(f"  {k:24s} {n:3d} pairs  median alpha {a:.3f}  two streams / back to back {lo:.2f}-{hi:.2f}")
    raw = 1.0 - float(np.mean(plain))
    print(f"alpha = 1 - mean fraction of {', '.join(CONTENTION_VARIANTS)} = {raw:.3f}, clipped to [0, 1]: "
          f"{min(max(raw, 0.0), 1.0):.3f}")
    print(f"step.policy.measured_contention_alpha() = {measured_contention_alpha():.3f}")


if __name__ == "__main__":
    main()
