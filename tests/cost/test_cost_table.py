"""Calibration files and the measured GEMM table: format, validation, interpolation, fallback."""

import json
import math

import pytest

from c3kit import cost
from c3kit.cost.efficiency import DEFAULT_CURVE
from c3kit.cost.table import (GemmTable, calibration_path, load_calibration, read_calibration,
                              write_calibration)
from c3kit.errors import CostError
from c3kit.hw import get_gpu
from c3kit.workload.ops import Gemm

H200 = get_gpu("H200-SXM")
COLS = ["m", "n", "k", "dtype", "time_s"]
META = {"machine": "test", "gpu": "H200-SXM", "date": "2026-12-02T00:00:00+00:00"}


def grid_rows(f=lambda m, n, k: 2 * m * n * k / 700e12 + 5e-6):
    sizes = [1024, 2048, 4096, 8192]
    return [[m, n, k, "bf16", f(m, n, k)] for m in sizes for n in sizes for k in sizes]


def test_write_read_round_trip(tmp_path):
    p = write_calibration(tmp_path / "h200-sxm-gemm.json", "gemm", COLS, grid_rows(), META)
    doc = json.loads(p.read_text())
    assert doc["kind"] == "gemm" and doc["columns"] == COLS and len(doc["rows"]) == 64
    assert set(doc["meta"]) >= {"machine", "gpu", "driver", "torch", "cuda", "date", "command", "script"}
    assert read_calibration(p)["meta"]["gpu"] == "H200-SXM"
    assert not list(tmp_path.glob("*.tmp"))


def test_writer_fills_date(tmp_path):
    p = write_calibration(tmp_path / "x-gemm.json", "gemm", COLS, grid_rows()[:2], {"gpu": "x"})
    assert json.loads(p.read_text())["meta"]["date"]


@pytest.mark.parametrize("kind,cols,rows,match", [
    ("gemm", ["m", "n", "k", "time_s"], [[1, 1, 1, 1e-6]], "dtype"),
    ("bogus", COLS, [], "kind"),
    ("gemm", COLS, [[1, 1, 1, "bf16"]], "values"),
    ("gemm", COLS, [[-1, 1, 1, "bf16", 1e-6]], "positive"),
    ("gemm", COLS, [["a", 1, 1, "bf16", 1e-6]], "non-numeric"),
])
def test_writer_validates(tmp_path, kind, cols, rows, match):
    with pytest.raises(CostError, match=match):
        write_calibration(tmp_path / "bad.json", kind, cols, rows, META)
    assert not (tmp_path / "bad.json").exists()


def test_other_kinds_are_free_form(tmp_path):
    p = write_calibration(tmp_path / "h200-sxm-comm.json", "comm", ["kind", "bytes", "time_s"],
                          [["all_reduce", 1024, 1e-5]], META)
    assert load_calibration("H200-SXM", "comm", root=tmp_path)["rows"][0][0] == "all_reduce"


def test_load_by_alias_and_absent(tmp_path):
    write_calibration(calibration_path("H200-SXM", "gemm", tmp_path), "gemm", COLS, grid_rows(), META)
    assert isinstance(load_calibration("h200", "gemm", root=tmp_path), GemmTable)
    assert load_calibration("MI300X", "gemm", root=tmp_path) is None
    assert calibration_path("H200-SXM", "gemm", tmp_path).name == "h200-sxm-gemm.json"


def test_unreadable_file(tmp_path):
    p = tmp_path / "h200-sxm-gemm.json"
    p.write_text("{not json")
    with pytest.raises(CostError, match="readable"):
        read_calibration(p)


def _table():
    doc = {"meta": META, "kind": "gemm", "columns": COLS, "rows": grid_rows()}
    return GemmTable.from_doc(doc)


def test_grid_lookup_exact_at_measured_points():
    t = _table()
    assert t.lookup(2048, 4096, 1024, "bf16") == pytest.approx(2 * 2048 * 4096 * 1024 / 700e12 + 5e-6)


def test_grid_lookup_interpolates_in_log_space():
    t = _table()
    lo, hi = t.lookup(2048, 2048, 2048, "bf16"), t.lookup(4096, 2048, 2048, "bf16")
    mid = t.lookup(round(2048 * math.sqrt(2)), 2048, 2048, "bf16")
    assert mid == pytest.approx(math.sqrt(lo * hi), rel=1e-3)


def test_outside_the_table_falls_back_with_a_flag():
    t = _table()
    assert t.lookup(16384, 2048, 2048, "bf16") is None
    assert t.lookup(2048, 2048, 2048, "fp8") is None
    model = cost.CostModel(kind="table", table=t, curve=DEFAULT_CURVE)  # fixed curve: independent of shipped calibration
    inside = cost.explain(Gemm("g", 2048, 2048, 2048), H200, model)
    outside = cost.explain(Gemm("g", 16384, 2048, 2048), H200, model)
    assert inside.method == "table" and inside.detail["in_table"]
    assert outside.method == "table-fallback" and outside.detail["fallback"]
    assert outside.seconds == DEFAULT_CURVE.gemm_time(16384, 2048, 2048, "bf16", H200)
    assert cost.time(Gemm("g", 16384, 2048, 2048), H200, model) == outside.seconds


