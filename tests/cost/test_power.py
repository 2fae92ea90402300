"""Sustained-clock factor (cost/power.py): exact fits on constructed rows, invariants, the shipped H200 fit."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.cost import CostModel, explain, time
from c3kit.cost.power import NO_THROTTLE, SustainedClock, constant_clock, fit_sustained, published_sustained, \
    steady_rows, sustained_for
from c3kit.errors import CostError
from c3kit.hw.catalog import get_gpu
from c3kit.workload.ops import Gemm


def test_factor_hand_checked():
    c = SustainedClock(scale=0.98, knee=0.4, exponent=0.5)
    assert c.factor(0.1) == pytest.approx(0.98)  # under the knee: scale only
    assert c.factor(0.4) == pytest.approx(0.98)
    assert c.factor(1.6) == pytest.approx(0.98 * 2.0)  # (1.6 / 0.4) ** 0.5 = 2
    assert np.allclose(c.factors([0.1, 1.6]), [0.98, 1.96])
    assert NO_THROTTLE.factor(0.9) == 1.0


def test_fit_recovers_constructed_parameters_exactly():
    rng = np.random.default_rng(1)
    eff = rng.uniform(0.02, 0.9, 60)
    burst = rng.uniform(1e-6, 1e-3, 60)
    true = SustainedClock(scale=0.97, knee=0.40, exponent=0.30)
    fit = fit_sustained(burst, burst * true.factors(eff), eff)
    assert fit.scale == pytest.approx(0.97, rel=1e-9)
    assert fit.knee == pytest.approx(0.40, abs=1e-9)
    assert fit.exponent == pytest.approx(0.30, abs=1e-9)
    assert fit.rows == 60


def test_fit_is_robust_to_a_few_outliers():
    eff = np.linspace(0.05, 0.9, 40)
    burst = np.full(40, 1e-4)
    true = SustainedClock(scale=1.0, knee=0.5, exponent=0.4)
    steady = burst * true.factors(eff)
    steady[[3, 17, 30]] *= 1.6  # three wild rows
    fit = fit_sustained(burst, steady, eff)
    assert fit.knee == pytest.approx(0.5, abs=0.02) and fit.exponent == pytest.approx(0.4, abs=0.03)


def test_fit_rejects_too_few_or_ragged_rows():
    with pytest.raises(CostError, match="at least 8"):
        fit_sustained([1e-4] * 5, [1e-4] * 5, [0.5] * 5)
    with pytest.raises(CostError, match="differ in length"):
        fit_sustained([1e-4] * 9, [1e-4] * 8, [0.5] * 9)


@settings(max_examples=60, deadline=None)
@given(scale=st.floats(0.5, 1.5), knee=st.floats(0.05, 1.0), exponent=st.floats(0.0, 2.0),
       e1=st.floats(0.0, 2.0), e2=st.floats(0.0, 2.0))
def test_factor_is_monotone_and_never_below_scale(scale, knee, exponent, e1, e2):
    c = SustainedClock(scale, knee, exponent)
    lo, hi = sorted((e1, e2))
    assert c.factor(lo) <= c.factor(hi) * (1 + 1e-12)
    assert c.factor(lo) >= scale * (1 - 1e-12)


def test_steady_rows_reads_sets_and_rejects_missing_columns():
    doc = {"columns": ["m", "n", "k", "dtype", "time_s", "set"],
           "rows": [[64, 256, 256, "bf16", 1e-5, "random"], [128, 256, 256, "bf16", 2e-5, "holdout"]]}
    assert steady_rows(doc, ("random",)) == [(64, 256, 256, "bf16", 1e-5, "random")]
    assert len(steady_rows(doc)) == 2
    with pytest.raises(CostError, match="lacks a column"):
        steady_rows({"columns": ["m", "n"], "rows": []})


def test_shipped_h200_fit_throttles_big_gemms_and_not_small_ones():
    c = sustained_for("H200-SXM")
    assert c.origin == "fitted:h200-sxm-gemm-steady.json" and c.rows >= 50
    # measured on the lent H200: 8192^3 bf16 went from about 1.42 ms to 1.60 ms under sustained load
    assert 1.04 < c.factor(0.75) < 1.25
    assert 0.95 < c.factor(0.05) < 1.10 and c.factor(0.05) < c.factor(0.75)
    assert sustained_for("H200-SXM+2g(historical)") == c  # projections use their base GPU's calibration


def test_gpu_without_steady_calibration_or_published_steady_rows_is_not_throttled():
    assert sustained_for("B200") == NO_THROTTLE and published_sustained("B200") is None
    assert published_sustained("H200-SXM") is None  # measured GPUs have no published steady rows


def test_constant_clock_hand_checked_and_bad_input_refused():
    c = constant_clock([1.0, 2.0, 4.0], [1.1, 2.4, 4.4])  # ratios 1.1, 1.2, 1.1
    assert c == SustainedClock(1.1, 1.0, 0.0, 3, "<rows>")
    assert c.factor(0.05) == c.factor(0.95) == pytest.approx(1.1)
    assert constant_clock([2.0, 2.0], [2.0, 3.0]).scale == pytest.approx(1.25)  # even count: mean of the middle two
    for b, s in (([], []), ([1.0], [1.0, 2.0]), ([0.0], [1.0]), ([1.0], [float("nan")])):
        with pytest.raises(CostError):
            constant_clock(b, s)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-6, 1.0), st.floats(0.5, 2.0)), min_size=1, max_size=12))
def test_constant_clock_lies_within_the_rows_ratios(rows):
    b = [x for x, _ in rows]
    s = [x * r for x, r in rows]
    c = constant_clock(b, s)
    ratios = [r for _, r in rows]
    assert min(ratios) - 1e-9 <= c.scale <= max(ratios) + 1e-9 and c.exponent == 0.0 and c.rows == len(rows)


def test_a100_sustained_clock_from_published_steady_rows_hand_checked():
    from c3kit.cost.default_curve import default_curve_for
    from c3kit.cost.published import published_ops

    c = sustained_for("A100-SXM-80G")
    assert c == published_sustained("A100-SXM-80G")
    assert c.origin == "published:a100-sxm-80g.toml" and c.rows == 4 and c.exponent == 0.0
    a100 = get_gpu("A100-SXM-80G")
    curve = default_curve_for(a100)[0]
    fit = [r for r in published_ops("A100-SXM-80G").sustained if r.role == "fit"]
    assert sorted((r.m, r.n, r.k, r.tflops) for r in fit) == [(4096, 4096, 4096, 228.0), (6144, 12288, 12288, 250.8),
                                                              (8192, 8192, 8192, 253.7), (16384, 16384, 16384, 256.5)]
    # Azure's steady TFLOP/s against the levelled (MAMF) curve's burst TFLOP/s, by hand: 261.0 / 228.0 = 1.145,
    # 274.7 / 250.8 = 1.095, 279.3 / 253.7 = 1.101, 281.8 / 256.5 = 1.099; the median 1.0998
    ratios = sorted(r.seconds / curve.gemm_time(r.m, r.n, r.k, "bf16", a100) for r in fit)
    assert [round(x, 3) for x in ratios] == [1.095, 1.099, 1.101, 1.145]
    assert c.scale == pytest.approx((ratios[1] + ratios[2]) / 2, rel=1e-12)
    assert c.scale == pytest.approx(1.0998, abs=5e-4)
    # the cost model at sustained clocks: burst x the constant, and the out-of-sample 8192^3 randn check (257)
    op = Gemm("g", 8192, 8192, 8192)
    burst = time(op, a100, CostModel(kind="efficiency"))
    sus = time(op, a100, CostModel(kind="efficiency", power="sustained"))
    assert sus == pytest.approx(burst * c.scale, rel=1e-12)
    assert op.flops / sus / 1e12 == pytest.approx(257.0, rel=0.02)
    est = explain(op, a100, CostModel(kind="efficiency", power="sustained"))
    assert est.method == "efficiency-sustained" and est.detail["sustained_clock"]["origin"] == c.origin
    assert sustained_for("A100-SXM-80G+2g(historical)") == c  # a projection keeps its base GPU's clock ratio


def test_h100_500w_keeps_the_documented_transfer():
    # no published op-level figure of the H100 at 500 W was found: it keeps the H200's (700 W) fitted factor
    assert sustained_for("H100-SXM-96G-500W") == sustained_for("H200-SXM")


def test_sustained_cost_model_is_burst_times_the_factor():
    gpu = get_gpu("H200-SXM")
    clock = sustained_for("H200-SXM")
    for shape in ((8192, 8192, 8192), (256, 1024, 1024), (3000, 5000, 700)):
        op = Gemm("g", *shape)
        for kind in ("table", "efficiency"):
            burst = time(op, gpu, CostModel(kind=kind))
            eff = op.flops / burst / gpu.peak_flops("bf16")
            sus = time(op, gpu, CostModel(kind=kind, power="sustained"))
            assert sus == pytest.approx(burst * clock.factor(eff), rel=1e-12)
    est = explain(Gemm("g", 8192, 8192, 8192), gpu, CostModel(kind="table", power="sustained"))
    assert est.method == "table-sustained" and est.detail["burst_s"] < est.seconds
    # roofline stays the ideal: no clock factor
    op = Gemm("g", 8192, 8192, 8192)
    assert time(op, gpu, CostModel(power="sustained")) == time(op, gpu)


def test_unknown_power_mode_is_a_cost_error():
    with pytest.raises(CostError, match="unknown power mode"):
        CostModel(kind="table", power="turbo")


def test_shipped_steady_file_records_its_provenance():
    from c3kit.cost.table import calib_dir

    doc = json.loads((calib_dir() / "h200-sxm-gemm-steady.json").read_text())
    for key in ("machine", "gpu", "driver", "torch", "cuda", "date", "command", "script"):
        assert key in doc["meta"]
    sets = {r[doc["columns"].index("set")] for r in doc["rows"]}
    assert sets == {"random", "holdout", "workload"}
    assert all(math.isfinite(r[doc["columns"].index("time_s")]) for r in doc["rows"])


def test_analyze_power_option(tmp_path, capsys):
    from c3kit.cli.main import main

    args = ["analyze", "--model", "Llama-3-8B", "--gpus", "8", "--cost-model", "table", "--json"]
    assert main(args + ["--power", "burst", "--out", str(tmp_path / "b")]) == 0
    burst = json.loads(capsys.readouterr().out)
    assert main(args + ["--out", str(tmp_path / "s")]) == 0  # sustained is the default
    sus = json.loads(capsys.readouterr().out)
    assert sus["totals"]["compute"] > burst["totals"]["compute"]  # big GEMMs slow down at the power cap
    assert sus["cost_model"] == "table (sustained clocks)" and burst["cost_model"] == "table"
    # roofline stays the ideal whatever --power says
    roof = ["analyze", "--model", "Llama-3-8B", "--gpus", "8", "--cost-model", "roofline", "--json"]
    assert main(roof + ["--out", str(tmp_path / "r1")]) == 0
    r1 = json.loads(capsys.readouterr().out)
    assert main(roof + ["--power", "burst", "--out", str(tmp_path / "r2")]) == 0
    assert json.loads(capsys.readouterr().out)["totals"] == r1["totals"]
    assert main(args + ["--power", "turbo", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown power mode" in err[0]
    assert not (tmp_path / "x").exists()




def test_scale_power_option(tmp_path, capsys):
    from c3kit.cli.main import main

    args = ["scale", "--hw", "H200-SXM", "--no-paper", "--tp", "8", "--pp", "1", "--dp", "8", "--layers", "32",
            "--seq", "2048", "--batch", "512", "--generations", "0", "--json"]
    assert main(args + ["--out", str(tmp_path / "s")]) == 0
    sus = json.loads(capsys.readouterr().out)
    assert main(args + ["--power", "burst", "--out", str(tmp_path / "b")]) == 0
    burst = json.loads(capsys.readouterr().out)
    assert "sustained clocks" in sus["notes"][0] and "sustained" not in burst["notes"][0]
    # the power cap slows compute, so communication's share of the step falls
    assert sus["headline"]["comm_share_median"] < burst["headline"]["comm_share_median"]
    assert main(args + ["--power", "turbo", "--out", str(tmp_path / "x")]) == 2


def test_published_steady_rows_of_another_file_set_its_factor(tmp_path, monkeypatch):
    from c3kit.cost import published as pub
    from c3kit.cost.default_curve import default_curve_for

    (tmp_path / "b200.toml").write_text(
        'gpu = "B200"\nretrieved = "2026-12-04"\n'
        '[[sustained_gemm]]\ndtype = "bf16"\nrate_of = "bf16"\nm = 8192\nn = 8192\nk = 8192\ntflops = 1400.0\n'
        'source = "s"\nrole = "fit"\n'
        '[[sustained_gemm]]\ndtype = "bf16"\nrate_of = "bf16"\nm = 1024\nn = 1024\nk = 1024\ntflops = 10.0\n'
        'source = "s"\nrole = "check"\n')
    from c3kit.cost.model import clear_caches

    monkeypatch.setattr(pub, "published_dir", lambda: tmp_path)
    pub.clear()
    clear_caches()
    try:
        gpu = get_gpu("B200")
        burst = default_curve_for(gpu)[0].gemm_time(8192, 8192, 8192, "bf16", gpu)
        c = sustained_for("B200")
        # one fit row: its published time over the curve's burst time; the check row sets nothing
        assert c == SustainedClock(2 * 8192**3 / 1400e12 / burst, 1.0, 0.0, 1, "published:b200.toml")
    finally:
        monkeypatch.undo()
        pub.clear()
        clear_caches()
    assert sustained_for("B200") == NO_THROTTLE
