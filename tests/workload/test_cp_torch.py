"""torch context parallelism as torchtitan runs it (Parallelism.cp_impl "torch": parallel.CP_IMPL_SOURCES)."""

import numpy as np
import pytest

from c3kit.errors import WorkloadError
from c3kit.workload.layer import describe
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import CP_IMPLS, Parallelism, cp_merge_units

MODEL = ModelConfig(name="gqa", hidden=512, layers=2, heads=8, kv_heads=2, vocab=1000, max_seq=4096)


def _ops(par, seq=4096):
    return {o.name: o for o in describe(MODEL, par, "train", seq).ops}


def test_merge_units_hand_checked():
    assert cp_merge_units(2, False) == 10 + 23  # one merged step
    assert cp_merge_units(4, False) == 10 + 3 * 23
    assert cp_merge_units(2, True) == 29 + 17 + 26
    assert cp_merge_units(4, True) == 29 + 3 * 17 + 4 * 13
    np.testing.assert_array_equal(cp_merge_units(np.array([2, 4]), True), [72, 132])


def test_torch_cp_adds_merges_and_expanded_kv():
    par = Parallelism(cp=4, dp=1, micro_batch=1, global_batch=1, recompute="full", cp_impl="torch")
    ops = _ops(par)
    out = 1 * 8 * (4096 // 4) * 64  # micro-batch x query heads x local tokens x head_dim
    assert ops["attn.cp_merge"].shape.bytes == 79 * out * 2
    assert ops["re.attn.cp_merge"].shape.bytes == 79 * out * 2 and ops["re.attn.cp_merge"].role == "re_cp_merge"
    assert ops["attn.bwd.cp_merge"].shape.bytes == 132 * out * 2 and ops["attn.bwd.cp_merge"].role == "cp_merge"
    assert ops["attn.bwd.cp_merge"].shape.parts == (("copy", 66 * out, 1),)
    assert "attn.cp_merge" in ops["proj"].deps  # the projection waits for the merged output
    kv = 2 * 1 * 8 * 1024 * 64 * 2  # K and V of every query head (repeat_kv) for one cp rank's tokens, bf16
    assert ops["attn.cp_kv"].shape.bytes == 3 * kv  # all-gathered from the 3 other ranks
    assert ops["attn.bwd.cp_kv"].shape.bytes == 3 * kv + 4 * 2 * kv  # again, and fp32 dK, dV on each of 4 steps


def test_ring_default_has_no_merges_and_kv_heads_only():
    ops = _ops(Parallelism(cp=4, micro_batch=1, global_batch=1, recompute="full"))
    assert not any(n.endswith("cp_merge") for n in ops)
    assert ops["attn.cp_kv"].shape.bytes == 3 * 2 * 1 * 2 * 1024 * 64 * 2  # kv heads only
    assert ops["attn.bwd.cp_kv"].shape.bytes == 2 * 3 * 2 * 1 * 2 * 1024 * 64 * 2


def test_torch_impl_without_cp_changes_nothing():
    a = _ops(Parallelism(micro_batch=1, global_batch=1, cp_impl="torch"))
    b = _ops(Parallelism(micro_batch=1, global_batch=1))
    assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)


@pytest.mark.parametrize("bad", ["allgather", "", "TORCH"])
def test_bad_impl_is_rejected(bad):
    with pytest.raises(WorkloadError, match="cp_impl"):
        Parallelism(cp=2, cp_impl=bad)
    assert "torch" in CP_IMPLS and "ring" in CP_IMPLS
