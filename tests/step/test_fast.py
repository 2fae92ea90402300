"""The vectorized sweep agrees with the per-node step projection to 1e-9 on random scenarios."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.cost import CostModel
from c3kit.errors import C3kitError
from c3kit.hw import get_gpu
from c3kit.step import project
from c3kit.step.fast import OUT_COLUMNS, model_columns, par_columns, project_many, scenario_objects
from c3kit.step.project import step_timer
from c3kit.workload.graph import build_step
from c3kit.workload.model import get_model
from c3kit.workload.parallel import Parallelism

GPUS = {n: get_gpu(n) for n in ("H200-SXM", "A100-SXM-80G", "MI300X", "B200")}


def random_scenarios(seed: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    while len(rows) < n:
        heads = int(rng.choice([8, 16, 32]))
        hd = int(rng.choice([64, 128]))
        tp = int(rng.choice([1, 2, 4, 8, 16]))
        layers = int(rng.choice([4, 8, 12]))
        pp = int(rng.choice([1, 2, 4]))
        ffn = int(rng.choice([3, 4])) * heads * hd
        if heads % tp or layers % pp or ffn % tp:
            continue
        dp, mb, acc = int(rng.choice([1, 2, 4, 16])), int(rng.choice([1, 2])), int(rng.choice([1, 2, 5]))
        kv = int(rng.choice([k for k in (1, 2, 4, heads) if heads % k == 0]))
        rows.append(dict(
            hidden=heads * hd, layers=layers, heads=heads, kv_heads=kv, ffn_hidden=ffn,
            vocab=int(rng.choice([51200, 50257, 32000])), gated_mlp=bool(rng.integers(2)),
            layernorm=bool(rng.integers(2)), tied_embeddings=bool(rng.integers(2)),
            seq=int(rng.choice([128, 512, 2048])), micro_batch=mb, global_batch=mb * dp * acc, tp=tp,
            sp=bool(rng.integers(2)), dp=dp, pp=pp, fsdp=bool(rng.integers(2)),
            dist_optimizer=bool(rng.integers(2)), recompute=int(rng.integers(3)),
            gpu=list(GPUS)[int(rng.integers(len(GPUS)))]))
    return pd.DataFrame(rows)


@pytest.mark.parametrize("cost_model,seed", [(None, 0), ("efficiency", 1),
                                             (CostModel(kind="efficiency", power="sustained"), 2)])
def test_agrees_with_per_node_projection(cost_model, seed):
    df = random_scenarios(seed, 60)
    fast = project_many(df, GPUS, cost_model)
    timer = step_timer(cost_model)
    for i, row in df.iterrows():
        model, par = scenario_objects(row)
        gpu = GPUS[row["gpu"]]
        t = project(build_step(model, par, "train", int(row["seq"]), "bf16", gpu.gpus_per_node), gpu, timer=timer).totals
        for k in ("compute", "comm", "exposed", "hidden", "bubble", "step_time", "comm_share", "mfu", "tokens_per_s"):
            col = "hidden_comm" if k == "hidden" else k
            want, got = getattr(t, k), fast.loc[i, col]
            assert got == pytest.approx(want, rel=1e-9, abs=1e-15), (i, k)


def test_columns_from_objects_and_bad_input():
    m = get_model("Llama-3-8B")
    par = Parallelism(tp=8, sp=True, dp=2, micro_batch=1, global_batch=8, recompute="selective")
    row = {**model_columns(m), **par_columns(par, 4096), "gpu": "H200-SXM"}
    out = project_many(pd.DataFrame([row]), GPUS)
    assert list(out.columns) == list(OUT_COLUMNS)
    ref = project(build_step(m, par, "train", 4096), GPUS["H200-SXM"]).totals
    assert out.loc[0, "step_time"] == pytest.approx(ref.step_time, rel=1e-9)
    with pytest.raises(C3kitError):
        project_many(pd.DataFrame([{k: v for k, v in row.items() if k != "tp"}]), GPUS)
    with pytest.raises(C3kitError):
        project_many(pd.DataFrame([{**row, "gpu": "nope"}]), GPUS)


def test_invalid_rows_are_rejected():
    df = random_scenarios(3, 5)
    df.loc[2, "global_batch"] = df.loc[2, "micro_batch"] * df.loc[2, "dp"] + 1 if df.loc[2, "dp"] > 1 else 0
    with pytest.raises(C3kitError):
        project_many(df, GPUS)


def test_uneven_stages_agree_with_per_node_projection():
    # layers that do not divide by pp: the fullest rank (ceil) and the bubble over the other ranks' layers
    df = random_scenarios(3, 12)
    df["layers"] = [9, 10, 13, 7] * 3
    df["pp"] = [2, 4, 4, 2] * 3
    fast = project_many(df, GPUS, "efficiency")
    timer = step_timer("efficiency")
    for i, row in df.iterrows():
        model, par = scenario_objects(row)
        gpu = GPUS[row["gpu"]]
        t = project(build_step(model, par, "train", int(row["seq"]), "bf16", gpu.gpus_per_node), gpu, timer=timer).totals
        for k in ("bubble", "step_time"):
            assert fast.loc[i, k] == pytest.approx(getattr(t, k), rel=1e-9, abs=1e-15), (i, k)
    assert (fast["bubble"] > 0).all()


def test_fsdp_once_per_step_agrees_with_per_node_projection():
    # Parallelism.fsdp_sync "step" (torchtitan with PP): the optional fsdp_sync column, mixed in one table
    df = random_scenarios(5, 40)
    df["fsdp"] = True
    df["fsdp_sync"] = np.random.default_rng(1).integers(0, 2, len(df))
    fast = project_many(df, GPUS, "efficiency")
    timer = step_timer("efficiency")
    steps = 0
    for i, row in df.iterrows():
        model, par = scenario_objects(row)
        assert par.fsdp_sync == ("step" if row["fsdp_sync"] else "micro")
        steps += par.fsdp_sync == "step" and par.dp > 1 and par.grad_accum > 1
        gpu = GPUS[row["gpu"]]
        t = project(build_step(model, par, "train", int(row["seq"]), "bf16", gpu.gpus_per_node), gpu, timer=timer).totals
        for k in ("compute", "comm", "exposed", "bubble", "step_time"):
            assert fast.loc[i, k] == pytest.approx(getattr(t, k), rel=1e-9, abs=1e-15), (i, k)
    assert steps >= 5
    # the column from objects, and a bad code
    par = Parallelism(tp=2, dp=4, pp=2, fsdp=True, micro_batch=1, global_batch=32, fsdp_sync="step")
    assert par_columns(par, 2048)["fsdp_sync"] == 1
    bad = df.copy()
    bad.loc[3, "fsdp_sync"] = 2
    with pytest.raises(C3kitError, match="fsdp_sync"):
        project_many(bad, GPUS)


def test_recompute_modes_agree_with_per_node_projection():
    # torchtitan's selective AC: recompute codes 3 ("op") and 4 ("layer", every recompute_every-th layer)
    df = random_scenarios(6, 30)
    rng = np.random.default_rng(2)
    df["recompute"] = rng.integers(0, 5, len(df))
    df["recompute_every"] = rng.choice([1, 2, 3], len(df))
    fast = project_many(df, GPUS, "efficiency")
    timer = step_timer("efficiency")
    for i, row in df.iterrows():
        model, par = scenario_objects(row)
        gpu = GPUS[row["gpu"]]
        t = project(build_step(model, par, "train", int(row["seq"]), "bf16", gpu.gpus_per_node), gpu, timer=timer).totals
        for k in ("compute", "exposed", "step_time"):
            assert fast.loc[i, k] == pytest.approx(getattr(t, k), rel=1e-9, abs=1e-15), (i, k)
    assert {3, 4} <= set(df["recompute"])
    bad = df.copy()
    bad.loc[0, "recompute_every"] = 0
    with pytest.raises(C3kitError, match="recompute_every"):
        project_many(bad, GPUS)


def test_contended_agrees_with_per_node_projection():
    """The default mode (contended) as the sweep's main policy and as a compared one, beside the per-node path."""
    from c3kit.step.policy import DEFAULT_MODE, SimpleOverlap, policy_for

    df = random_scenarios(7, 40)
    pol = policy_for(DEFAULT_MODE)
    fast = project_many(df, GPUS, "efficiency", policy=pol, compare={"simple": SimpleOverlap(), "contended": pol})
    timer = step_timer("efficiency")
    for i, row in df.iterrows():
        model, par = scenario_objects(row)
        gpu = GPUS[row["gpu"]]
        t = project(build_step(model, par, "train", int(row["seq"]), "bf16", gpu.gpus_per_node), gpu, policy=pol,
                    timer=timer).totals
        for k in ("exposed", "step_time"):
            assert fast.loc[i, k] == pytest.approx(getattr(t, k), rel=1e-9, abs=1e-15), (i, k)
            assert fast.loc[i, f"{k}_contended"] == fast.loc[i, k]
    # contended charges the independent pairs that simple hides fully, never more than serial
    assert (fast["step_time_simple"] <= fast["step_time"] * (1 + 1e-12)).all()
    assert (fast["exposed"] > fast["exposed_simple"] * (1 + 1e-9)).any()


