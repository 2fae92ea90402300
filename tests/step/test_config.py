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
