"""The MoE options of each validation run's recipe: documented decisions with a source."""

import pandas as pd
import pytest

from c3kit.errors import StudyError
from c3kit.studies.validation import (MOE_OPTION_COLUMNS, load_runs, moe_a2a_overlap_of, moe_dispatcher_of, moe_options,
                                      run_objects)


def test_every_row_is_sourced_and_names_a_moe_run():
    t = moe_options()
    assert list(t.columns) == list(MOE_OPTION_COLUMNS) and len(t) > 0
    runs = load_runs()
    moe = set(runs.loc[runs["n_experts"].astype(int) > 1, "run"])
    for _, r in t.iterrows():
        assert str(r["a2a_overlap"]) in ("0", "1")
        assert str(r["source"]).startswith("https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/"), r["runs"]
        assert len(str(r["reason"])) > 80, r["runs"]
        assert r["runs"] in moe, r["runs"]


def test_documented_decisions():
    assert moe_a2a_overlap_of("mbridge2602-h100-qwen3-30b-a3b")  # r0.3.0 PP 2 / VP 12 config: moe_a2a_overlap=True
    assert not moe_a2a_overlap_of("mbridge2511-h100-qwen3-30b-a3b")  # no recipe matches VP 24 / MBS 2: default
    assert not moe_a2a_overlap_of("mbridge2602-b200-qwen3-30b-a3b")
    assert not moe_a2a_overlap_of("korthikanti-22b")  # dense runs: not listed, off
    runs = load_runs()
    row = runs[runs["run"] == "mbridge2602-h100-qwen3-30b-a3b"].iloc[0]
    assert run_objects(row)[1].moe_a2a_overlap


def test_recipe_dispatcher_and_cuda_graphs():
    # every Qwen3-30B-A3B recipe ran the alltoall dispatcher: 26.02 names the deepep flex backend but never calls
    # apply_flex_dispatcher_backend; only the B200 config captures CUDA graphs, over the router and preprocess
    t = moe_options().set_index("runs")
    for run in ("mbridge2602-h100-qwen3-30b-a3b", "mbridge2511-h100-qwen3-30b-a3b", "mbridge2602-b200-qwen3-30b-a3b"):
        assert moe_dispatcher_of(run) == "alltoall"
        assert "apply_flex_dispatcher_backend" in t.loc[run, "reason"] or "provider" in t.loc[run, "reason"]
    assert t.loc["mbridge2602-b200-qwen3-30b-a3b", "cuda_graph_scope"] == "moe_router moe_preprocess"
    assert t.loc["mbridge2602-h100-qwen3-30b-a3b", "cuda_graph_scope"] == "none"
    assert t.loc["mbridge2511-h100-qwen3-30b-a3b", "cuda_graph_scope"] == "none"
    assert moe_dispatcher_of("korthikanti-22b") == "alltoall"  # not listed: Megatron-Core's default


def test_bad_table_is_refused(tmp_path):
    p = tmp_path / "m.csv"
    row = {"runs": ["x"], "framework": ["f"], "a2a_overlap": ["yes"], "dispatcher": ["alltoall"],
           "cuda_graph_scope": ["none"], "source": ["s"], "reason": ["r"]}
    pd.DataFrame(row).to_csv(p, index=False)
    with pytest.raises(StudyError, match="a2a_overlap must be 0 or 1"):
        moe_options(p)
    pd.DataFrame({**row, "a2a_overlap": ["0"], "dispatcher": ["deepep"]}).to_csv(p, index=False)
    with pytest.raises(StudyError, match="unknown dispatcher 'deepep'"):
        moe_options(p)
    pd.DataFrame({**row, "a2a_overlap": ["0"], "cuda_graph_scope": ["moe_router everything"]}).to_csv(p, index=False)
    with pytest.raises(StudyError, match="unknown cuda_graph_scope 'everything'"):
        moe_options(p)
    pd.DataFrame({**row, "a2a_overlap": ["0"], "cuda_graph_scope": [""]}).to_csv(p, index=False)
    with pytest.raises(StudyError, match="unknown cuda_graph_scope"):
        moe_options(p)
    p.write_text("runs,a2a_overlap\nx,1\n")
    with pytest.raises(StudyError, match="lack column"):
        moe_options(p)
