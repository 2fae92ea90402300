"""The vectorized sweep prices the backward's glue and gradient accumulation exactly as the per-node path."""

import pytest

from c3kit.errors import C3kitError
from c3kit.step.fast import project_many, scenario_objects
from c3kit.step.project import project, step_timer
from c3kit.workload.graph import build_step

from .test_fast import GPUS, random_scenarios


@pytest.mark.parametrize("glue,grad_acc", [("fused", ""), ("separate", ""), ("split", "every"), ("split", "none")])
def test_glue_agrees_with_per_node_projection(glue, grad_acc):
    df = random_scenarios(3, 24)
    fast = project_many(df, GPUS, "efficiency", glue=glue, grad_acc=grad_acc)
    timer = step_timer("efficiency")
    for i, row in df.iterrows():
        model, par = scenario_objects(row)
        gpu = GPUS[row["gpu"]]
        g = build_step(model, par, "train", int(row["seq"]), "bf16", gpu.gpus_per_node, glue=glue, grad_acc=grad_acc)
        t = project(g, gpu, timer=timer).totals
        for k in ("compute", "exposed", "step_time"):
            assert fast.loc[i, k] == pytest.approx(getattr(t, k), rel=1e-9, abs=1e-15), (i, k)


def test_glue_changes_the_sweep_and_bad_names_fail():
    df = random_scenarios(4, 12)
    fused = project_many(df, GPUS, "efficiency", glue="fused")
    split = project_many(df, GPUS, "efficiency", glue="split", grad_acc="every")
    assert (split["compute"] > fused["compute"]).all()
    with pytest.raises(C3kitError, match="unknown glue"):
        project_many(df, GPUS, glue="cat")
