"""FSDP1's concatenation of each unit's gradients into its flat gradient (workload.layer.FLAT_PARAM_GRADS)."""

from c3kit.workload.layer import describe
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import Parallelism

MODEL = ModelConfig(name="tiny", hidden=256, layers=2, heads=4, vocab=1000, max_seq=128, gated_mlp=False,
                    norm="layernorm", bias=False)


def _ops(par, **kw):
    return {o.name: o for o in describe(MODEL, par, "train", 128, **kw).ops}


def test_one_copy_of_the_layers_gradients_per_micro_batch():
    par = Parallelism(dp=4, fsdp=True, micro_batch=1, global_batch=8)  # 2 micro-batches per rank
    ops = _ops(par, flat_param_grads=True)
    cat = ops["layer.grad_cat"]
    params = 4 * 256 * 256 + 2 * 256 * 1024 + 4 * 256  # QKV, proj, FC1, FC2 and two LayerNorms (weight, bias)
    assert cat.shape.parts == (("copy", params, 1),)
    assert cat.shape.bytes == 2 * params * 2  # read and write, bf16
    assert cat.count == 2 and cat.role == "fsdp_grad_cat"
    assert "layer.grad_cat" in ops["layer.fsdp_rs"].deps  # the reduce-scatter takes the flat gradient


def test_absent_without_fsdp_or_the_option():
    assert "layer.grad_cat" not in _ops(Parallelism(dp=4, fsdp=True, micro_batch=1, global_batch=4))
    assert "layer.grad_cat" not in _ops(Parallelism(dp=4, micro_batch=1, global_batch=4), flat_param_grads=True)
    par = Parallelism(dp=4, fsdp=True, micro_batch=1, global_batch=4)
    assert not any(o.name == "layer.grad_cat" for o in describe(MODEL, par, "prefill", 128, flat_param_grads=True).ops)
