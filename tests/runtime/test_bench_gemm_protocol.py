"""bench gemm's held-out workload set, steady-state timing and clock columns (CPU: no clock probe)."""

from __future__ import annotations

import json

import pytest

from c3kit.runtime.bench import gemm as g


def test_workload_shapes_are_held_out_multiples_of_8_inside_the_range_and_off_the_grid():
    shapes = g.workload_shapes("bf16")
    assert len(shapes) > 100 and len(set(shapes)) == len(shapes)
    (lo_m, hi_m), (lo_n, hi_n), (lo_k, hi_k) = g.dtype_range("bf16")
    axes = [set(g.grid_axis(lo, hi, g.GRID_STEP["bf16"])) for lo, hi in g.dtype_range("bf16")]
    for s in shapes:
        assert s.set == "workload" and s.dtype == "bf16"
        assert s.m % 8 == 0 and s.n % 8 == 0 and s.k % 8 == 0
        assert lo_m <= s.m <= hi_m and lo_n <= s.n <= hi_n and lo_k <= s.k <= hi_k
        assert not (s.m in axes[0] and s.n in axes[1] and s.k in axes[2])
    assert g.workload_shapes("bf16") == shapes  # deterministic
    assert len(g.workload_shapes("bf16", n=10)) == 10


def test_workload_shapes_hold_a_known_llama_gemm():
    # Llama-3-8B (hidden 4096, FFN 14336, seq 8192) at TP 2, micro-batch 1: the MLP down projection
    # forward is 8192 tokens x 4096 over K = 14336 / 2 = 7168 (off the grid in K); the fully on-grid
    # attention output projection 8192 x 4096 x 2048 is left out
    w = g.workload_shapes("bf16")
    assert g.Shape(8192, 4096, 7168, "bf16", "workload") in w
    assert g.Shape(8192, 4096, 2048, "bf16", "workload") not in w


def test_steady_shapes_draw_from_each_set():
    shapes = g.sweep_shapes(["bf16"], quick=True, n_random=6, n_holdout=5, n_align=2, n_odd=1)
    shapes += [g.Shape(64, 64, 64, "bf16", "workload")]
    picked = g.steady_shapes(shapes, 3)
    counts = {name: sum(1 for s in picked if s.set == name) for name in ("random", "holdout", "workload")}
    assert counts == {"random": 3, "holdout": 3, "workload": 1}


torch = pytest.importorskip("torch", reason="bench needs PyTorch")


def test_run_steady_on_cpu_times_every_shape_without_a_clock():
    shapes = [g.Shape(32, 16, 8, "fp32", "random"), g.Shape(16, 16, 16, "fp32", "holdout")]
    rows = g.run_steady(shapes, torch.device("cpu"), {"fp32": 1e12}, hold_s=0.004)
    assert len(rows) == 2
    cols = g.STEADY_COLUMNS
    for r in rows:
        assert r[cols.index("time_s")] > 0 and r[cols.index("hold_s")] == 0.004
        assert r[cols.index("sm_clock_hz")] is None and r[cols.index("time_ref_s")] is None


def test_sweep_rows_carry_clock_columns_none_on_cpu():
    shapes = [g.Shape(32, 16, 8, "fp32", "grid"), g.Shape(16, 16, 16, "fp32", "grid")]
    rows, _, _ = g.run_sweep(shapes, torch.device("cpu"), {"fp32": 1e12}, passes=2, sentinel_every=0,
                             probe_clock=True)
    cols = g.SWEEP_COLUMNS
    assert all(len(r) == len(cols) for r in rows)
    assert all(r[cols.index("sm_clock_hz")] is None and r[cols.index("time_ref_s")] is None for r in rows)


def test_bench_gemm_steady_writes_its_own_file(tmp_path):
    from c3kit.cli.main import main

    out = tmp_path / "cpu-gemm.json"
    rc = main(["bench", "gemm", "--quick", "--dtypes", "fp32", "--no-splits", "--passes", "1", "--random", "4",
               "--holdout", "3", "--align", "2", "--odd", "0", "--steady", "2", "--steady-hold-s", "0.002",
               "--out", str(out), "--script", "tests"])
    assert rc == 0
    steady = json.loads((tmp_path / "cpu-gemm-steady.json").read_text())
    assert steady["columns"] == g.STEADY_COLUMNS
    assert sorted(r[10] for r in steady["rows"]) == ["holdout", "holdout", "random", "random"]
    assert json.loads(steady["meta"]["protocol"])["steady"] == 2
    assert not (tmp_path / "cpu-gemm-workload.json").exists()  # the quick grid has no workload shapes


def test_bench_gemm_plan_lists_the_workload_set(capsys):
    from c3kit.cli.main import main

    assert main(["bench", "gemm", "--plan"]) == 0
    assert "workload" in capsys.readouterr().out
    assert main(["bench", "gemm", "--plan", "--no-workload"]) == 0
    assert "workload" not in capsys.readouterr().out


def test_bench_gemm_steady_only_skips_the_sweep(tmp_path, capsys):
    from c3kit.cli.main import main

    out = tmp_path / "cpu-gemm.json"
    assert main(["bench", "gemm", "--steady-only", "--out", str(out)]) == 2
    assert "needs --steady" in capsys.readouterr().err
    assert main(["bench", "gemm", "--steady", "2", "--steady-hold-s", "0", "--out", str(out)]) == 2
    assert "must be positive" in capsys.readouterr().err
    assert not out.exists()
    rc = main(["bench", "gemm", "--quick", "--dtypes", "fp32", "--steady", "2", "--steady-only", "--steady-hold-s",
               "0.002", "--out", str(out), "--script", "tests"])
    assert rc == 0 and not out.exists()
    steady = json.loads((tmp_path / "cpu-gemm-steady.json").read_text())
    assert len(steady["rows"]) == 4 and json.loads(steady["meta"]["protocol"])["steady_only"] is True
