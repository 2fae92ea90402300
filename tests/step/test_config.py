"""Resolving CLI-style requests into fitting layouts (c3kit.step.config)."""

import pytest

from c3kit.errors import C3kitError, MemoryFitError, WorkloadError
from c3kit.step.config import resolve


def test_default_grows_to_two_nodes_with_zero1():
    cfg = resolve()
    p = cfg.par
    assert (p.tp, p.sp, p.pp, p.dp, p.dist_optimizer, p.gpus) == (8, True, 1, 2, True, 16)
    assert cfg.memory.fits and any("2 nodes" in c for c in cfg.chosen)


def test_given_layout_is_not_changed():
    cfg = resolve(model="Llama-3-8B", gpus=8, tp=2, pp=2, seq=2048, recompute="none")
    assert (cfg.par.tp, cfg.par.pp, cfg.par.dp, cfg.par.recompute) == (2, 2, 2, "none")
    with pytest.raises(MemoryFitError):
        resolve(gpus=8, tp=8, recompute="none")


def test_inference_batches_into_one_forward():
    cfg = resolve(model="Llama-3-8B", phase="decode", batch=32, tp=8)
    assert cfg.par.micro_batch == 32 and cfg.graph.micro_batches == 1


@pytest.mark.parametrize("kw", [dict(seq=0), dict(tp=0), dict(batch=-2), dict(phase="serve"),
                                dict(recompute="half"), dict(dtype="int3"), dict(gpus=12, tp=8),
                                dict(tp=3), dict(model="nope")])
def test_bad_requests(kw):
    with pytest.raises((C3kitError, WorkloadError)):
        resolve(**kw)


def test_fsdp_over_context_parallel_ranks_alone_is_kept():
    # dp 1 x cp 8: the 8 ranks hold the same weights, so FSDP shards over them (workload.memory, Structure.dp)
    cfg = resolve(model="Llama-3-8B", hw="H100-SXM", gpus=8, tp=1, pp=1, cp=8, dp=1, fsdp=True, seq=65536,
                  batch=1, micro_batch=1, recompute="full")
    assert cfg.par.fsdp and cfg.par.dp == 1 and cfg.par.cp == 8
    plain = resolve(model="Llama-3-8B", hw="H100-SXM", gpus=8, tp=1, pp=1, cp=1, dp=8, fsdp=True, seq=8192,
                    batch=8, micro_batch=1, recompute="full")
    assert cfg.memory.weights == pytest.approx(plain.memory.weights)  # sharded 8 ways either way


def test_distributed_optimizer_over_context_parallel_ranks_alone_is_kept():
    # dp 1 x cp 8 with --dist-opt: the optimizer state shards over the 8 ranks, as FSDP does above (it was dropped)
    kw = dict(model="Llama-3-8B", hw="H100-SXM", gpus=8, tp=1, pp=1, batch=1, micro_batch=1, recompute="full",
              dist_optimizer=True)
    cfg = resolve(cp=8, dp=1, seq=65536, **kw)
    assert cfg.par.dist_optimizer and cfg.par.dp == 1 and cfg.par.cp == 8
    plain = resolve(cp=1, dp=8, seq=8192, **{**kw, "batch": 8})
    assert cfg.memory.optimizer == pytest.approx(plain.memory.optimizer)  # sharded 8 ways either way
    assert any(n.role == "dp_param_ag" and n.op.ranks == 8 for n in cfg.graph.nodes)  # its all-gather, over the 8


def test_framework_facts_reach_the_graph_and_memory():
    base = resolve(model="Llama-3-8B", hw="H100-SXM", gpus=8, tp=1, pp=1, dp=8, fsdp=True, seq=2048, batch=8,
                   micro_batch=1, recompute="none")
    cfg = resolve(model="Llama-3-8B", hw="H100-SXM", gpus=8, tp=1, pp=1, dp=8, fsdp=True, seq=2048, batch=8,
                  micro_batch=1, recompute="none", grad_dtype="bf16", loss_kernel="xentropy", train_metrics=2,
                  metrics_fp32=False)
    assert (cfg.grad_dtype, cfg.loss_kernel, cfg.metrics_fp32) == ("bf16", "xentropy", False)
    assert cfg.memory.gradients == pytest.approx(base.memory.gradients / 2)
    assert {n.op.name for n in cfg.graph.nodes} >= {"train_metrics", "loss"}
    with pytest.raises(WorkloadError, match="has no biases"):
        resolve(model="Llama-3-8B", gpus=8, tp=1, pp=1, dp=8, seq=2048, bias_grads=True)
    with pytest.raises(C3kitError, match="drop --zero2"):
        resolve(model="Llama-3-8B", gpus=8, tp=1, pp=1, dp=8, seq=2048, fsdp=True, zero2=True)
