"""How each validation run's RMSNorm and RoPE ran: a documented decision with a source, read by validation."""

import pandas as pd
import pytest

from c3kit.errors import StudyError, WorkloadError
from c3kit.studies.validation import NORM_ROPE_COLUMNS, load_runs, norm_rope_code, norm_rope_of
from c3kit.workload.layer import NORM_ROPE


def test_every_row_is_sourced():
    t = norm_rope_code()
    assert list(t.columns) == list(NORM_ROPE_COLUMNS) and len(t) > 0
    for _, r in t.iterrows():
        assert r["norm_rope"] in NORM_ROPE
        assert str(r["source"]).startswith("https://"), r["runs"]
        assert len(str(r["reason"])) > 40, r["runs"]


def test_documented_decisions():
    assert norm_rope_of("torchtitan-a100-l3-8b-selop") == "eager"  # 2024 defaults: rmsnorm, compile = false
    assert norm_rope_of("torchtitan-h100-t1-8b-fsdp") == "eager"
    assert norm_rope_of("torchtitan-h100-t1-8b-fsdp-compile") == "fused"
    assert norm_rope_of("torchtitan-h100-t6-405b-s32k") == "fused"
    assert norm_rope_of("nemo2407-h100-fp8-gpt3-5b") == "fused"  # no row matches: fused kernels
    eager = [r for r in load_runs()["run"] if norm_rope_of(r) == "eager"]
    assert eager and all(r.startswith("torchtitan-") and "compile" not in r for r in eager)


def test_bad_table_is_refused(tmp_path):
    p = tmp_path / "n.csv"
    pd.DataFrame({"runs": ["x"], "framework": ["f"], "norm_rope": ["triton"], "source": ["s"],
                  "reason": ["r"]}).to_csv(p, index=False)
    with pytest.raises(WorkloadError, match="norm/RoPE"):
        norm_rope_code(p)
    p.write_text("runs,norm_rope\nx,eager\n")
    with pytest.raises(StudyError, match="lack column"):
        norm_rope_code(p)


def test_eager_code_prices_slower():
    from c3kit.studies.validation import predict

    runs = load_runs()
    row = runs[runs["run"] == "torchtitan-h100-t1-8b-fsdp"].iloc[0]
    eager = predict(row)["predicted_s"]
    row2 = row.copy()
    row2["run"] = "torchtitan-h100-t1-8b-fsdp-compile"  # same layout, compiled: fused kernels
    assert eager > predict(row2)["predicted_s"]
