"""The backward's memory-bound glue (workload.layer.GLUE): which ops each way of writing a block adds, their
bytes from shapes, where they sit in the dependencies, and bad names refused."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from c3kit.errors import WorkloadError
from c3kit.workload.graph import build_step
from c3kit.workload.layer import GLUE, Dims, MemShape, Structure, check_glue, comm_gemm_pairs, describe, evaluate
from c3kit.workload.model import ModelConfig, get_model
from c3kit.workload.parallel import Parallelism

L70 = get_model("Llama-3-70B")
GLUE_NAMES = ("qkv.cat", "fc1.cat", "qkv.dx_add", "fc1.dx_add")


def glue_ops(layer):
    return {o.name: o for o in layer.ops if o.role == "glue"}


def test_split_hand_checked():
    # Llama-3-70B at TP 8, 8192 tokens: q 8 + k 1 + v 1 heads x 128 = 1280 columns, gate + up 2 x 3584 = 7168
    layer = describe(L70, Parallelism(tp=8, sp=True), "train", 8192, glue="split")
    g = glue_ops(layer)
    assert set(g) == {"qkv.cat", "fc1.cat"}
    T = 8192
    assert g["qkv.cat"].shape == MemShape(2 * T * 1280 * 2, 0, (("copy", T * 1280, 1),))
    assert g["fc1.cat"].shape == MemShape(2 * T * 7168 * 2, 0, (("copy", T * 7168, 1),))
    for o in g.values():
        assert (o.phase, o.scope, o.stream, o.count) == ("bwd", "layer", "compute", 1)
    # the cat sits between the gradient it gathers and the GEMMs that read it
    assert layer.op("qkv.cat").deps == ("rope.bwd",)
    assert "qkv.cat" in layer.op("qkv.dgrad").deps and "qkv.cat" in layer.op("qkv.wgrad").deps
    assert layer.op("fc1.cat").deps == ("act.bwd",)
    assert "fc1.cat" in layer.op("fc1.dgrad").deps
    assert layer.op("mlp_in.bwd.ag").deps == ("fc1.cat",) and layer.op("attn_in.bwd.ag").deps == ("qkv.cat",)


def test_separate_hand_checked():
    layer = describe(L70, Parallelism(tp=8, sp=True), "train", 8192, glue="separate")
    g = glue_ops(layer)
    assert set(g) == {"qkv.dx_add", "fc1.dx_add"}
    T, H = 8192, 8192
    assert g["qkv.dx_add"].shape == MemShape(3 * 2 * T * H * 2, 2 * T * H, (("residual_add", T * H, H),) * 2)
    assert g["fc1.dx_add"].shape == MemShape(3 * T * H * 2, T * H, (("residual_add", T * H, H),))
    # the TP reduction waits for the sum and still names the GEMM it drains (the overlap pair)
    assert set(layer.op("qkv.dgrad.rs").deps) == {"qkv.dx_add", "qkv.dgrad"}
    assert set(layer.op("fc1.dgrad.rs").deps) == {"fc1.dx_add", "fc1.dgrad"}


def test_fused_has_no_glue_and_pairs_agree():
    par = Parallelism(tp=8, sp=True)
    fused = describe(L70, par, "train", 4096, glue="fused")
    assert glue_ops(fused) == {}
    pairs = {g: [(p.pattern, p.coll.name, p.gemm.name) for p in comm_gemm_pairs(describe(L70, par, "train", 4096,
                                                                                         glue=g))] for g in GLUE}
    assert pairs["split"] == pairs["fused"] == pairs["separate"]


def test_no_tp_norm_waits_for_the_sum():
    layer = describe(L70, Parallelism(tp=1), "train", 2048, glue="separate")
    assert layer.op("attn_norm.bwd").deps == ("qkv.dx_add",)
    assert layer.op("mlp_norm.bwd").deps == ("fc1.dx_add",)


def test_gelu_mlp_has_no_gate_up_glue():
    m = ModelConfig(name="g", hidden=1024, layers=2, heads=8, vocab=32000, gated_mlp=False, norm="layernorm")
    for glue in GLUE:
        names = set(glue_ops(describe(m, Parallelism(), "train", 1024, glue=glue)))
        assert not names & {"fc1.cat", "fc1.dx_add"}
    assert set(glue_ops(describe(m, Parallelism(), "train", 1024, glue="split"))) == {"qkv.cat"}


def test_inference_and_recompute():
    for phase in ("prefill", "decode"):
        assert glue_ops(describe(L70, Parallelism(tp=8), phase, 4096, glue="split")) == {}
    layer = describe(L70, Parallelism(tp=8, recompute="full"), "train", 4096, glue="split")
    assert set(glue_ops(layer)) == {"qkv.cat", "fc1.cat"}  # backward only: no recomputed copy


def test_default_is_split_and_graph_passes_it():
    assert Structure().glue == "split"
    par = Parallelism(tp=2)
    default = build_step(L70, par, "train", 2048)
    assert {n.name for n in default.nodes if n.role == "glue"} == {"qkv.cat", "fc1.cat"}
    fused = build_step(L70, par, "train", 2048, glue="fused")
    assert len(default.nodes) == len(fused.nodes) + 2
    assert default.total_flops() == fused.total_flops()  # copies add bytes, not FLOPs


def test_glue_prices_positive_and_adds_backward_time():
    from c3kit.hw.catalog import get_gpu
    from c3kit.step import project

    par = Parallelism(tp=1)
    gpu = get_gpu("H200-SXM")
    times = {g: project(build_step(L70, par, "train", 4096, glue=g), gpu).totals.compute for g in GLUE}
    assert times["fused"] < times["split"] and times["fused"] < times["separate"]
    rows = project(build_step(L70, par, "train", 4096), gpu).rows
    glue = [r for r in rows if r.role == "glue"]
    assert len(glue) == 2 and all(r.compute_s > 0 for r in glue)


@settings(max_examples=25, deadline=None)
@given(seq=st.sampled_from([512, 1024, 4096, 8192]), mb=st.integers(1, 4), tp=st.sampled_from([1, 2, 4, 8]))
def test_glue_bytes_scale_with_tokens(seq, mb, tp):
    par = Parallelism(tp=tp, micro_batch=mb)
    one = glue_ops(describe(L70, par, "train", seq, glue="split"))
    two = glue_ops(describe(L70, par, "train", 2 * seq, glue="split"))
    for name in one:
        assert two[name].shape.bytes == 2 * one[name].shape.bytes
        assert one[name].shape.bytes == 2 * 2 * one[name].shape.parts[0][1]  # bf16 read + write per element
        assert one[name].shape.parts[0][1] % (mb * seq) == 0


def test_arrays_agree_with_ints():
    par = Parallelism(tp=2)
    s = Structure.of(L70, par, "train", glue="separate")
    ints = evaluate(Dims.of(L70, par, 4096), s)
    d = Dims.of(L70, par, 4096)
    arr = evaluate(Dims(**{k: (np.array([v, v]) if isinstance(v, int) and k != "stage_layers" else v)
                           for k, v in d.__dict__.items()}), s)
    for name in ("qkv.dx_add", "fc1.dx_add"):
        assert np.all(np.asarray(arr.op(name).shape.bytes) == ints.op(name).shape.bytes)


def test_bad_glue_refused():
    with pytest.raises(WorkloadError, match="unknown glue"):
        check_glue("cat")
    with pytest.raises(WorkloadError, match="split, separate, fused"):
        describe(L70, Parallelism(tp=8), "train", 2048, glue="eager")
    with pytest.raises(WorkloadError):
        Structure.of(L70, Parallelism(), glue="")
    assert all(n not in {o.name for o in describe(L70, Parallelism(tp=8), "train", 2048, glue="fused").ops}
               for n in GLUE_NAMES)


# ---- gradient accumulation into .grad (GRAD_ACC) ----

def test_grad_acc_default_from_glue_and_micro_batches():
    from c3kit.workload.layer import default_grad_acc

    assert default_grad_acc("split", 1) == "none" and default_grad_acc("separate", 4) == "micro"
    assert default_grad_acc("fused", 8) == "none"  # Megatron: accumulated inside the wgrad GEMM
    one = describe(L70, Parallelism(tp=8), "train", 2048)
    assert one.structure.grad_acc == "none" and "layer.grad_acc" not in one.by_name()
    four = describe(L70, Parallelism(tp=8, micro_batch=1, global_batch=4), "train", 2048)
    assert four.structure.grad_acc == "micro"
    assert describe(L70, Parallelism(tp=8, micro_batch=1, global_batch=4), "prefill", 2048).structure.grad_acc == "none"


def test_grad_acc_hand_checked():
    par = Parallelism(tp=8, micro_batch=1, global_batch=4)
    layer = describe(L70, par, "train", 2048, grad_dtype="bf16")
    w = layer.weights
    acc = layer.op("layer.grad_acc")
    # micro: 3 of 4 micro-batches add; per micro-batch instance 3/4 of one add over the layer's bf16 gradients
    assert acc.shape.parts == (("residual_add", w.layer * 3 / 4, 8192),)
    assert acc.shape.bytes == 3 * 2 * w.layer * 3 / 4
    assert (acc.phase, acc.scope, acc.count, acc.role) == ("bwd", "layer", 4, "glue")
    emb = layer.op("embed.grad_acc")
    assert emb.scope == "micro" and emb.shape.parts[0][1] == w.emb_params * 3 / 4
    every = describe(L70, par, "train", 2048, grad_dtype="fp32", grad_acc="every").op("layer.grad_acc")
    assert every.shape.parts[0][1] == 2 * w.layer  # fp32 gradients: twice the 2-byte elements, every micro-batch
    fsdp = describe(L70, Parallelism(tp=8, dp=4, fsdp=True, micro_batch=1, global_batch=16), "train", 2048,
                    grad_dtype="fp32")
    assert fsdp.op("layer.grad_acc").shape.parts[0][1] == 2 * fsdp.weights.layer / 4 * 3 / 4  # the fp32 shard
    assert "layer.grad_acc" not in describe(L70, par, "train", 2048, glue="fused").by_name()


def test_grad_acc_step_time_grows_with_micro_batches():
    from c3kit.hw.catalog import get_gpu
    from c3kit.step import project

    gpu = get_gpu("H200-SXM")
    par = Parallelism(tp=1, micro_batch=1, global_batch=4)
    t = {a: project(build_step(L70, par, "train", 2048, grad_acc=a), gpu).totals.compute for a in ("none", "micro",
                                                                                                   "every")}
    assert t["none"] < t["micro"] < t["every"]


def test_bad_grad_acc_refused():
    from c3kit.workload.layer import check_grad_acc

    with pytest.raises(WorkloadError, match="none, micro, every"):
        check_grad_acc("always")
    with pytest.raises(WorkloadError, match="unknown gradient accumulation"):
        describe(L70, Parallelism(tp=8), "train", 2048, grad_acc="sometimes")


def test_analyze_glue_options(tmp_path, capsys):
    import json

    from c3kit.cli.main import main

    base = ["analyze", "--model", "llama-3-8b", "--hw", "H200-SXM", "--gpus", "8", "--tp", "1", "--dp", "8",
            "--seq", "4096", "--batch", "64", "--micro-batch", "2"]
    out = {}
    for glue, acc in (("fused", "none"), ("split", ""), ("split", "every")):
        extra = ["--glue", glue] + (["--grad-acc", acc] if acc else [])
        assert main([*base, *extra, "--out", str(tmp_path / f"{glue}{acc}"), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["glue"] == glue and doc["grad_acc"] == (acc or "micro")  # 4 micro-batches: eager default
        out[glue + acc] = doc["totals"]["compute"]
    assert out["fusednone"] < out["split"] < out["splitevery"]


def test_analyze_bad_glue_is_one_error_line(tmp_path, capsys):
    from c3kit.cli.main import main

    for flag, bad in (("--glue", "cat"), ("--grad-acc", "always")):
        assert main(["analyze", "--model", "llama-3-8b", flag, bad, "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and bad in err[0]
        assert not (tmp_path / "x").exists()
