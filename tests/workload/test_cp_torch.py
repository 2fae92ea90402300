"""torch context parallelism as torchtitan runs it (Parallelism.cp_impl "torch": parallel.CP_IMPL_SOURCES)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.errors import WorkloadError
from c3kit.workload.cp_torch import backward_kernels, busiest_rank, forward_kernels, kernels, sdpa_calls
from c3kit.workload.layer import describe
from c3kit.workload.memops import MEMOP_KINDS
from c3kit.workload.model import ModelConfig
from c3kit.workload.parallel import CP_IMPLS, Parallelism

MODEL = ModelConfig(name="gqa", hidden=512, layers=2, heads=8, kv_heads=2, vocab=1000, max_seq=4096)


def _ops(par, seq=4096):
    return {o.name: o for o in describe(MODEL, par, "train", seq).ops}


def _totals(cp, rank, backward):
    e = sum(k[2] for k in kernels(cp, rank, 1.0, 0.0, backward))
    r = sum(k[2] for k in kernels(cp, rank, 0.0, 1.0, backward))
    return e, r, len(kernels(cp, rank, 1.0, 0.0, backward))


def test_sdpa_calls_load_balanced_cp2_cp4():
    assert sdpa_calls(2, 0) == ((1, 1, True), (0.5, 1, False))  # rank 0: second half of q x the whole chunk
    assert sdpa_calls(2, 1) == ((1, 1, True), (1, 0.5, False))  # rank 1: q x the received chunk's first half
    assert sdpa_calls(4, 1) == ((1, 1, True), (1, 0.5, False), (0.5, 1, False), (0.5, 1, False))


def test_forward_kernels_hand_checked():
    # cp 2, rank 1: K, V contiguous (4 + 4), block 0 cast up (2 + 4), K, V cat (8), one whole merge: cast (6),
    # out - out_b (12), sigmoid x diff (8), out - that (12); cast down (4 + 2) = 66 bytes per output element;
    # lse: lse_b - lse (12), sigmoid (8), the broadcast factor (4), lse - lse_b (12), logsigmoid (8), sub (12) = 56
    assert _totals(2, 1, False) == (66, 56, 14)
    # rank 0 merges half the rows and re-concatenates the fp32 output (8) and lse (8): 36 + 19 + 0 = 55
    assert _totals(2, 0, False) == (55, 36, 16)
    # cp 4, rank 3: three K, V cats and three whole merges: 14 + 24 + 3 x 38 + 6 = 158 (the old 79 bf16 units)
    assert _totals(4, 3, False) == (158, 168, 34)
    names = [k[0] for k in forward_kernels(2, 1, 1.0, 1.0)]
    assert names.count("kv.cat") == 1 and names[-1] == "out.to_bf16" and names.count("out-out_b") == 1


def test_backward_kernels_hand_checked():
    # cp 2, rank 1: zeros (12), K, V contiguous (8), K, V cat (8); step 0: dK, dV += (10 + 10), dK, dV cat (16),
    # dQ += (10); step 1: dK, dV half += and re-cat (5 + 8) x 2, dK, dV cat (16), dQ += (10); casts (6 + 12) = 144
    assert _totals(2, 1, True) == (144, 0, 18)
    # rank 0, step 1: dK, dV += whole (20), dQ half += and re-cat (5 + 8), its lse half made contiguous (4 per row)
    assert _totals(2, 0, True) == (141, 4, 18)
    assert _totals(4, 3, True) == (264, 0, 32)  # the old 132 bf16 units
    names = [k[0] for k in backward_kernels(4, 3, 1.0, 0.0)]
    assert names.count("dkv.cat") == 4 and names.count("kv.cat") == 3 and names.count("dq+=") == 4


@settings(max_examples=30, deadline=None)
@given(cp=st.integers(2, 16), backward=st.booleans())
def test_busiest_is_last_rank_and_bytes_grow_with_cp(cp, backward):
    assert busiest_rank(cp, backward) == cp - 1
    top = _totals(cp, cp - 1, backward)[0]
    assert all(_totals(cp, r, backward)[0] <= top for r in range(cp))
    assert _totals(cp + 1, cp, backward)[0] > top
    # load balancing: every rank runs the same attention work (causal step 0 counts half)
    work = {sum(q * kv * (0.5 if c else 1.0) for q, kv, c in sdpa_calls(cp, r)) for r in range(cp)}
    assert work == {cp / 2}


def test_torch_cp_adds_merges_and_expanded_kv():
    par = Parallelism(cp=4, dp=1, micro_batch=1, global_batch=1, recompute="full", cp_impl="torch")
    ops = _ops(par)
    out = 1 * 8 * (4096 // 4) * 64  # micro-batch x query heads x local tokens x head_dim
    rows = out / 64
    assert ops["attn.cp_merge"].shape.bytes == 158 * out + 168 * rows
    assert ops["re.attn.cp_merge"].shape.bytes == 158 * out + 168 * rows
    assert ops["re.attn.cp_merge"].role == "re_cp_merge"
    bwd = ops["attn.bwd.cp_merge"]
    assert bwd.shape.bytes == 264 * out and bwd.role == "cp_merge" and len(bwd.shape.parts) == 32
    # each kernel priced as its measured kind over the same bytes: the first is the fp32 dQ buffer's zero fill
    assert bwd.shape.parts[0] == ("copy", 4 * out / (MEMOP_KINDS["copy"][0] * 2), 1)
    assert "attn.cp_merge" in ops["proj"].deps  # the projection waits for the merged output
    kv = 2 * 1 * 8 * 1024 * 64 * 2  # K and V of every query head (repeat_kv) for one cp rank's tokens, bf16
    assert ops["attn.cp_kv"].shape.bytes == 3 * kv  # all-gathered from the 3 other ranks
    assert ops["attn.bwd.cp_kv"].shape.bytes == 3 * kv + 3 * 2 * kv  # again, and fp32 dK, dV after 3 steps
    last = ops["attn.bwd.cp_dkv_last"]
    assert last.shape.bytes == 2 * kv and last.deps == ("attn.bwd",)  # the 4th pass, after the last step
    assert "attn.bwd.cp_dkv_last" in bwd.deps  # and the casts wait for it


def test_ring_default_has_no_merges_and_kv_heads_only():
    ops = _ops(Parallelism(cp=4, micro_batch=1, global_batch=1, recompute="full"))
    assert not any(n.endswith(("cp_merge", "cp_dkv_last")) for n in ops)
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
