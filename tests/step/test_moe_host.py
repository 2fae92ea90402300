"""The MoE host model: the shipped reduction of device call 29's moe_host rows, hand-checked figures, bad input."""

import json
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from c3kit.errors import C3kitError
from c3kit.step.moe_host import (HOST_IMPLS, exposed_host_s, host_issue_s, moe_host_calibration, reduce_rows)

RAW = Path(__file__).resolve().parents[2] / "benchmarks" / "ops_h200" / "h200-sxm-ops-moe_host.json"


def _rows(doc):
    return [dict(zip(doc["columns"], r)) for r in doc["rows"]]


def test_shipped_file_is_the_reduction_of_the_raw_measurement(load_benchmark):
    mod = load_benchmark("reduce_moe_host")
    from c3kit.cost.calib_store import op_calibration_path

    shipped = json.loads(op_calibration_path("H200-SXM", "moe_host").read_text())
    assert shipped == json.loads(json.dumps(mod.reduce(json.loads(RAW.read_text()))))
    assert len(shipped["rows"]) == 66  # 11 cases x 2 expert implementations x (sync, layer_fwd, layer_bwd)


def test_calibration_hand_checked():
    cal = moe_host_calibration("H200-SXM")
    # the 22 waits' median: the 11th and 12th smallest are 36.248 us (grouped deepseek-v3 4096) and 36.556 us
    # (sequential qwen3-30b-a3b 16384 ep 8)
    raw = _rows(json.loads(RAW.read_text()))
    waits = sorted(r["wall_s"] for r in raw if r["pass"] == "sync")
    assert cal.sync_s == pytest.approx((waits[10] + waits[11]) / 2) and cal.sync_s == pytest.approx(36.40e-6, abs=0.01e-6)
    # grouped layer_fwd host times, 11 cases: the median is the 6th, qwen3-30b-a3b 4096 tokens ep 8: 3.1594 ms
    assert cal.base_s["fwd"] == pytest.approx(3.159412e-3, rel=1e-6)
    assert cal.base_s["bwd"] == pytest.approx(2.965245e-3, rel=1e-6)  # qwen3-30b-a3b 16384 ep 1
    # per local expert, sequential - grouped: the median forward slope is qwen3-30b-a3b 16384 ep 8,
    # (5.904 - 3.340) ms / 16 = 0.1602 ms; backward qwen3-30b-a3b 8192 ep 8, (8.404 - 2.488) / 16 = 0.3697 ms
    assert cal.per_expert_s["fwd"] == pytest.approx(0.16023e-3, rel=1e-4)
    assert cal.per_expert_s["bwd"] == pytest.approx(0.36972e-3, rel=1e-4)
    # a GPU without its own file takes the H200 host's figures
    assert moe_host_calibration("H100-SXM") == cal


def test_host_issue_hand_checked():
    cal = moe_host_calibration("H200-SXM")
    assert host_issue_s(cal, "fwd", 16) == cal.base_s["fwd"]  # one call for all experts: no per-expert term
    assert host_issue_s(cal, "fwd", 16, "sequential") == pytest.approx(cal.base_s["fwd"] + 16 * cal.per_expert_s["fwd"])
    assert host_issue_s(cal, "bwd", 16, "sequential") == pytest.approx(2.965245e-3 + 16 * 0.36972e-3, rel=1e-4)
    assert exposed_host_s(5e-3, 3e-3) == pytest.approx(2e-3)
    assert exposed_host_s(3e-3, 5e-3) == 0.0  # the host runs ahead of a busier GPU


def test_reduction_uses_medians_not_the_outliers():
    rows = [{"experts_impl": "grouped", "model": "a", "tokens": 1, "ep": 1, "local_experts": 2, "pass": p,
             "wall_s": 1e-5, "host_s": 1e-3} for p in ("sync", "layer_fwd", "layer_bwd")]
    rows += [{"experts_impl": "sequential", "model": "a", "tokens": 1, "ep": 1, "local_experts": 2, "pass": p,
              "wall_s": 3e-5, "host_s": h} for p, h in (("sync", None), ("layer_fwd", 2e-3), ("layer_bwd", 9.0))]
    cal = reduce_rows(rows)
    assert cal.sync_s == pytest.approx(2e-5) and cal.per_expert_s["fwd"] == pytest.approx(0.5e-3)
    with pytest.raises(C3kitError, match="sync"):
        reduce_rows([r for r in rows if r["pass"] != "sync"])
    with pytest.raises(C3kitError, match="grouped"):
        reduce_rows([r for r in rows if r["experts_impl"] != "grouped"])


@pytest.mark.parametrize("bad", [dict(pass_="opt"), dict(local_experts=0), dict(impl="per_expert"),
                                 dict(local_experts=1.5)])
def test_bad_host_inputs(bad):
    cal = moe_host_calibration("H200-SXM")
    kw = {"pass_": "fwd", "local_experts": 8, "impl": "grouped", **bad}
    with pytest.raises(C3kitError):
        host_issue_s(cal, **kw)
    with pytest.raises(C3kitError):
        exposed_host_s(-1.0, 0.0)


@given(el=st.integers(1, 256), more=st.integers(1, 64), ps=st.sampled_from(["fwd", "bwd"]),
       impl=st.sampled_from(HOST_IMPLS))
def test_host_time_grows_with_local_experts(el, more, ps, impl):
    cal = moe_host_calibration("H200-SXM")
    assert host_issue_s(cal, ps, el + more, impl) >= host_issue_s(cal, ps, el, impl) > 0
    assert host_issue_s(cal, ps, el, "sequential") >= host_issue_s(cal, ps, el, "grouped")


@given(host=st.floats(0, 1), gpu=st.floats(0, 1), more=st.floats(0, 1))
def test_exposed_host_falls_as_the_gpu_takes_longer(host, gpu, more):
    assert 0 <= exposed_host_s(host, gpu + more) <= exposed_host_s(host, gpu) <= host


def test_documented_figures_are_the_calibrations():
    from c3kit.step.overheads import eager_launch_s
    from c3kit.hw import get_gpu

    doc = (Path(__file__).resolve().parents[2] / "docs" / "validation.md").read_text()
    cal = moe_host_calibration("H200-SXM")
    each = cal.sync_s + eager_launch_s(get_gpu("H200-SXM"))
    for figure in (f"({cal.sync_s * 1e6:.1f} us on the H200 host)", f"{each * 1e6:.1f} us.",
                   f"{cal.base_s['fwd'] * 1e3:.2f} ms forward and {cal.base_s['bwd'] * 1e3:.2f} ms backward",
                   f"{cal.per_expert_s['fwd'] * 1e3:.3f} ms forward and {cal.per_expert_s['bwd'] * 1e3:.3f} ms backward"):
        assert figure in " ".join(doc.split()), figure
