"""The end-to-end study: gains through the step path, labelled, beside the published figures."""

import json

import pytest

from c3kit.cli.main import main
from c3kit.hw.catalog import get_gpu
from c3kit.step import SimpleOverlap
from c3kit.step.policy import EngineOverlap
from c3kit.studies.end_to_end import BASIS, _step, run
from c3kit.studies.t3 import PUBLISHED


def test_quick_run_is_consistent_with_the_step_path():
    res = run(quick=True)
    df = res.tables["cases"]
    assert set(df["study"]) == {"T3", "FiCCO"} and set(df["phase"]) == {"train", "prefill"}
    assert (df["basis"] == BASIS).all()
    assert (df["e2e_gain"] == df["step_simple_s"] / df["step_s"] - 1).all()
    t3 = df[df["study"] == "T3"].set_index("phase")
    assert t3.loc["train", "published"] == PUBLISHED["e2e_train"][0]
    # a row is exactly the step projection with the schedule in the step
    r = df[(df["study"] == "FiCCO") & (df["phase"] == "train") & (df["overlap"] == "auto")].iloc[0]
    gpu = get_gpu(r["hw"])
    auto = EngineOverlap("auto", base=SimpleOverlap())  # the study's engine modes stand on simple's rule
    assert r["step_s"] == pytest.approx(_step(r["model"], int(r["tp"]), "train", 8192, 1, gpu, auto))
    assert r["step_simple_s"] == pytest.approx(_step(r["model"], int(r["tp"]), "train", 8192, 1, gpu, SimpleOverlap()))
    # auto on simple's rule is never slower than simple (by construction); nothing beats no overlap by less than zero
    assert (df[df["overlap"] == "auto"]["e2e_gain"] >= -1e-12).all()
    assert (df["e2e_gain_vs_none"] >= df["e2e_gain"] - 1e-12).all()
    assert all("predicted independently" in n for n in res.notes if n.startswith("Basis"))


def test_cli_json(tmp_path, capsys):
    assert main(["study", "e2e", "--quick", "--out", str(tmp_path / "e"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(k.startswith("T3/") for k in doc["headline"]) and any(k.startswith("FiCCO/") for k in doc["headline"])
    assert (tmp_path / "e" / "report.md").exists()
