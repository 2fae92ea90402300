"""A forward pass runs its norms and residual adds on cold operands (memops.COLD_KINDS); backward kinds stay."""

import pytest

from c3kit.workload.graph import build_step
from c3kit.workload.memops import COLD_KINDS, MEMOP_KINDS
from c3kit.workload.model import get_model
from c3kit.workload.parallel import Parallelism


def _norm_parts(phase: str, ph: str = "fwd") -> list[str]:
    g = build_step(get_model("llama-3-8b"), Parallelism(tp=2, micro_batch=4), phase, 4096)
    return [k for n in g.nodes if n.role == "norm" and n.phase == ph for (k, _, _) in n.op.parts]


@pytest.mark.parametrize("phase", ["decode", "prefill", "train"])
def test_forward_norms_and_adds_take_the_cold_kinds(phase):
    assert set(_norm_parts(phase)) == {"rmsnorm_cold", "residual_add_cold"}


@pytest.mark.parametrize("phase", ["decode", "prefill", "train"])
def test_forward_rope_and_chunked_swiglu_take_the_after_stream_kinds(phase):
    g = build_step(get_model("llama-3-8b"), Parallelism(tp=2, micro_batch=4), phase, 4096)
    kinds = {k for n in g.nodes if n.role in ("rope", "act") and n.phase == "fwd" for (k, _, _) in n.op.parts}
    assert kinds == {"rope_cold", "swiglu_chunked_cold"}
    bwd = {k for n in g.nodes if n.role in ("rope", "act") and n.phase == "bwd" for (k, _, _) in n.op.parts}
    assert phase != "train" or bwd == {"rope.bwd", "swiglu_chunked.bwd"}


def test_backward_keeps_the_warm_kinds():
    kinds = set(_norm_parts("train", "bwd"))
    assert "rmsnorm.bwd" in kinds and not any("cold" in k for k in kinds)


def test_cold_kinds_move_the_same_bytes_as_their_warm_kernels():
    for warm, cold in COLD_KINDS.items():
        assert MEMOP_KINDS[cold] == MEMOP_KINDS[warm]


def test_decode_norm_bytes_unchanged_by_the_cold_kind():
    g = build_step(get_model("llama-3-8b"), Parallelism(tp=2, micro_batch=4), "decode", 4096)
    norms = [n.op for n in g.nodes if n.role == "norm" and n.scope == "layer"]
    # residual add + RMSNorm of a 4 x 4096 bf16 activation: 4 element passes x 2 B
    assert norms and all(op.bytes == 4 * 4 * 4096 * 2 for op in norms)
