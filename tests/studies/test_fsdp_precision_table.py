"""The dtype each FSDP validation run reduces its gradients in: documented decisions with a source."""

import pandas as pd
import pytest

from c3kit.errors import StudyError
from c3kit.studies.validation import (FSDP_PRECISION_COLUMNS, fsdp_precision, grad_reduce_dtype_of,
                                      load_runs, predict)
from c3kit.workload.layer import GRAD_REDUCE_DTYPES


def test_every_row_is_sourced_and_names_an_fsdp_run():
    from fnmatch import fnmatchcase

    t = fsdp_precision()
    assert list(t.columns) == list(FSDP_PRECISION_COLUMNS) and len(t) > 0
    runs = load_runs()
    fsdp = list(runs.loc[runs["fsdp"].astype(int) == 1, "run"])
    for _, r in t.iterrows():
        assert str(r["reduce_dtype"]) in GRAD_REDUCE_DTYPES
        assert str(r["source"]).startswith("https://github.com/mosaicml/"), r["runs"]
        assert len(str(r["reason"])) > 80, r["runs"]
        assert any(fnmatchcase(x, r["runs"]) for x in fsdp), r["runs"]


def test_documented_decisions():
    assert grad_reduce_dtype_of("mpt-70b-a100-bf16-s2048-g64") == "bf16"  # Composer 0.13.4 PURE (README table)
    assert grad_reduce_dtype_of("mpt-70b-h100-bf16-s2048-g64") == "fp32"  # submit_benchmarks.py: DEFAULT
    assert grad_reduce_dtype_of("mpt-7b-a100-bf16-s2048-g8") == "fp32"
    assert grad_reduce_dtype_of("torchtitan-h100-t1-8b-fsdp") == "fp32"  # not listed: the default
    assert grad_reduce_dtype_of("mpt-70b-a100-bf16-s2048-g64", fsdp=False) == "fp32"


def test_pure_rows_reduce_half_the_bytes(monkeypatch):
    from c3kit.studies import validation as v
    from c3kit.workload import graph

    runs = load_runs()
    row = runs[runs["run"] == "mpt-70b-a100-bf16-s2048-g32"].iloc[0]
    seen = []
    orig = graph.build_step

    def spy(*a, **k):
        g = orig(*a, **k)
        seen.append(sum(n.op.bytes * n.count for n in g.nodes if n.role == "fsdp_rs"))
        return g

    monkeypatch.setattr(graph, "build_step", spy)
    bf16 = predict(row)["predicted_s"]
    monkeypatch.setattr(v, "grad_reduce_dtype_of", lambda run, fsdp=True: "fp32")
    fp32 = predict(row)["predicted_s"]
    assert seen[0] * 2 == pytest.approx(seen[1])
    assert bf16 <= fp32


def test_bad_table_is_refused(tmp_path):
    p = tmp_path / "f.csv"
    pd.DataFrame({"runs": ["x"], "framework": ["f"], "reduce_dtype": ["fp16"], "source": ["s"],
                  "reason": ["r"]}).to_csv(p, index=False)
    with pytest.raises(StudyError, match="reduce_dtype must be one of"):
        fsdp_precision(p)
    p.write_text("runs,reduce_dtype\nx,bf16\n")
    with pytest.raises(StudyError, match="lack column"):
        fsdp_precision(p)
