"""What each validation run's selective activation checkpointing recomputes: a documented decision with a source."""

import pandas as pd
import pytest

from c3kit.errors import StudyError
from c3kit.studies.validation import RECOMPUTE_COLUMNS, load_runs, recompute_modes, recompute_of, run_objects
from c3kit.workload.parallel import RECOMPUTE


def test_every_row_is_sourced():
    t = recompute_modes()
    assert list(t.columns) == list(RECOMPUTE_COLUMNS) and len(t) > 0
    for _, r in t.iterrows():
        assert r["recompute"] in RECOMPUTE
        assert str(r["source"]).startswith("https://github.com/pytorch/torchtitan/"), r["runs"]
        assert len(str(r["reason"])) > 40, r["runs"]


def test_documented_decisions():
    assert recompute_of("torchtitan-a100-l3-8b-sellayer", "selective") == "layer"  # selective_ac_option '2'
    assert recompute_of("torchtitan-a100-l2-70b-selop", "selective") == "op"
    assert recompute_of("torchtitan-h100-t1-8b-fsdp-compile-fp8", "selective") == "op"  # llama3_8b.toml 'op'
    assert recompute_of("korthikanti-22b", "selective") == "selective"  # Megatron: the attention core
    assert recompute_of("torchtitan-h100-t5-405b-3d-1f1b", "full") == "full"  # a stated mode is kept
    df = load_runs()
    for _, row in df.iterrows():  # every torchtitan run stating selective AC gets torchtitan's policy
        if "torchtitan" in row["framework"] and row["recompute"] == "selective":
            assert run_objects(row)[1].recompute in ("op", "layer"), row["run"]
    lay = df[df["run"] == "torchtitan-a100-l3-8b-sellayer"].iloc[0]
    assert run_objects(lay)[1].recompute_every == 2


def test_bad_table_is_refused(tmp_path):
    p = tmp_path / "r.csv"
    pd.DataFrame({"runs": ["x"], "framework": ["f"], "recompute": ["half"], "source": ["s"],
                  "reason": ["r"]}).to_csv(p, index=False)
    with pytest.raises(StudyError, match="unknown recompute 'half'"):
        recompute_modes(p)
    p.write_text("runs,recompute\nx,op\n")
    with pytest.raises(StudyError, match="lack column"):
        recompute_modes(p)
