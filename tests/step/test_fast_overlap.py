"""The vectorized sweep prices collective-GEMM pairs as the per-node path does (auto, none, simple, contended)."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.hw import get_gpu
from c3kit.step import SerialOverlap, SimpleOverlap, project
from c3kit.step.fast import project_many, scenario_objects
from c3kit.step.policy import EngineOverlap, contended_policy
from c3kit.step.project import step_timer
from c3kit.workload.graph import build_step

GPUS = {n: get_gpu(n) for n in ("H200-SXM", "MI300X")}


def pow2_scenarios() -> pd.DataFrame:
    """GQA models whose every GEMM dimension is a power of two (the sweep's price grid is then exact)."""
    rows = []
    for i, (tp, sp, seq, mb, gpu) in enumerate([(2, True, 2048, 1, "H200-SXM"), (4, True, 1024, 2, "MI300X"),
                                               (8, False, 2048, 1, "H200-SXM"), (2, False, 4096, 1, "MI300X"),
                                               (1, False, 1024, 1, "H200-SXM")]):
        rows.append(dict(hidden=2048, layers=4, heads=16, kv_heads=8, ffn_hidden=8192, vocab=32768, gated_mlp=False,
                         layernorm=False, tied_embeddings=True, seq=seq, micro_batch=mb, global_batch=2 * mb, tp=tp,
                         sp=sp, dp=1, pp=1, fsdp=False, dist_optimizer=False, recompute=0, gpu=gpu))
    return pd.DataFrame(rows)


def test_auto_and_none_agree_with_the_per_node_path():
    df = pow2_scenarios()
    out = project_many(df, GPUS, "efficiency", policy=EngineOverlap("auto"),
                       compare={"none": SerialOverlap(), "simple": SimpleOverlap(), "contended": contended_policy(),
                                "auto_simple": EngineOverlap("auto", base=SimpleOverlap())})
    timer = step_timer("efficiency")
    for i, row in df.iterrows():
        model, par = scenario_objects(row.to_dict())
        g = build_step(model, par, "train", int(row["seq"]), "bf16", GPUS[row["gpu"]].gpus_per_node)
        auto = project(g, GPUS[row["gpu"]], policy=EngineOverlap("auto"), timer=timer)
        none = project(g, GPUS[row["gpu"]], policy=SerialOverlap(), timer=timer)
        cont = project(g, GPUS[row["gpu"]], policy=contended_policy(), timer=timer)
        on_simple = project(g, GPUS[row["gpu"]], policy=EngineOverlap("auto", base=SimpleOverlap()), timer=timer)
        assert out.loc[i, "step_time"] == pytest.approx(auto.totals.step_time, rel=1e-9)
        assert out.loc[i, "exposed"] == pytest.approx(auto.totals.exposed, rel=1e-9)
        assert out.loc[i, "step_time_none"] == pytest.approx(none.totals.step_time, rel=1e-9)
        assert out.loc[i, "step_time_contended"] == pytest.approx(cont.totals.step_time, rel=1e-9)
        assert out.loc[i, "exposed_contended"] == pytest.approx(cont.totals.exposed, rel=1e-9)
        assert out.loc[i, "step_time_auto_simple"] == pytest.approx(on_simple.totals.step_time, rel=1e-9)
    # auto's base is contended (the default): never slower than it; on simple's rule, never slower than simple
    assert np.all(out["step_time"] <= out["step_time_contended"] * (1 + 1e-12))
    assert np.all(out["step_time_auto_simple"] <= out["step_time_simple"] * (1 + 1e-12))
    assert np.all(out["step_time_simple"] <= out["step_time_contended"] * (1 + 1e-12))
    assert np.all(out["step_time_contended"] <= out["step_time_none"] * (1 + 1e-12))
    assert np.all(out["exposed_none"] >= out["exposed_simple"] - 1e-15)


def test_scale_reports_exposed_comm_per_mode(tmp_path, capsys):
    import json

    from c3kit.cli.main import main

    args = ["scale", "--no-paper", "--hidden", "8192", "--layers", "32", "--seq", "8192", "--batch", "512", "--tp",
            "8", "--pp", "1", "--dp", "8", "--generations", "0,2", "--rules", "historical", "--out", str(tmp_path / "s")]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["overlap"] == "contended"  # the sweep's main mode is analyze's default
    rows = doc["by_generation"]
    assert rows and all(r["exposed_of_comm_none"] == pytest.approx(1.0) for r in rows)
    for mode in ("simple", "contended", "auto"):
        assert all(0.0 <= r[f"exposed_of_comm_{mode}"] <= 1.0 for r in rows)
    # the measured contention hides less than simple's ideal overlap
    assert all(r["exposed_of_comm_simple"] <= r["exposed_of_comm_contended"] + 1e-12 for r in rows)
    scen = pd.read_csv(tmp_path / "s" / "scenarios.csv")
    assert {f"{c}_{m}" for c in ("exposed", "step_time") for m in ("none", "simple", "contended", "auto")} \
        <= set(scen.columns)
    assert (scen["step_time"] == scen["step_time_contended"]).all()
    # step times are ordered; exposure need not be (a shorter layer hides less of the DP reduction)
    assert (scen["step_time_auto"] <= scen["step_time"] * (1 + 1e-12)).all()
    assert (scen["step_time_simple"] <= scen["step_time"] * (1 + 1e-12)).all()
    assert (scen["step_time"] <= scen["step_time_none"] * (1 + 1e-12)).all()
    # another main mode: its columns are the main ones, and a bad one is one line on stderr
    assert main([*args[:-2], "--out", str(tmp_path / "t"), "--overlap-mode", "simple", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["overlap"] == "simple"
    scen2 = pd.read_csv(tmp_path / "t" / "scenarios.csv")
    assert scen2["step_time"].to_numpy() == pytest.approx(scen["step_time_simple"].to_numpy(), rel=1e-12)
    assert main([*args[:-2], "--out", str(tmp_path / "u"), "--overlap-mode", "magic"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and not (tmp_path / "u").exists()


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 200), seed=st.integers(0, 10_000))
def test_grid_shapes_are_the_rows_np_unique_finds(n, seed):
    """The packed-integer grouping of pair shapes gives np.unique(axis=0)'s distinct grid rows and inverse."""
    from c3kit.step.fast import _grid_shapes

    rng = np.random.default_rng(seed)
    gi = rng.integers(0, 15, n)
    tp = rng.choice([1, 2, 4, 8], n)
    dims = [rng.integers(1, 1 << 20, n), rng.choice([1024, 4096, 3000, 14336], n), rng.integers(1, 70000, n)]
    grid = [np.left_shift(1, np.rint(np.log2(np.maximum(d, 1))).astype(np.int64)) for d in dims]
    want, inv = np.unique(np.column_stack([gi, tp, *grid]), axis=0, return_inverse=True)
    rows, got_inv = _grid_shapes(gi, tp, dims)
    assert rows == [tuple(r) for r in want.tolist()]
    assert np.array_equal(got_inv, inv.ravel())
