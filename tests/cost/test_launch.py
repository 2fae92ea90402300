"""The measured eager launch: the ops-floor calibration's eager slope, one figure for the GPU's host."""

import pytest

from c3kit.cost.launch import eager_launch_s
from c3kit.cost.opclass import fit_floor, op_calibration
from c3kit.hw import get_gpu


def test_eager_launch_is_the_floor_calibrations_eager_slope():
    cal = op_calibration("H200-SXM")
    assert eager_launch_s(get_gpu("H200-SXM")) == cal.floor_eager_s
    # the slope over 1/10/100 eagerly launched one-element adds (docs/measurements.md: 7.11 us) ...
    assert cal.floor_eager_s == pytest.approx(7.11e-6, abs=0.01e-6)
    # ... against 1.01 us per kernel inside a CUDA graph
    assert cal.floor_graph_s == pytest.approx(1.01e-6, abs=0.01e-6)


def test_fit_floor_takes_the_slope_not_the_batch_launch():
    rows = [{"case": "tiny_add", "mode": m, "kernels": k, "time_s": c + s * k}
            for m, c, s in (("eager", 40e-6, 7e-6), ("graph", 9e-6, 1e-6)) for k in (1, 10, 100)]
    g, e = fit_floor(rows)
    assert g == pytest.approx(1e-6) and e == pytest.approx(7e-6)


def test_a_gpu_without_its_own_floor_takes_the_h200_hosts_figure():
    assert eager_launch_s(get_gpu("H100-SXM")) == eager_launch_s(get_gpu("H200-SXM"))
