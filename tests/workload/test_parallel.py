"""Parallelism validation: every non-dividing layout is a clear WorkloadError naming the numbers."""

import pytest

from c3kit.errors import WorkloadError
from c3kit.workload.model import get_model
from c3kit.workload.parallel import Parallelism

L70 = get_model("Llama-3-70B")
MIX = get_model("Mixtral-8x7B")


def test_derived_values():
    p = Parallelism(tp=8, dp=4, pp=2, micro_batch=2, global_batch=64)
    assert p.gpus == 64
    assert p.grad_accum == 64 // (2 * 4) == 8
    assert Parallelism(dp=4, micro_batch=2).global_batch == 8
    assert Parallelism(tp=1, sp=True).sp is False  # SP without TP is a no-op


def test_valid_layouts_pass():
    assert Parallelism(tp=8).validate(L70, 8).tp == 8
    Parallelism(tp=8, dp=2, pp=4, global_batch=16).validate(L70, 64)
    Parallelism(tp=2, dp=4, ep=8).validate(MIX, 8)


def test_heads_not_divisible_by_tp():
    with pytest.raises(WorkloadError, match="28 attention heads are not divisible by tp 8"):
        Parallelism(tp=8).validate(get_model("T-NLG"))


def test_kv_heads_and_tp():
    m = get_model("Llama-3-8B").__class__(name="odd", hidden=1536, layers=2, heads=12, kv_heads=3)
    with pytest.raises(WorkloadError, match="3 KV heads and tp 4"):
        Parallelism(tp=4).validate(m)
    Parallelism(tp=12).validate(m)  # tp a multiple of kv_heads: KV heads replicated


def test_layers_not_divisible_by_pp():
    Parallelism(pp=3).validate(L70)  # uneven stages are priced as the slowest (ceil(80 / 3) = 27 layers)
    with pytest.raises(WorkloadError, match="80 layers cannot fill pp 81 stages"):
        Parallelism(pp=81).validate(L70)
    with pytest.raises(WorkloadError, match="pp 4 x vpp 3"):
        Parallelism(pp=4, vpp=3, global_batch=4).validate(L70)


def test_gpus_not_tp_pp_dp():
    with pytest.raises(WorkloadError, match=r"16 GPUs != tp 8 x pp 1 x dp 1 = 8"):
        Parallelism(tp=8).validate(L70, 16)


def test_experts_and_ep():
    with pytest.raises(WorkloadError, match="8 experts are not divisible by ep 3"):
        Parallelism(dp=3, ep=3).validate(MIX)
    with pytest.raises(WorkloadError, match=r"ep 8 must divide tp 2 x dp 2 = 4"):
        Parallelism(tp=2, dp=2, ep=8).validate(MIX)
    with pytest.raises(WorkloadError, match="dense"):
        Parallelism(dp=2, ep=2).validate(L70)


def test_batch_divisibility():
    with pytest.raises(WorkloadError, match="global batch 10 is not divisible by micro batch 2 x dp 4 = 8"):
        Parallelism(dp=4, micro_batch=2, global_batch=10)


@pytest.mark.parametrize("key", ["tp", "dp", "pp", "ep", "micro_batch", "vpp"])
@pytest.mark.parametrize("value", [0, -2])
def test_zero_negative(key, value):
    with pytest.raises(WorkloadError, match=key):
        Parallelism(**{key: value})


def test_bad_recompute_and_vpp():
    with pytest.raises(WorkloadError, match="recompute"):
        Parallelism(recompute="some")
    with pytest.raises(WorkloadError, match="vpp"):
        Parallelism(vpp=2)


def test_to_dict():
    d = Parallelism(tp=8, dp=2, global_batch=8).to_dict()
    assert d["tp"] == 8 and d["gpus"] == 16 and d["grad_accum"] == 4
