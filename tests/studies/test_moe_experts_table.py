"""How each MoE validation run's local experts' GEMMs ran: documented decisions with a source."""

import pandas as pd
import pytest

from c3kit.errors import StudyError
from c3kit.step.overheads import MOE_EXPERTS
from c3kit.studies.validation import MOE_EXPERT_COLUMNS, load_runs, moe_experts_of, moe_experts_table, predict


def test_every_row_is_sourced_and_names_moe_runs():
    from fnmatch import fnmatchcase

    t = moe_experts_table()
    assert list(t.columns) == list(MOE_EXPERT_COLUMNS) and len(t) > 0
    runs = load_runs()
    moe = set(runs.loc[runs["n_experts"].astype(int) > 1, "run"])
    dense = set(runs["run"]) - moe
    for _, r in t.iterrows():
        assert r["experts"] in MOE_EXPERTS
        assert str(r["source"]).startswith("https://github.com/NVIDIA/TransformerEngine/"), r["runs"]
        assert len(str(r["reason"])) > 80, r["runs"]
        assert any(fnmatchcase(x, r["runs"]) for x in moe) and not any(fnmatchcase(x, r["runs"]) for x in dense)


def test_documented_decisions_and_their_term():
    for run in ("mbridge2511-h100-qwen3-30b-a3b", "mbridge2602-h100-qwen3-30b-a3b", "mbridge2602-b200-qwen3-30b-a3b"):
        assert moe_experts_of(run) == "per_expert"  # TE GroupedLinear: one cuBLAS GEMM per expert
    assert moe_experts_of("korthikanti-22b") == "grouped"  # not listed: the default
    runs = load_runs()
    row = runs[runs["run"] == "mbridge2602-b200-qwen3-30b-a3b"].iloc[0]
    got = predict(row)
    assert got["overhead.moe_host_bound"] > 0 and got["overhead.moe_host_sync"] > 0
    assert "overhead.moe_per_expert" in got


def test_bad_table_is_refused(tmp_path):
    p = tmp_path / "m.csv"
    pd.DataFrame({"runs": ["x"], "framework": ["f"], "experts": ["batched"], "source": ["s"],
                  "reason": ["r"]}).to_csv(p, index=False)
    with pytest.raises(StudyError, match="unknown experts"):
        moe_experts_table(p)
    p.write_text("runs,experts\nx,grouped\n")
    with pytest.raises(StudyError, match="lack column"):
        moe_experts_table(p)
