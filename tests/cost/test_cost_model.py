"""CostModel configuration: kinds, string names, defaults, errors."""

import pytest

from c3kit import cost
from c3kit.cost.model import CostModel, as_model
from c3kit.errors import CostError
from c3kit.hw import get_gpu
from c3kit.workload.ops import Collective, Gemm, MemOp

H200 = get_gpu("H200-SXM")


def test_default_is_roofline_with_ideal_factors():
    m = CostModel()
    assert (m.kind, m.mem_eff, m.attn_eff, m.comm_eff, m.algo) == ("roofline", 1.0, 1.0, 1.0, "auto")


def test_kind_defaults_and_overrides():
    m = CostModel(kind="efficiency")
    assert (m.mem_eff, m.attn_eff, m.comm_eff) == (0.85, 0.6, 0.8)
    assert CostModel(kind="efficiency", comm_eff=1.0).comm_eff == 1.0


def test_strings_and_models_agree():
    g = Gemm("g", 4096, 4096, 4096)
    for k in ("roofline", "efficiency", "table"):
        assert cost.time(g, H200, k) == cost.time(g, H200, CostModel(kind=k))
    assert as_model(None) is as_model(None)


def test_frozen():
    with pytest.raises(Exception):
        CostModel().kind = "table"


@pytest.mark.parametrize("bad", [dict(kind="magic"), dict(mem_eff=0.0), dict(comm_eff=2.0), dict(table=[1, 2])])
def test_bad_configuration(bad):
    with pytest.raises(CostError):
        CostModel(**bad)


def test_explain_reports_algorithm_and_method():
    e = cost.explain(Collective("ar", "all_reduce", 1e3, 8), H200)
    assert e.method == "collective" and e.detail["algo"] in ("ring", "tree", "direct")
    assert cost.explain(Gemm("g", 64, 64, 64), H200, "efficiency").method == "efficiency"
    assert cost.explain(MemOp("m", 1e6), H200, "efficiency").seconds == pytest.approx(1e6 / (4.8e12 * 0.85))


def test_calibrated_needs_a_shipped_table():
    with pytest.raises(CostError, match="bench"):
        CostModel.calibrated("T3-SIM")


def test_positive_times_for_every_op_and_model():
    ops = [Gemm("g", 1, 1, 1), MemOp("m", 1.0), Collective("c", "all_to_all", 1.0, 2)]
    for op in ops:
        for k in ("roofline", "efficiency", "table"):
            assert cost.time(op, H200, k) > 0