@pytest.mark.parametrize("enabled", [True, False])
def test_sweep_pauses_the_cycle_collector_and_restores_it(enabled, monkeypatch):
    """project_many runs with the cyclic collector off, and leaves it as it found it, also when it raises."""
    import gc

    import c3kit.step.fast as fast

    seen = []
    inner = fast._group_times

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return inner(*args, **kwargs)

    monkeypatch.setattr(fast, "_group_times", spy)
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        project_many(random_scenarios(4, 3), GPUS)
        assert seen and not any(seen)
        assert gc.isenabled() == enabled
        with pytest.raises(C3kitError):
            project_many(random_scenarios(4, 3).assign(gpu="nope"), GPUS)
        assert gc.isenabled() == enabled
    finally:
        gc.enable() if was else gc.disable()


def test_distinct_rows_hand_checked():
    """_distinct_rows: first row of each distinct row and each row's number, in order of first appearance."""
    from c3kit.step.fast import _distinct_rows

    g = np.array([0, 1, 0, 0, 1])
    m = np.array([8.0, 8.0, 8.0, 16.0, 8.0])
    first, inv = _distinct_rows([g, m])
    assert first.tolist() == [0, 1, 3]
    assert inv.tolist() == [0, 1, 0, 2, 1]
    first, inv = _distinct_rows([np.array([], dtype=np.int64), np.array([])])
    assert first.size == 0 and inv.size == 0


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([1.0, 2.0, 2.5, 1e9])), min_size=1, max_size=40))
@settings(max_examples=60, deadline=None)
def test_distinct_rows_property(rows):
    """Rows with one number are equal, the numbered first rows are pairwise distinct, and each maps to itself."""
    from c3kit.step.fast import _distinct_rows

    cols = [np.array([r[0] for r in rows]), np.array([r[1] for r in rows])]
    first, inv = _distinct_rows(cols)
    keys = list(zip(*(c.tolist() for c in cols)))
    assert len({keys[i] for i in first}) == len(first) == len(set(keys))
    assert all(keys[first[inv[i]]] == keys[i] for i in range(len(keys)))
    assert all(inv[f] == j for j, f in enumerate(first))


def test_calibrated_op_memo_keys_tell_shapes_apart():
    """_shape_key: equal for equal field values (arrays by value), different when any value, dtype or length differs."""
    from c3kit.step.fast import _shape_key
    from c3kit.workload.layer import MemShape

    a = MemShape(np.array([4.0, 8.0]), 0, (("copy", np.array([2.0, 4.0]), 1024),))
    assert _shape_key(a) == _shape_key(MemShape(np.array([4.0, 8.0]), 0, (("copy", np.array([2.0, 4.0]), 1024),)))
    assert _shape_key(a) != _shape_key(MemShape(np.array([4.0, 8.0]), 0, (("copy", np.array([2.0, 5.0]), 1024),)))
    assert _shape_key(a) != _shape_key(MemShape(np.array([4.0, 8.0]), 0, (("copy", np.array([2, 4]), 1024),)))
    assert _shape_key(a) != _shape_key(MemShape(np.array([4.0, 8.0]), 0, (("add", np.array([2.0, 4.0]), 1024),)))
    assert _shape_key(a) != _shape_key(MemShape(np.array([4.0]), 0, (("copy", np.array([2.0, 4.0]), 1024),)))
