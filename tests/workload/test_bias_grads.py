"""Bias-gradient reductions of biased linears (workload.layer.BIAS_GRADS)."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.workload.graph import build_step
from c3kit.workload.layer import BIAS_GRAD_ROLES, BIAS_GRADS, MemShape, describe
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import Parallelism

MODEL = ModelConfig(name="tiny", hidden=256, layers=2, heads=4, vocab=1000, max_seq=128, gated_mlp=False,
                    norm="layernorm", bias=True)


def _ops(layer, role):
    return [o for o in layer.ops if o.role == role]


def test_hand_checked_shapes():
    par = Parallelism(dp=2, micro_batch=3, global_batch=12)
    layer = describe(MODEL, par, "train", 128, bias_grads=True)
    T, H = 3 * 128, 256
    got = {o.name: o for o in _ops(layer, "bias_grad")}
    assert set(got) == {"qkv.bgrad", "proj.bgrad", "fc1.bgrad", "fc2.bgrad"}
    widths = {"qkv.bgrad": 3 * H, "proj.bgrad": H, "fc1.bgrad": 4 * H, "fc2.bgrad": H}
    for name, n in widths.items():
        op = got[name]
        assert isinstance(op.shape, MemShape)
        assert op.shape.bytes == T * n * 2  # one read of the T x N bf16 output gradient
        assert op.shape.parts == (("copy", T * n / 2, 1),)
        assert op.phase == "bwd" and op.count == 2  # per micro-batch
    # each waits for what the GEMMs' backward waits for (the output gradient), like the dgrad
    by = {o.name: o for o in layer.ops}
    assert by["fc2.bgrad"].deps == by["fc2.dgrad"].deps


def test_off_without_biases_outside_training_and_by_default():
    par = Parallelism(dp=1, micro_batch=1, global_batch=1)
    assert not _ops(describe(MODEL, par, "train", 128), "bias_grad")
    assert not _ops(describe(replace(MODEL, bias=False), par, "train", 128, bias_grads=True), "bias_grad")
    assert not _ops(describe(MODEL, par, "prefill", 128, bias_grads=True), "bias_grad")


def test_tensor_parallel_local_widths():
    par = Parallelism(tp=2, micro_batch=1, global_batch=1)
    got = {o.name: o for o in _ops(describe(MODEL, par, "train", 128, bias_grads=True), "bias_grad")}
    assert got["fc1.bgrad"].shape.bytes == 128 * 4 * 256 // 2 * 2


def test_graph_carries_them():
    par = Parallelism(dp=1, micro_batch=1, global_batch=1)
    g = build_step(MODEL, par, "train", 128, bias_grads=True)
    assert [n.role for n in g.nodes].count("bias_grad") == len(BIAS_GRAD_ROLES)
    assert "https://" in BIAS_GRADS


@settings(max_examples=15, deadline=None)
@given(mb=st.integers(1, 6), gated=st.booleans())
def test_bytes_are_one_read_of_every_linear_output_gradient(mb, gated):
    m = replace(MODEL, gated_mlp=gated)
    par = Parallelism(dp=1, micro_batch=mb, global_batch=mb)
    layer = describe(m, par, "train", 128, bias_grads=True)
    T, H, F = mb * 128, 256, m.ffn_hidden
    outputs = 3 * H + H + (2 if gated else 1) * F + H
    assert sum(o.shape.bytes for o in _ops(layer, "bias_grad")) == T * outputs * 2
