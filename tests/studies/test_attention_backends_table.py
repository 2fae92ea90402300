"""The attention backend of every validation run: a documented decision with a source, read by validation."""

import pandas as pd
import pytest

from c3kit.errors import StudyError
from c3kit.studies.validation import BACKEND_COLUMNS, attention_backend_of, attention_backends, load_runs
from c3kit.workload.attention import BACKENDS


def test_every_row_has_a_backend_a_source_and_a_reason():
    t = attention_backends()
    assert list(t.columns) == list(BACKEND_COLUMNS) and len(t) > 0
    for _, r in t.iterrows():
        assert r["backend"] in BACKENDS
        assert str(r["source"]).startswith("https://"), r["runs"]
        assert len(str(r["reason"])) > 40 and str(r["framework"]).strip(), r["runs"]


def test_every_validation_run_has_a_backend():
    t = attention_backends()
    missing = [run for run in load_runs()["run"] if attention_backend_of(run, t) == ""]
    assert missing == []


def test_documented_decisions():
    assert attention_backend_of("korthikanti-530b") == "unfused"
    assert attention_backend_of("narayanan-1t") == "unfused"
    assert attention_backend_of("torchtitan-h100-t2-8b-s64k-cp2") == "flash2"
    assert attention_backend_of("nemo2407-h100-fp8-gpt3-5b") == "cudnn"
    # llm-foundry's attn_impl triton: flash-attention's Triton kernel, of FlashAttention (v1)'s speed
    assert attention_backend_of("mpt-7b-h100-bf16-s2048-g8") == attention_backend_of("mpt-70b-a100-bf16-s2048-g64") \
        == "flash1"
    assert attention_backend_of("no-such-run") == ""  # the GPU's default


def test_first_matching_row_wins(tmp_path):
    p = tmp_path / "b.csv"
    pd.DataFrame({"runs": ["x-cp*", "x-*"], "framework": ["f", "f"], "backend": ["flash2", "unfused"],
                  "source": ["https://a", "https://b"], "reason": ["r", "r"]}).to_csv(p, index=False)
    t = attention_backends(p)
    assert attention_backend_of("x-cp2", t) == "flash2" and attention_backend_of("x-1", t) == "unfused"


def test_bad_table_is_refused(tmp_path):
    p = tmp_path / "b.csv"
    pd.DataFrame({"runs": ["x"], "framework": ["f"], "backend": ["flash9"], "source": ["s"],
                  "reason": ["r"]}).to_csv(p, index=False)
    with pytest.raises(Exception, match="unknown attention backend"):
        attention_backends(p)
    p.write_text("runs,backend\nx,cudnn\n")
    with pytest.raises(StudyError, match="lack column"):
        attention_backends(p)


def test_validation_prices_the_run_with_its_backend():
    from c3kit.studies.validation import predict

    runs = load_runs()
    row = runs[runs["run"] == "narayanan-39b"].iloc[0]
    unfused = predict(row)["predicted_s"]
    row2 = row.copy()
    row2["run"] = "no-such-run"  # the GPU's default (flash2 on the A100): the attention core is cheaper
    assert unfused > predict(row2)["predicted_s"]
