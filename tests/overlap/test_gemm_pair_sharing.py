"""benchmarks/gemm_pair_sharing.py: the held-out check of the engine's kernel sharing on device call 29's gemm_pair
rows (no parameter fitted to them)."""

import statistics


def test_rows_of_the_shipped_file(load_benchmark):
    rows = load_benchmark("gemm_pair_sharing").rows()
    assert len(rows) == 46
    assert {r["kind"] for r in rows} == {"gemm+gemm", "gemm+add", "gemm+copy"}


def test_two_gemms_that_fill_the_gpu_take_about_back_to_back(load_benchmark):
    mod = load_benchmark("gemm_pair_sharing")
    row = next(r for r in mod.rows() if r["kind"] == "gemm+gemm" and r["a_m"] == r["b_m"] == 8192 and r["b_k"] == 8192)
    assert 0.97 <= mod.predicted_ratio(row) <= 1.03  # measured 0.998


def test_gemm_pairs_within_five_percent_median(load_benchmark):
    mod = load_benchmark("gemm_pair_sharing")
    errs = [abs(mod.predicted_ratio(r) / (r["concurrent_s"] / r["serial_s"]) - 1.0)
            for r in mod.rows() if r["kind"] == "gemm+gemm"]
    assert statistics.median(errs) <= 0.05
