"""Which FP8 scaling recipe each FP8 validation run used: a documented decision with a source, read by validation."""

import pandas as pd
import pytest

from c3kit.cli.main import main
from c3kit.errors import StudyError
from c3kit.step.overheads import FP8_SCALING
from c3kit.studies.validation import FP8_RECIPE_COLUMNS, fp8_recipes, fp8_scaling_of, load_runs, predict


def test_every_row_is_sourced_and_every_fp8_run_has_a_recipe():
    t = fp8_recipes()
    assert list(t.columns) == list(FP8_RECIPE_COLUMNS) and len(t) > 0
    for _, r in t.iterrows():
        assert r["fp8_scaling"] in FP8_SCALING
        assert str(r["source"]).startswith("https://"), r["runs"]
        assert len(str(r["reason"])) > 40, r["runs"]
    runs = load_runs()
    assert all(fp8_scaling_of(r, t) for r in runs.loc[runs["dtype"] == "fp8", "run"])


def test_documented_decisions():
    assert fp8_scaling_of("mbridge2511-h100-qwen3-30b-a3b") == "current"  # FP8-CS: TE Float8CurrentScaling
    assert fp8_scaling_of("mbridge2602-b200-qwen3-30b-a3b") == "mxfp8"
    assert fp8_scaling_of("nemo2407-h100-fp8-llama2-7b") == "delayed"
    # Composer AMP_FP8: DelayedScaling; MPT's te.Linear called without is_first_microbatch: weights cast every forward
    assert fp8_scaling_of("mpt-3b-h100-fp8-s2048-g8") == "delayed_uncached"
    assert fp8_scaling_of("torchtitan-h100-t1-8b-fsdp-compile-fp8") == "dynamic"  # torchao Float8Linear
    assert fp8_scaling_of("korthikanti-22b") == ""


def test_predict_prices_the_runs_recipe(monkeypatch):
    import c3kit.studies.validation as v

    runs = load_runs()
    row = runs[runs["run"] == "torchtitan-h100-t1-8b-fsdp-compile-fp8"].iloc[0]
    got = predict(row)["overhead.fp8_casts"]
    delayed_table = pd.DataFrame({"runs": [row["run"]], "framework": ["x"], "fp8_scaling": ["delayed"],
                                  "source": ["https://x"], "reason": ["y"]})
    monkeypatch.setattr(v, "fp8_recipes", lambda path=None: delayed_table)
    delayed = predict(row)["overhead.fp8_casts"]
    assert got > delayed > 0  # torchao casts weights in every forward, with an amax pass


def test_bad_table_and_bad_cli_value(tmp_path):
    p = tmp_path / "f.csv"
    pd.DataFrame({"runs": ["x"], "framework": ["f"], "fp8_scaling": ["nvfp4"], "source": ["s"],
                  "reason": ["r"]}).to_csv(p, index=False)
    with pytest.raises(StudyError, match="fp8_scaling"):
        fp8_recipes(p)
    p.write_text("runs,fp8_scaling\nx,delayed\n")
    with pytest.raises(StudyError, match="lack column"):
        fp8_recipes(p)
    out = tmp_path / "an"
    assert main(["analyze", "--model", "llama-3-8b", "--hw", "H100-SXM", "--gpus", "8", "--dtype", "fp8",
                 "--fp8-scaling", "nvfp4", "--out", str(out)]) == 2
    assert not out.exists()


def test_analyze_takes_the_recipe():
    from c3kit import api

    kw = dict(gpus=8, tp=1, pp=1, dp=8, seq=4096, batch=32, micro_batch=2, dtype="fp8", recompute="none",
              compare_overlap=False)
    casts = {r: api.analyze("llama-3-8b", "H100-SXM", fp8_scaling=r, **kw).step.totals.overhead
             for r in ("delayed", "current", "dynamic")}
    assert casts["delayed"] < casts["current"] < casts["dynamic"]  # 2 micro-batches: torchao re-casts weights
