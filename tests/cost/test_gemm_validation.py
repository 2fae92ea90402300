"""benchmarks/validate_gemm.py on the shipped H200 calibration: the issue-5 accuracy claim, re-derived."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_h200_model_meets_the_target_on_held_out_workload_gemms(capsys, load_benchmark):
    rc = load_benchmark("validate_gemm").main(["--no-ablation", "--json"])
    res = json.loads(capsys.readouterr().out)
    w = res["workload"]["calibrated"]
    assert rc == 0 and res["pass"]
    assert w["n"] >= 400 and w["median"] <= 0.05 and w["p90"] <= 0.10
    # the harder set is reported with its own verdict, whatever it is
    assert res["held_out_rows"] == 420 and isinstance(res["random_pass"], bool)
    st = res["steady"]["sets"]
    assert not st["workload"]["fitted"] and st["random"]["fitted"]
    # at steady state the burst table is slow to see the power cap; the sustained factor closes most of it
    assert st["workload"]["sustained"]["median"] < 0.6 * st["workload"]["burst"]["median"]


def test_validate_gemm_without_held_out_rows_is_a_clear_error(tmp_path, capsys, load_benchmark):
    doc = {"kind": "gemm", "meta": {}, "columns": ["m", "n", "k", "dtype", "time_s"],
           "rows": [[64, 256, 256, "bf16", 1e-5]]}
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    assert load_benchmark("validate_gemm").main(["--file", str(f), "--holdout", ""]) == 2
    assert "no held-out" in capsys.readouterr().err


def test_layer_gemm_sequences_on_the_h200_match_sustained_pricing(capsys, load_benchmark):
    mod = load_benchmark("validate_gemm_sequence")
    assert mod.main(["--check", str(ROOT / "benchmarks" / "gemm_sequence_h200" / "gemm-sequence.json"), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["summary"]
    assert s["n"] >= 30
    # measured 2026-12-02: burst pricing 13.8% low (median), sustained 0.7% (p90 2.9%)
    assert s["sustained_median"] < 0.03 and s["sustained_p90"] < 0.06
    assert s["burst_median"] > 2 * s["sustained_median"]
    assert s["curve_sustained_median"] < 0.03  # the efficiency curve, as c3kit analyze prices by default
    assert mod.main(["--check", str(ROOT / "no-such-file.json")]) == 2
