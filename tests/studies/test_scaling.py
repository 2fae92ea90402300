"""The scaling study: exclusions with reasons, agreement with the per-node projection, trends."""

import pytest

from c3kit.hw import get_gpu
from c3kit.hw.future import project as project_gpu
from c3kit.step import project
from c3kit.step.fast import scenario_objects
from c3kit.step.project import step_timer
from c3kit.studies.scaling import GridSpec, PaperSpec, params_of, run
from c3kit.workload.graph import build_step
from c3kit.workload.model import ModelConfig

GRID = GridSpec(hidden=(4096, 16384), layers=(32, 64), seq=(2048, 8192), batch=(512,), rules=("compute-heavy",),
                generations=(0, 2), tp=(4, 8), pp=(1, 4), dp=(8,))
PAPER = PaperSpec(rules=("historical",), generations=2, tp=(8, 16), pp=(4, 8, 16))


@pytest.fixture(scope="module")
def res():
    return run(GRID, PAPER)


def test_feasible_and_excluded(res):
    s, e = res.scenarios, res.excluded
    assert len(s) + len(e[e["sweep"] == "grid"]) == 2 * 2 * 2 * 1 * 2 * 2 * 2
    assert (s["memory_bytes"] <= s["capacity_bytes"]).all()
    assert (e["reason"].str.len() > 0).all()
    mem = e[e["reason"].str.startswith("needs")]
    assert (mem["memory_bytes"] > mem["capacity_bytes"]).all()
    assert ((0 <= s["comm_share"]) & (s["comm_share"] <= 1)).all()
    assert (s["exposed"] <= s["comm"] * (1 + 1e-12)).all()
    assert (s["step_time"] >= s["compute"]).all()


def test_rows_match_per_node_projection(res):
    from c3kit.step.policy import DEFAULT_MODE, policy_for

    assert res.overlap == DEFAULT_MODE  # the sweep prices under analyze's default mode
    s = res.scenarios.sample(8, random_state=0)
    base = get_gpu(GRID.base_gpu)
    timer = step_timer("efficiency")
    for _, row in s.iterrows():
        gpu = project_gpu(base, "compute-heavy", int(row["generation"])) if row["generation"] else base
        model, par = scenario_objects(row)
        t = project(build_step(model, par, "train", int(row["seq"]), "bf16", gpu.gpus_per_node), gpu,
                    policy=policy_for(DEFAULT_MODE), timer=timer).totals
        assert row["step_time"] == pytest.approx(t.step_time, rel=1e-9)
        assert row["exposed"] == pytest.approx(t.exposed, rel=1e-9, abs=1e-15)


def test_modes_match_per_node_projection():
    """The rule-based modes' columns are the per-node path's; auto's pair prices come from a power-of-two grid of
    GEMM shapes (exact on powers of two only: tests/step/test_fast_overlap.py), so here it is only bounded."""
    from c3kit.step.policy import policy_for
    from c3kit.studies.scaling import OVERLAP_MODES

    grid = GridSpec(hidden=(4096,), layers=(32,), seq=(2048,), batch=(512,), rules=("compute-heavy",),
                    generations=(0,), tp=(8,), pp=(1,), dp=(8,))
    s = run(grid, None, overlap_modes=True).scenarios
    assert len(s)
    gpu = get_gpu(grid.base_gpu)
    timer = step_timer("efficiency")
    row = s.iloc[0]
    model, par = scenario_objects(row)
    g = build_step(model, par, "train", int(row["seq"]), "bf16", gpu.gpus_per_node)
    assert row["step_time_auto"] <= row["step_time_contended"] * (1 + 1e-12)
    for mode in (m for m in OVERLAP_MODES if m != "auto"):
        t = project(g, gpu, policy=policy_for(mode), timer=timer).totals
        assert row[f"step_time_{mode}"] == pytest.approx(t.step_time, rel=1e-9), mode
        assert row[f"exposed_{mode}"] == pytest.approx(t.exposed, rel=1e-9, abs=1e-15), mode


def test_comm_share_grows_when_compute_outgrows_network(res):
    s = res.scenarios
    keys = ["hidden", "layers", "seq", "tp", "pp", "dp"]
    g0 = s[s["generation"] == 0].set_index(keys)["comm_share"]
    g2 = s[s["generation"] == 2].set_index(keys)["comm_share"]
    both = g0.index.intersection(g2.index)
    assert len(both) > 0
    assert (g2.loc[both] > g0.loc[both]).all()


def test_paper_sweep_picks_fastest_fitting_layout(res):
    p, c = res.paper, res.paper_candidates
    assert list(p["generation"]) == [0, 1, 2]
    for r in p.itertuples():
        cand = c[(c["rule"] == r.rule) & (c["generation"] == r.generation)]
        assert r.step_time == pytest.approx(cand["step_time"].min())
    assert (p["params"].diff().dropna() > 0).all()
    assert res.headline()["scenarios"] == len(res.scenarios)


def test_params_formula():
    m = ModelConfig(name="x", hidden=4096, layers=32, heads=32, vocab=51200, position="rope")
    assert params_of(4096, 32) == pytest.approx(m.param_count(), rel=1e-3)


def test_bad_specs():
    from c3kit.errors import C3kitError

    with pytest.raises(C3kitError):
        run(GridSpec(hidden=(1000,)), None)
    with pytest.raises(C3kitError):
        run(GridSpec(rules=("nope",)), None)
    with pytest.raises(C3kitError):
        run(None, PaperSpec(hidden_growth=-1.0))
