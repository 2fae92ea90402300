"""Transformer Engine's userbuffers TP overlap of each validation run's recipe: documented decisions with a source."""

import re

import pandas as pd
import pytest

from c3kit.errors import StudyError
from c3kit.studies.validation import (TP_OVERLAP_COLUMNS, gemm_methods, layout_of, load_runs, tp_comm_overlap_of,
                                      tp_overlaps)
from c3kit.workload.parallel import TP_COMM_OVERLAP_METHODS

PINNED = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/\S+$")


def test_every_row_is_sourced_and_its_methods_parse():
    t = tp_overlaps()
    assert list(t.columns) == list(TP_OVERLAP_COLUMNS) and len(t) > 0
    runs = load_runs()
    for _, r in t.iterrows():
        assert PINNED.match(str(r["source"])), r["runs"]
        assert len(str(r["reason"])) > 80, r["runs"]
        matched = runs[runs["run"].str.fullmatch(str(r["runs"]).replace(".", r"\.").replace("*", ".*"))]
        assert len(matched) > 0, r["runs"]
        assert (matched["tp"].astype(int) > 1).all() and (matched["sp"].astype(int) == 1).all(), r["runs"]
        methods = gemm_methods(r["gemm_methods"])
        if r["tp_comm_overlap"] == "none":
            assert methods == {} and r["config_source"] == ""
            continue
        assert PINNED.match(str(r["config_source"])), r["runs"]
        assert {k: v[:2] for k, v in methods.items()} == TP_COMM_OVERLAP_METHODS[r["tp_comm_overlap"]]


def test_gemm_methods_parse_exactly():
    got = gemm_methods("qkv_fprop=ring_exchange; proj_fprop=pipeline(num_sm 24, cga_size 2, num_splits 4, "
                       "set_sm_margin 1); fc2_dgrad=ring_exchange(aggregate 1)")
    assert got == {"qkv_fprop": ("ring_exchange", False, {}),
                   "proj_fprop": ("pipeline", True, {"num_sm": 24, "cga_size": 2, "num_splits": 4}),
                   "fc2_dgrad": ("ring_exchange", False, {"aggregate": 1})}
    assert gemm_methods("") == {}


def test_documented_decisions():
    assert tp_comm_overlap_of("mbridge2511-h100-llama3-70b") == "ring_exchange"
    assert tp_comm_overlap_of("mbridge2602-h100-llama3.1-405b-cp2") == "ring_exchange"
    assert tp_comm_overlap_of("nemo2407-h100-fp8-gpt3-20b") == "pipeline_margin"
    assert tp_comm_overlap_of("nemo2407-h100-fp8-nemotron4-340b") == "pipeline"  # TE defaults, no ub config
    assert tp_comm_overlap_of("nemo2407-h100-fp8-gpt3-175b-512") == "none"  # the launcher's 175B: False
    assert tp_comm_overlap_of("nemotron4-340b") == "none"  # the paper's layout: False
    assert tp_comm_overlap_of("korthikanti-22b") == "none"  # not listed: none
    runs = load_runs().set_index("run")
    for run, want in (("mbridge2511-h100-llama3-70b", "ring_exchange"), ("narayanan-530b", "none")):
        row = runs.loc[run].copy()
        row["run"] = run
        assert layout_of(row).tp_comm_overlap == want


@pytest.mark.parametrize("cell, says", [
    ("qkv_fprop ring_exchange", "malformed gemm method"),
    ("qkv_fprop=ring_exchange(num_sm many)", "not 'name integer'"),
])
def test_malformed_methods_are_refused(cell, says):
    with pytest.raises(StudyError, match=says):
        gemm_methods(cell)


def test_bad_table_is_refused(tmp_path):
    p = tmp_path / "t.csv"
    row = {"runs": ["x"], "framework": ["f"], "tp_comm_overlap": ["sometimes"], "ub_cfg": [""], "gemm_methods": [""],
           "source": ["s"], "config_source": [""], "reason": ["r"]}
    pd.DataFrame(row).to_csv(p, index=False)
    with pytest.raises(StudyError, match="unknown tp_comm_overlap 'sometimes'"):
        tp_overlaps(p)
    pd.DataFrame({**row, "tp_comm_overlap": ["ring_exchange"], "gemm_methods": ["qkv_fprop=bulk"]}).to_csv(p, index=False)
    with pytest.raises(StudyError, match="not the methods of ring_exchange"):
        tp_overlaps(p)
    p.write_text("runs,tp_comm_overlap\nx,none\n")
    with pytest.raises(StudyError, match="lack column"):
        tp_overlaps(p)


def test_validate_notes_name_the_fact_and_layouts_show_it():
    from c3kit.studies.validation import validate

    runs = load_runs()
    res = validate(runs=runs[runs["run"] == "mbridge2511-h100-llama3-70b"])
    assert any("studies/data/tp_overlap.csv" in n for n in res.notes)
    row = res.table.iloc[0]
    assert "+ub:ring_exchange" in row["layout"] and row["status"] == "scored"
