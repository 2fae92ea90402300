"""Time a full OPT-family PIMnast sweep: every GEMV of OPT-125M..175B at batch 1, 2, 4, every knob.

Run: .venv/bin/python benchmarks/bench_pim.py   (target: under 10 s on one core)
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main() -> int:
    """Run the sweep, print its wall time, knob settings evaluated and GEMVs placed."""
    from c3kit.pim.gemv import Gemv, knob_grid
    from c3kit.pim.model import get_pim
    from c3kit.pim.pimnast import gemv_table, layer_gemvs, opt_family, token_table

    mem = get_pim("lpddr5x-7500-pim")
    models = opt_family()
    t0 = time.perf_counter()
    gemvs = gemv_table(mem, models, (1, 2, 4), context=1024)
    tokens = token_table(mem, models, (1, 2, 4), context=1024)
    dt = time.perf_counter() - t0
    shapes = {(g.m, g.k, g.batch) for m in models for b in (1, 2, 4) for g, _ in layer_gemvs(m, b, 1024)}
    shapes |= {(m.vocab, m.hidden, b) for m in models for b in (1, 2, 4)}
    knobs = sum(len(knob_grid(mem, Gemv("g", m_, k_, b))["tile_m"]) for m_, k_, b in shapes)
    sys.stdout.write(f"OPT-family GEMV sweep: {len(gemvs)} GEMV rows + {len(tokens)} per-token rows, "
                     f"{len(shapes)} distinct shapes, {knobs} knob settings per full pass: {dt:.2f} s "
                     f"(target < 10 s)\n")
    return 0 if dt < 10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
