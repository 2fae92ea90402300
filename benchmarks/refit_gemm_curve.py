"""Refit the GEMM efficiency curve to every shipped gemm calibration table and store the fits.

Run after a new `c3kit bench gemm` table is copied into src/c3kit/cost/data/calib/:
    PYTHONPATH=src python benchmarks/refit_gemm_curve.py
Prints, per table, the fit's median error on the table's own rows and where the fit was written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from c3kit.cost.calib_store import calib_dir
from c3kit.cost.efficiency import fit_efficiency, relative_errors
from c3kit.cost.fit_cache import save_fit
from c3kit.cost.table import GemmTable, read_calibration
from c3kit.errors import C3kitError
from c3kit.hw.catalog import get_gpu

CALIB = calib_dir()


def main() -> None:
    """Fit and store every <gpu>-gemm.json in the shipped calibration folder."""
    for path in sorted(CALIB.glob("*-gemm.json")):
        gpu_stem = path.name.removesuffix("-gemm.json")
        try:
            gpu = get_gpu(gpu_stem)
        except C3kitError:
            print(f"{path.name}: no catalog GPU named {gpu_stem!r}, skipped")
            continue
        table = GemmTable.from_doc(read_calibration(path), str(path))
        curve = fit_efficiency(table, gpu).curve
        err = np.median(np.abs(relative_errors(curve, table, gpu)))
        out = save_fit(path, curve, gpu.name)
        print(f"{path.name}: {len(table.arrays()[0])} rows, median |error| on its own rows {err:.2%} -> {out.name}")


if __name__ == "__main__":
    main()