def test_batched_gemm_is_looked_up_as_more_rows():
    t = _table()
    assert t.lookup(1024, 2048, 2048, "bf16", batch=2) == pytest.approx(t.lookup(2048, 2048, 2048, "bf16"))


def test_scattered_table_interpolates_ratio_to_curve():
    rows = grid_rows()[::3]  # not a full grid
    t = GemmTable([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], ["bf16"] * len(rows),
                  [r[4] * 1.1 for r in rows])
    m, n, k = rows[5][:3]
    assert t.lookup(m, n, k, "bf16", gpu=H200) == pytest.approx(rows[5][4] * 1.1)
    # between points: measured/curve ratio carried over to the curve
    q = t.lookup(3000, 3000, 3000, "bf16", curve=DEFAULT_CURVE, gpu=H200)
    assert q is not None and q > 0


def test_table_model_without_any_table_falls_back():
    e = cost.explain(Gemm("g", 4096, 4096, 4096), get_gpu("T3-SIM"), "table")
    assert e.method == "table-fallback" and e.detail["has_table"] is False


def test_table_rejects_bad_columns():
    with pytest.raises(CostError):
        GemmTable([1, 2], [1], [1, 2], ["bf16"] * 2, [1e-6, 1e-6])
    with pytest.raises(CostError):
        GemmTable.from_doc({"meta": {}, "kind": "comm", "columns": ["a"], "rows": []})


def test_shipped_calibration_calibrates_the_efficiency_model(tmp_path, monkeypatch):
    import c3kit.cost.calib_store as store
    from c3kit.cost.efficiency import EfficiencyCurve, curve_times
    from c3kit.hw import project

    truth = EfficiencyCurve(peak_frac={"bf16": 0.7}, k_half=300, overhead=6e-6)
    sizes = [512, 1024, 2048, 4096, 8192]
    shapes = [(m, n, k) for m in sizes for n in sizes for k in sizes]
    ts = curve_times(truth, H200, *zip(*shapes), ["bf16"] * len(shapes))
    monkeypatch.setattr(store, "calib_dir", lambda: tmp_path)
    write_calibration(tmp_path / "h200-sxm-gemm.json", "gemm", COLS,
                      [[m, n, k, "bf16", float(t)] for (m, n, k), t in zip(shapes, ts)], META)
    cost.clear_caches()
    try:
        g = Gemm("g", 3000, 6000, 1500)
        e = cost.explain(g, H200, "efficiency")
        assert e.detail["curve"].startswith("fitted:")
        assert e.seconds == pytest.approx(truth.gemm_time(3000, 6000, 1500, "bf16", H200), rel=0.02)
        assert cost.explain(g, H200, "table").method == "table"
        # a projection of the H200 keeps the fitted curve shape, with its own peaks
        p = project(H200, "balanced", 1)
        assert cost.explain(g, p, "efficiency").detail["curve"].startswith("fitted:")
        assert cost.explain(g, p, "table").method == "table-fallback"
    finally:
        cost.clear_caches()


def test_c3_variant_family_names():
    from c3kit.cost.table import c3_variant_family

    assert c3_variant_family("sm-8") == "plain"
    assert c3_variant_family("sm-prio-8") == "prioritized"
    assert c3_variant_family("sm-16+gemm-112") == "cu-partitioned"
    assert c3_variant_family("ce-d2h") == "dma"
    assert c3_variant_family("ce-d2d+gemm-120") == "dma+fewer-cus"


def test_store_names_the_published_folder_and_cites_shipped_files():
    from c3kit.cost.calib_store import calib_dir, published_ops_dir, shipped_name, transfers_path

    assert sorted(p.name for p in published_ops_dir().glob("*.toml"))[0] == "a100-sxm-80g.toml"
    assert shipped_name(published_ops_dir() / "b200.toml") == "cost/data/published_ops/b200.toml"
    assert shipped_name(calib_dir() / "h200-sxm-gemm.json") == "cost/data/calib/h200-sxm-gemm.json"
    assert shipped_name(transfers_path()) == "cost/data/transfers.toml"
    with pytest.raises(ValueError):
        shipped_name("/tmp/elsewhere.json")  # not a shipped file


def test_op_rows_are_dicts_by_column_and_a_bad_file_is_one_error(tmp_path):
    from c3kit.cost.calib_store import op_rows

    f = tmp_path / "h200-sxm-ops-x.json"
    f.write_text(json.dumps({"kind": "ops-x", "columns": ["a", "b"], "rows": [[1, "u"], [2, "v"]]}))
    assert op_rows(f) == [{"a": 1, "b": "u"}, {"a": 2, "b": "v"}]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(CostError, match="bad.json"):
        op_rows(tmp_path / "bad.json")
    with pytest.raises(CostError, match="none.json"):
        op_rows(tmp_path / "none.json")
