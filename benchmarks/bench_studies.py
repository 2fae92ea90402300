"""Time every communication study on its default scenario set (target: each under 60 s on one core).

Run: .venv/bin/python benchmarks/bench_studies.py   (add --quick for the small sets the tests use)
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
TARGET_S = 60.0


def main(argv: list[str] | None = None) -> int:
    """Run each study once (including its first import), print its wall time and size; exit 1 past the target."""
    quick = "--quick" in (argv if argv is not None else sys.argv[1:])
    t_import = time.perf_counter()
    from c3kit.studies.all_studies import STUDIES, study_function

    fns = {name: study_function(name) for name in STUDIES}
    t_import = time.perf_counter() - t_import
    sys.stdout.write(f"imports: {t_import:.2f} s\n")
    worst = 0.0
    for name, fn in fns.items():
        t0 = time.perf_counter()
        res = fn(quick=quick)
        dt = time.perf_counter() - t0
        worst = max(worst, dt)
        rows = sum(len(df) for df in res.tables.values())
        sys.stdout.write(f"study {name:6s} {dt:7.2f} s  ({rows} table rows, {len(res.figures)} figures; "
                         f"target < {TARGET_S:.0f} s)\n")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
