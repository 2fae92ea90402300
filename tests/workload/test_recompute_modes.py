"""torchtitan's selective activation checkpointing as recompute modes "op" and "layer" (parallel.RECOMPUTE_SOURCES)."""

from dataclasses import replace

import pytest

from c3kit.errors import WorkloadError
from c3kit.hw import get_gpu
from c3kit.step import project
from c3kit.workload.graph import build_step
from c3kit.workload.layer import describe, flops_bytes
from c3kit.workload.memory import layer_activation_bytes, memory_report
from c3kit.workload.model import get_model
from c3kit.workload.parallel import RECOMPUTE, RECOMPUTE_SOURCES, Parallelism

M = get_model("Llama-3-8B")  # 4096 hidden, 32 heads of 128, 8 KV heads, FFN 14336, gated
PAR = Parallelism(dp=8, fsdp=True, micro_batch=1, global_batch=16, recompute="op")


def _re(layer) -> dict:
    return {o.name: o for o in layer.ops if o.name.startswith("re.")}


def test_every_mode_has_a_source():
    assert set(RECOMPUTE_SOURCES) == set(RECOMPUTE) >= {"op", "layer"}
    with pytest.raises(WorkloadError, match="recompute_every"):
        Parallelism(recompute="layer", recompute_every=0)


def test_op_policy_recomputes_wk_wo_w3_hand_checked():
    re = _re(describe(M, PAR, seq=8192, attn_backend="flash2"))
    assert set(re) == {"re.attn_norm", "re.qkv", "re.rope", "re.proj", "re.mlp_norm", "re.fc1", "re.act"}
    T = 8192
    assert (re["re.qkv"].shape.m, re["re.qkv"].shape.n, re["re.qkv"].shape.k) == (T, 8 * 128, 4096)  # wk
    assert (re["re.proj"].shape.m, re["re.proj"].shape.n, re["re.proj"].shape.k) == (T, 4096, 4096)  # wo
    assert (re["re.fc1"].shape.m, re["re.fc1"].shape.n, re["re.fc1"].shape.k) == (T, 14336, 4096)  # w3
    assert all(o.phase == "bwd" and o.count == 2 for o in re.values())  # 2 micro-batches per step
    # cuDNN attention is not on the save list: recomputed; flash and memory-efficient SDPA are saved
    assert "re.attn" in _re(describe(M, PAR, seq=8192, attn_backend="cudnn"))
    assert "re.attn" not in _re(describe(M, PAR, seq=8192, attn_backend="efficient"))


def test_op_policy_with_fp8_linears_recomputes_every_projection_but_w2():
    re = _re(describe(M, PAR, seq=8192, dtype="fp8", attn_backend="flash2"))
    assert re["re.qkv"].shape.n == (32 + 2 * 8) * 128 and re["re.fc1"].shape.n == 2 * 14336
    assert "re.fc2" not in re
    with pytest.raises(WorkloadError, match="dense"):
        describe(get_model("Mixtral-8x7B"), replace(PAR, fsdp=False, dp=1, global_batch=2))


def test_layer_policy_is_a_share_of_full_recompute():
    full = _re(describe(M, replace(PAR, recompute="full"), seq=8192))
    for every in (1, 2, 4):
        re = _re(describe(M, replace(PAR, recompute="layer", recompute_every=every), seq=8192))
        assert set(re) == set(full)
        for name, o in re.items():
            assert o.count == pytest.approx(full[name].count / every)
            assert flops_bytes(o, 2) == flops_bytes(full[name], 2)


def test_step_times_order():
    gpu = get_gpu("H200-SXM")
    t = {rc: project(build_step(M, replace(PAR, recompute=rc), "train", 8192), gpu).totals.compute
         for rc in ("none", "op", "layer", "full")}
    assert t["none"] < t["op"] < t["full"] and t["none"] < t["layer"] < t["full"]
    half = (t["none"] + t["full"]) / 2  # every second layer recomputed: half of full recompute's extra work
    assert t["layer"] == pytest.approx(half, rel=1e-9)


def test_op_policy_memory_hand_checked():
    T, H, b = 8192, 4096, 2
    kept = (T * H * b  # block input
            + T * 4096 * b + 4 * 32 * T  # SDPA output and its fp32 log-sum-exp
            + T * (4096 + 1024) * b  # wq, wv
            + T * 14336 * b  # w1
            + T * H * b)  # w2
    assert layer_activation_bytes(M, PAR, 8192) == kept
    fp8 = layer_activation_bytes(M, PAR, 8192, dtype="fp8")
    assert fp8 == T * H + T * 4096 + 4 * 32 * T  # FP8 linears: no aten.mm output kept (1-byte activations here)
    lay = replace(PAR, recompute="layer", recompute_every=4)
    full = layer_activation_bytes(M, lay, 8192, recompute="full")
    none = layer_activation_bytes(M, lay, 8192, recompute="none")
    assert layer_activation_bytes(M, lay, 8192) == pytest.approx((full + 3 * none) / 4)
    gpu = get_gpu("H200-SXM")
    mems = [memory_report(M, gpu, par=replace(PAR, recompute=rc), seq=8192).activations
            for rc in ("full", "op", "none")]
    assert mems[0] < mems[1] < mems[2]


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=30, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), sp=st.booleans(), seq=st.sampled_from([1024, 4096]),
       dtype=st.sampled_from(["bf16", "fp8"]), every=st.sampled_from([1, 2, 3, 8]),
       backend=st.sampled_from(["flash2", "cudnn"]))
def test_property_recompute_work_is_ordered(tp, sp, seq, dtype, every, backend):
    par = Parallelism(tp=tp, sp=sp, dp=2, micro_batch=1, global_batch=4)

    def extra(rc: str, **kw) -> float:  # FLOPs per step of the recomputed ops
        layer = describe(M, replace(par, recompute=rc, **kw), seq=seq, dtype=dtype, attn_backend=backend)
        return sum(flops_bytes(o, 2)[0] * o.count for o in layer.ops
                   if o.name.startswith("re.") and o.kind != "coll")

    full = extra("full")
    assert 0 < extra("op") < full
    assert extra("layer", recompute_every=every) == pytest.approx(full / every)
