"""Host-side cost of launching GPU work from eager Python: one measured figure per GPU's host.

The figure is the ops-floor calibration's eager slope (runtime/bench/ops.py floor family, fitted by
cost.opclass.fit_floor): the marginal wall time of one one-element add launched from Python, which
the host, not the GPU, sets. It is the host CPU's cost as much as the GPU's, so a GPU without its own
floor calibration takes the H200 machine's figure (its floor basis, cost/basis.py, else H200-SXM).
"""

from __future__ import annotations

import math

from c3kit.errors import C3kitError


def eager_launch_s(hw) -> float:
    """Seconds the host takes to launch one eager kernel: the ops-floor calibration of hw's floor basis, else the
    H200 host's measured figure (cost/basis.py); C3kitError when no calibration is shipped."""
    from c3kit.cost.basis import source_gpu
    from c3kit.cost.opclass import op_calibration

    for name in (source_gpu(hw.name, "floor"), "H200-SXM"):
        cal = op_calibration(name) if name else None
        if cal is not None and math.isfinite(cal.floor_eager_s) and cal.floor_eager_s > 0:
            return float(cal.floor_eager_s)
    raise C3kitError("no measured eager kernel launch (ops-floor calibration) is shipped")
