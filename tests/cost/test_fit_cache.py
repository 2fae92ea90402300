"""The shipped GEMM curve fits are current and equal to a fresh fit."""

import json
import shutil

import pytest

from c3kit.cost.efficiency import EfficiencyCurve, fit_efficiency
from c3kit.cost.fit_cache import file_sha256, fit_path, load_fit, save_fit
from c3kit.cost.table import GemmTable, calibration_path, read_calibration
from c3kit.hw.catalog import get_gpu

H200_TABLE = calibration_path("H200-SXM", "gemm")


def test_shipped_fit_matches_shipped_table():
    """A new gemm table without a refit (benchmarks/refit_gemm_curve.py) fails here."""
    assert H200_TABLE.is_file()
    doc = json.loads(fit_path(H200_TABLE).read_text())
    assert doc["source_sha256"] == file_sha256(H200_TABLE)
    assert load_fit(H200_TABLE) is not None


def test_shipped_fit_equals_a_fresh_fit():
    gpu = get_gpu("H200-SXM")
    fresh = fit_efficiency(GemmTable.from_doc(read_calibration(H200_TABLE), str(H200_TABLE)), gpu).curve
    stored = load_fit(H200_TABLE)
    for m, n, k in ((8192, 8192, 8192), (2048, 1280, 8192), (512, 28672, 8192)):
        assert stored.gemm_time(m, n, k, "bf16", gpu) == pytest.approx(fresh.gemm_time(m, n, k, "bf16", gpu), rel=1e-9)


def test_stale_or_missing_fit_is_ignored(tmp_path):
    table = tmp_path / "x-gemm.json"
    shutil.copy(H200_TABLE, table)
    assert load_fit(table) is None  # no fit file
    save_fit(table, EfficiencyCurve(), "H200-SXM")
    assert load_fit(table) == EfficiencyCurve()
    table.write_text(table.read_text() + " ")  # the table changed: the fit no longer belongs to it
    assert load_fit(table) is None
    fit_path(table).write_text("{not json")
    assert load_fit(table) is None
