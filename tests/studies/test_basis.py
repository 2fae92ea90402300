"""Every figure beside a published one carries its basis: measured, predicted independently or fitted."""

import json

import pandas as pd
import pytest

from c3kit.cli.main import main
from c3kit.errors import StudyError
from c3kit.studies.all_studies import BASES, FITTED, MEASURED, PREDICTED, StudyResult, basis_counts


def test_a_table_beside_published_figures_without_basis_is_refused():
    with pytest.raises(StudyError, match="basis"):
        StudyResult("x", "x", pd.DataFrame({"ours": [1.0], "published": [1.0]}))
    with pytest.raises(StudyError, match="not one of"):
        StudyResult("x", "x", pd.DataFrame({"ours": [1.0], "published": [1.0], "basis": ["agrees"]}))
    with pytest.raises(StudyError, match="t_extra"):
        StudyResult("x", "x", pd.DataFrame({"ours": [1.0]}),
                    tables={"t_extra": pd.DataFrame({"published_x": [0.5]})})
    # a table with no published column needs no basis
    StudyResult("x", "x", pd.DataFrame({"ours": [1.0]}))


def test_dma_fitted_rows_are_exactly_the_points_of_the_fit():
    from c3kit.studies.dma_latte import run

    s = run(quick=True).summary
    fitted = s[s.basis == FITTED]
    assert set(fitted.metric) == {"non-copy share", "best/pcpy speedup"}
    assert len(fitted) == 8 + 10  # the 8 published shares and 10 best-variant speedups MI300X_LATTE was fitted to
    assert set(s[s.basis != FITTED].basis) == {PREDICTED}
    assert set(s[s.basis != FITTED].metric) == {"b2b+PL/pcpy speedup", "pcpy DMA / SM library time",
                                                "best DMA / SM library time"}


def test_c3_cu_losses_are_fitted_under_defaults_and_averages_are_not(tmp_path):
    from c3kit.studies.c3 import run

    r = run(gpus=("MI300X",), quick=True)
    assert set(r.summary.basis) == {PREDICTED}
    cu = r.tables["c3_cu_removal"]
    # the sim's default partition cost was fitted exactly to these two published MI300X losses
    assert set(cu.basis) == {FITTED} and len(cu)
    assert (cu.slowdown - cu.published_mi300x).abs().max() < 0.01


def test_c3_h200_cu_losses_from_its_own_calibration_are_not_labelled_fitted():
    from c3kit.studies.c3 import scenario_rows

    _, note, cu = scenario_rows("H200-SXM", quick=True)
    if not note.startswith("calibrated"):
        pytest.skip("no shipped H200 contention calibration")
    assert {c["basis"] for c in cu} == {PREDICTED}


@pytest.mark.parametrize("study", ["t3", "ficco"])
def test_studies_with_nothing_fitted_say_predicted(study):
    from c3kit.studies.all_studies import study_function

    r = study_function(study)(quick=True)
    assert set(r.summary.basis) == {PREDICTED}
    assert basis_counts(r) == {PREDICTED: len(r.summary)}


def test_basis_in_console_and_json(tmp_path, capsys):
    assert main(["study", "dma", "--quick", "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "basis" in out and FITTED in out and PREDICTED in out
    assert main(["study", "dma", "--quick", "--out", str(tmp_path / "b"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["basis"] == {PREDICTED: 7, FITTED: 18}
    assert all(r["basis"] in BASES for r in doc["summary"])
    assert all(r["basis"] in BASES for r in doc["tables"]["dma_breakdown"])
    assert "basis" in (tmp_path / "b" / "dma_summary.csv").read_text().splitlines()[0]


def test_measured_rows_say_measured(tmp_path):
    from c3kit.studies.c3 import measured_c3

    (tmp_path / "h200-sxm-c3.json").write_text(json.dumps(
        {"meta": {}, "kind": "c3", "columns": ["variant", "class", "fraction_of_ideal"],
         "rows": [["sm-copy-k32", "G-long", 0.2]]}))
    tab, _ = measured_c3("H200-SXM", tmp_path)
    assert list(tab.basis) == [MEASURED]
