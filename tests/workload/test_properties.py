"""Hypothesis properties of the step graph and memory model."""

from hypothesis import given, strategies as st

from c3kit.workload.graph import build_step
from c3kit.workload.memory import memory_report
from c3kit.workload.model import ModelConfig
from c3kit.workload.ops import Gemm
from c3kit.workload.parallel import Parallelism


@st.composite
def models(draw):
    heads = draw(st.sampled_from([8, 16, 32, 64]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4, 8, heads) if heads % h == 0]))
    head_dim = draw(st.sampled_from([64, 128]))
    experts = draw(st.sampled_from([1, 1, 8]))
    return ModelConfig(
        name="h", hidden=heads * head_dim, layers=draw(st.sampled_from([8, 16, 24])), heads=heads, kv_heads=kv,
        ffn_hidden=draw(st.sampled_from([2048, 4096, 8192])), vocab=draw(st.sampled_from([32000, 51200])),
        gated_mlp=draw(st.booleans()), n_experts=experts, top_k=2 if experts > 1 else 1,
        dropout=draw(st.booleans()), max_seq=4096)


TP = st.sampled_from([1, 2, 4, 8])
SEQ = st.sampled_from([512, 2048, 4096])


@given(models(), SEQ, st.sampled_from(["train", "prefill", "decode"]), st.integers(1, 4))
def test_tp1_has_no_tp_collectives(m, seq, phase, dp):
    g = build_step(m, Parallelism(tp=1, dp=dp, sp=True), phase, seq=seq)
    assert not [n for n in g.nodes if n.stream == "tp" or getattr(n.op, "group", "") == "tp"]


@given(models(), SEQ, st.sampled_from(["train", "prefill", "decode"]), st.booleans())
def test_flops_per_gpu_fall_as_tp_grows(m, seq, phase, sp):
    prev_gemm = prev_total = None
    for tp in (1, 2, 4, 8):
        g = build_step(m, Parallelism(tp=tp, sp=sp), phase, seq=seq)
        gemm = sum(n.op.flops * g.repeats(n) for n in g.nodes if isinstance(n.op, Gemm))
        total = g.total_flops()
        if prev_gemm is not None:
            assert gemm < prev_gemm and total < prev_total
        prev_gemm, prev_total = gemm, total


@given(models(), SEQ, st.sampled_from(["train", "prefill", "decode"]), TP, st.integers(1, 8))
def test_everything_positive(m, seq, phase, tp, mb):
    g = build_step(m, Parallelism(tp=tp, micro_batch=mb, dp=2, global_batch=4 * mb), phase, seq=seq)
    for n in g.nodes:
        assert g.repeats(n) >= 1
        assert n.op.bytes > 0
        assert n.op.flops >= 0
    assert g.total_flops() > 0


def _total(m, seq, **kw):
    return memory_report(m, 1e15, par=Parallelism(**kw), seq=seq).total


@given(models(), SEQ, st.booleans(), st.sampled_from(["none", "selective", "full"]))
def test_memory_falls_with_more_tp_pp_fsdp(m, seq, sp, rc):
    base = dict(sp=sp, recompute=rc, global_batch=16)
    mems = [_total(m, seq, tp=tp, **base) for tp in (1, 2, 4, 8)]
    assert all(a >= b for a, b in zip(mems, mems[1:]))
    mems = [_total(m, seq, tp=2, pp=pp, **base) for pp in (1, 2, 4, 8)]
    assert all(a >= b for a, b in zip(mems, mems[1:]))
    plain = _total(m, seq, tp=2, dp=4, **base)
    assert _total(m, seq, tp=2, dp=4, fsdp=True, **base) < plain
    assert _total(m, seq, tp=2, dp=4, dist_optimizer=True, **base) < plain


@given(models(), SEQ, TP, st.booleans(), st.booleans())
def test_recompute_lowers_activation_memory(m, seq, tp, sp, flash):
    acts = [memory_report(m, 1e15, par=Parallelism(tp=tp, sp=sp, recompute=rc), seq=seq,
                          flash_attention=flash).activations for rc in ("none", "selective", "full")]
    assert acts[0] >= acts[1] > acts[2]
    if not flash:
        assert acts[0] > acts[1]


@given(models(), SEQ, TP)
def test_recompute_adds_flops_not_comm_volume_of_dp(m, seq, tp):
    g0 = build_step(m, Parallelism(tp=tp, dp=2), "train", seq=seq)
    g1 = build_step(m, Parallelism(tp=tp, dp=2, recompute="full"), "train", seq=seq)
    assert g1.total_flops() > g0.total_flops()
    assert g1.total_comm_bytes("dp") == g0.total_comm_bytes("dp")
    assert g1.total_comm_bytes("tp") >= g0.total_comm_bytes("tp")
