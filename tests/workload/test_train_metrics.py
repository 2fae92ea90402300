"""Training-metric cross-entropy passes a framework runs after each micro-batch (workload.layer.check_train_metrics)."""

import pytest

from c3kit.errors import WorkloadError
from c3kit.workload.graph import build_step
from c3kit.workload.layer import MemShape, check_train_metrics, describe
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import Parallelism

MODEL = ModelConfig(name="tiny", hidden=256, layers=2, heads=4, vocab=1000, max_seq=128, gated_mlp=False,
                    norm="layernorm")


def _op(layer, name):
    hits = [o for o in layer.ops if o.name == name]
    return hits[0] if hits else None


def test_two_passes_hand_checked():
    par = Parallelism(dp=2, micro_batch=3, global_batch=12)  # 2 micro-batches per DP rank
    layer = describe(MODEL, par, "train", 128, train_metrics=2)
    op = _op(layer, "train_metrics")
    T = 3 * 128  # tokens per micro-batch
    assert isinstance(op.shape, MemShape)
    assert op.shape.parts == (("cross_entropy", 2 * T * 1000, 1000),)
    assert op.shape.bytes == 2 * 3 * T * 1000 * 4  # the loss forward's bytes, twice
    assert op.count == 2 and op.role == "train_metrics" and op.deps == ("loss.bwd",)
    loss = _op(layer, "loss")
    assert op.shape.bytes == 2 * loss.shape.bytes and op.shape.flops == 2 * loss.shape.flops


def test_absent_by_default_and_outside_training():
    par = Parallelism(dp=1, micro_batch=1, global_batch=1)
    assert _op(describe(MODEL, par, "train", 128), "train_metrics") is None
    assert _op(describe(MODEL, par, "prefill", 128, train_metrics=2), "train_metrics") is None


def test_tensor_parallel_vocab_shard():
    par = Parallelism(tp=2, micro_batch=1, global_batch=1)
    op = _op(describe(MODEL, par, "train", 128, train_metrics=1), "train_metrics")
    assert op.shape.parts == (("cross_entropy", 128 * 500, 500),)


def test_graph_carries_the_op():
    par = Parallelism(dp=1, micro_batch=1, global_batch=1)
    g = build_step(MODEL, par, "train", 128, train_metrics=2)
    assert [n.role for n in g.nodes].count("train_metrics") == 1
    assert [n.role for n in build_step(MODEL, par, "train", 128).nodes].count("train_metrics") == 0


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", None])
def test_bad_counts_are_rejected(bad):
    with pytest.raises(WorkloadError, match="train_metrics"):
        check_train_metrics(bad)
    with pytest.raises(WorkloadError, match="train_metrics"):
        describe(MODEL, Parallelism(micro_batch=1, global_batch=1), "train", 128, train_metrics=bad)


def test_bf16_metrics_outside_autocast_hand_checked():
    from c3kit.workload.layer import METRICS_BF16

    par = Parallelism(dp=2, micro_batch=3, global_batch=12)
    op = _op(describe(MODEL, par, "train", 128, train_metrics=2, metrics_fp32=False), "train_metrics")
    T = 3 * 128
    assert op.shape.parts == (("copy", 2 * T * 1000, 1),)  # log_softmax: read and write T x V bf16, twice
    assert op.shape.bytes == 2 * 2 * T * 1000 * 2
    assert op.count == 2 and op.deps == ("loss.bwd",)
    fp32 = _op(describe(MODEL, par, "train", 128, train_metrics=2), "train_metrics")
    assert op.shape.bytes < fp32.shape.bytes and op.shape.flops == fp32.shape.flops
    assert METRICS_BF16.startswith("https://")


def test_bf16_metrics_price_below_the_autocast_ones_on_the_h200():
    from c3kit.cost.model import as_model
    from c3kit.hw import get_gpu
    from c3kit.step.project import node_times, step_timer

    m = ModelConfig(name="v", hidden=1024, layers=2, heads=8, vocab=50368, max_seq=2048, gated_mlp=False,
                    norm="layernorm")
    par = Parallelism(dp=1, micro_batch=8, global_batch=8)
    gpu = get_gpu("H200-SXM")

    def metrics_s(fp32):
        g = build_step(m, par, "train", 2048, train_metrics=2, metrics_fp32=fp32)
        t = node_times(g, gpu, step_timer(as_model("efficiency")))
        return sum(float(t[n.id]) for n in g.nodes if n.role == "train_metrics")

    assert 0 < metrics_s(False) < metrics_s(True)
