"""The training loss's cross-entropy kernels (workload.layer.LOSS_KERNELS): eager autocast code or flash-attn's xentropy."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.errors import WorkloadError
from c3kit.workload.graph import build_step
from c3kit.workload.layer import LOSS_KERNELS, MemShape, check_loss_kernel, describe
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import Parallelism

MODEL = ModelConfig(name="tiny", hidden=256, layers=2, heads=4, vocab=1000, max_seq=128, gated_mlp=False,
                    norm="layernorm")


def _op(layer, name):
    return next(o for o in layer.ops if o.name == name)


def test_xentropy_hand_checked():
    par = Parallelism(dp=2, micro_batch=3, global_batch=12)
    layer = describe(MODEL, par, "train", 128, loss_kernel="xentropy")
    T = 3 * 128
    fwd, bwd = _op(layer, "loss"), _op(layer, "loss.bwd")
    assert isinstance(fwd.shape, MemShape) and isinstance(bwd.shape, MemShape)
    # forward: one read of the bf16 logits = a copy's bytes over half the elements
    assert fwd.shape.bytes == T * 1000 * 2
    assert fwd.shape.parts == (("copy", T * 1000 / 2, 1),)
    # backward: read the logits, write their gradient (bf16)
    assert bwd.shape.bytes == 2 * T * 1000 * 2
    assert bwd.shape.parts == (("copy", T * 1000, 1),)
    assert fwd.count == bwd.count == 2 and fwd.role == bwd.role == "loss"


def test_eager_is_the_default_and_unchanged():
    par = Parallelism(dp=1, micro_batch=1, global_batch=1)
    a, b = describe(MODEL, par, "train", 128), describe(MODEL, par, "train", 128, loss_kernel="eager")
    assert _op(a, "loss") == _op(b, "loss")
    assert _op(a, "loss").shape.parts == (("cross_entropy", 128 * 1000, 1000),)
    assert _op(a, "loss.bwd").shape.parts == (("cross_entropy.bwd", 128 * 1000, 1000),)


def test_train_metrics_stay_eager_with_a_fused_loss():
    # Composer's LanguageCrossEntropy runs torch.nn.CrossEntropyLoss whatever the model's loss_fn
    par = Parallelism(dp=1, micro_batch=1, global_batch=1)
    layer = describe(MODEL, par, "train", 128, train_metrics=2, loss_kernel="xentropy")
    assert _op(layer, "train_metrics").shape.parts == (("cross_entropy", 2 * 128 * 1000, 1000),)


def test_xentropy_loss_prices_below_the_eager_one_on_the_h200():
    from c3kit.hw import get_gpu
    from c3kit.step.project import node_times, step_timer
    from c3kit.cost.model import as_model

    par = Parallelism(dp=1, micro_batch=8, global_batch=8)
    m = ModelConfig(name="v", hidden=1024, layers=2, heads=8, vocab=50368, max_seq=2048, gated_mlp=False,
                    norm="layernorm")
    gpu = get_gpu("H200-SXM")

    def loss_s(kernel):
        g = build_step(m, par, "train", 2048, loss_kernel=kernel)
        t = node_times(g, gpu, step_timer(as_model("efficiency")))
        return sum(float(t[n.id]) for n in g.nodes if n.role == "loss")

    fused, eager = loss_s("xentropy"), loss_s("eager")
    assert 0 < fused < eager
    # at least its bytes at the H200's datasheet bandwidth: 3 x T x V x 2 B
    assert fused >= 3 * 8 * 2048 * 50368 * 2 / gpu.hbm_bw


@settings(max_examples=20, deadline=None)
@given(mb=st.integers(1, 8), seq=st.sampled_from([64, 128]))
def test_xentropy_bytes_are_three_logit_passes(mb, seq):
    par = Parallelism(dp=1, micro_batch=mb, global_batch=mb)
    layer = describe(MODEL, par, "train", seq, loss_kernel="xentropy")
    assert _op(layer, "loss").shape.bytes + _op(layer, "loss.bwd").shape.bytes == 3 * mb * seq * 1000 * 2


@pytest.mark.parametrize("bad", ["fused", "", None, 1])
def test_bad_kernels_are_rejected(bad):
    with pytest.raises(WorkloadError, match="loss kernel"):
        check_loss_kernel(bad)
    with pytest.raises(WorkloadError, match="loss kernel"):
        describe(MODEL, Parallelism(micro_batch=1, global_batch=1), "train", 128, loss_kernel=bad)


def test_every_kernel_has_a_source():
    assert all(v.startswith("https://") for v in LOSS_KERNELS.values())
