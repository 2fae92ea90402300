"""studies/data/pp_engines.csv: DeepSpeed's pipeline engine for the MT-NLG runs, from DeepSpeed's code."""

import pandas as pd
import pytest

from c3kit.errors import StudyError
from c3kit.studies.validation import PP_ENGINE_COLUMNS, layout_of, load_runs, pp_engine_of, pp_engines
from c3kit.workload.parallel import PP_ENGINES


def test_every_row_is_sourced_and_names_a_pipelined_run():
    from fnmatch import fnmatchcase

    t = pp_engines()
    assert list(t.columns) == list(PP_ENGINE_COLUMNS) and len(t) > 0
    runs = load_runs()
    piped = list(runs.loc[runs["pp"].astype(int) > 1, "run"])
    for _, r in t.iterrows():
        assert str(r["pp_engine"]) in PP_ENGINES and str(r["source"]).startswith("https://github.com/")
        assert any(fnmatchcase(x, str(r["runs"])) for x in piped), r["runs"]


def test_documented_decisions():
    runs = load_runs()
    for name in ("mtnlg-530b-2240", "mtnlg-530b-2800", "mtnlg-530b-3360"):
        assert pp_engine_of(name) == "deepspeed"
        assert layout_of(runs[runs["run"] == name].iloc[0]).pp_engine == "deepspeed"
    for name in ("narayanan-530b", "narayanan-530b-2240", "korthikanti-530b"):
        assert pp_engine_of(name) == "megatron"
        assert layout_of(runs[runs["run"] == name].iloc[0]).pp_engine == "megatron"


def test_deepspeed_exchanges_replace_the_whole_activation_sends(monkeypatch):
    from c3kit.studies import validation as v

    row = load_runs().set_index("run").loc["mtnlg-530b-2240"].copy()
    row["run"] = "mtnlg-530b-2240"
    ds = v.predict(row)["predicted_s"]
    monkeypatch.setattr(v, "pp_engine_of", lambda run, table=None: "megatron")
    mg = v.predict(row)["predicted_s"]
    # 10.5 MB slices over HDR in turn plus NVLink gathers cost less than 84 MB over HDR once per phase
    assert ds < mg


def test_bad_table_is_refused(tmp_path):
    p = tmp_path / "e.csv"
    pd.DataFrame({"runs": ["x"], "framework": ["f"], "pp_engine": ["gpipe"], "source": ["s"],
                  "reason": ["r"]}).to_csv(p, index=False)
    with pytest.raises(StudyError, match="unknown pp_engine 'gpipe'"):
        pp_engines(p)
    p.write_text("runs,pp_engine\nx,deepspeed\n")
    with pytest.raises(StudyError, match="lack column"):
        pp_engines(p)


def test_validate_notes_name_the_table():
    from c3kit.studies.validation import validate

    runs = load_runs()
    res = validate(runs=runs[runs["run"] == "mtnlg-530b-2240"])
    assert any("studies/data/pp_engines.csv" in n for n in res.notes)
    assert res.scored["error"].notna().all()
