"""auto never recommends a schedule whose model fails its published check; the reason is re-checked here."""

import pytest
from hypothesis import given, settings, strategies as st

from c3kit.overlap.heuristic import pick
from c3kit.overlap.problem import OverlapProblem
from c3kit.overlap.validate import validate
from c3kit.step.policy import AUTO_EXCLUDED, price_pair


@pytest.fixture(scope="module")
def report():
    return validate()


def test_async_tp_still_fails_its_fit_rows(report):
    # the exclusion stands while the fit split's async-TP error is above the 10% target; when the model meets it,
    # this test fails: drop AUTO_EXCLUDED then
    assert report.scores["fit"]["async_tp_median_abs_error"] > 0.10


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["ag_gemm", "gemm_rs"]), st.sampled_from([1024, 2048, 4096, 8192]),
       st.sampled_from([4096, 8192, 14336]), st.sampled_from([4096, 8192]), st.sampled_from([2, 4, 8]))
def test_auto_never_picks_an_excluded_schedule(pattern, m, n, k, ranks):
    prob = OverlapProblem(pattern, m, n, k, gpus=ranks)
    got = price_pair(prob, "H100-SXM", "auto")
    assert got is None or got.schedule not in AUTO_EXCLUDED
    # the plain selector still may: the exclusion is auto's, not the engine's
    assert pick(prob, "H100-SXM", exclude=AUTO_EXCLUDED) not in AUTO_EXCLUDED


def test_excluded_schedules_stay_available_by_name():
    prob = OverlapProblem("ag_gemm", 8192, 8192, 8192, gpus=8)
    got = price_pair(prob, "H100-SXM", "ring-dma")
    assert got is not None and got.schedule == "ring-dma"
