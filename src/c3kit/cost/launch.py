"""Host-side cost of launching GPU work from eager Python: one measured figure per GPU's host.

The figure is the ops-floor calibration's eager slope (runtime/bench/ops.py floor family, fitted by
cost.opclass.fit_floor): the marginal wall time of one one-element add launched from Python, which
the host, not the GPU, sets. It is the host CPU's cost as much as the GPU's, so a GPU without its own
floor calibration takes the H200 machine's figure (its floor basis, cost/basis.py, else H200-SXM).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache

from c3kit.errors import C3kitError


@lru_cache(maxsize=16)
def floor_fit(gpu_name: str) -> tuple[float, float] | None:
    """(per-kernel s in a CUDA graph, per-kernel s launched eagerly) from the GPU's shipped ops-floor file, or None.

    The same fit (cost.opclass.fit_floor) as op_calibration's floor fields, read from that one file only."""
    from c3kit.cost.opclass import family_rows, fit_floor, ops_file

    p = ops_file(gpu_name, "floor")
    if not p.is_file():
        return None
    return fit_floor(family_rows("floor", json.loads(p.read_text())))


def eager_launch_s(hw) -> float:
    """Seconds the host takes to launch one eager kernel: the ops-floor calibration of hw's floor basis, else the
    H200 host's measured figure (cost/basis.py); C3kitError when no calibration is shipped."""
    from c3kit.cost.basis import source_gpu

    for name in (source_gpu(hw.name, "floor"), "H200-SXM"):
        fit = floor_fit(name) if name else None
        if fit is not None and math.isfinite(fit[1]) and fit[1] > 0:
            return float(fit[1])
    raise C3kitError("no measured eager kernel launch (ops-floor calibration) is shipped")
