"""Step-level overheads: hand-checked terms, their rows in the per-op table, and bad parameters."""

import pytest
from hypothesis import given, settings, strategies as st

from c3kit.errors import C3kitError
from c3kit.hw import get_gpu
from c3kit.step import make_plan, node_times, project
from c3kit.step.moe_host import moe_host_calibration
from c3kit.step.overheads import (
    DEFAULT_OVERHEADS, NO_OVERHEADS, SOURCES, FP8_SCALING, OverheadModel, eager_launch_s, expert_cast_splits,
    fp8_cast_elements, fp8_cast_time, pipeline_factor, step_overheads)
from c3kit.workload.graph import ADAM_BYTES_PER_PARAM, Node, build_step
from c3kit.workload.model import ModelConfig
from c3kit.workload.ops import Collective, Gemm, MemOp
from c3kit.workload.parallel import Parallelism

H100 = get_gpu("H100-SXM")
DENSE = ModelConfig("tiny", hidden=512, layers=4, heads=8, vocab=1024)
MOE = ModelConfig("tinymoe", hidden=512, layers=4, heads=8, vocab=1024, n_experts=8, top_k=2, moe_ffn_hidden=256)


def stub_timer(op, hw):
    """1 ns per byte for memory ops, 1 us per collective, 1 ms per GEMM, 2 ms per attention (fp8: half)."""
    if isinstance(op, MemOp):
        return op.bytes * 1e-9
    if isinstance(op, Collective):
        return 1e-6
    base = 1e-3 if isinstance(op, Gemm) else 2e-3
    return base / 2 if getattr(op, "dtype", "") == "fp8" else base


def graph(model=DENSE, dtype="bf16", **par):
    p = Parallelism(**{"micro_batch": 1, "global_batch": 0, **par})
    return build_step(model, p, "train", 256, dtype, 8)


def terms(g, model=DEFAULT_OVERHEADS):
    plan = make_plan(g)
    t = node_times(g, H100, stub_timer)
    return {o.name: o for o in step_overheads(g, H100, stub_timer, plan, t, model)}, plan


def test_pipeline_factor_hand_checked():
    assert pipeline_factor(graph(pp=2, dp=1, global_batch=8)) == pytest.approx((8 + 1) / 8)
    g = build_step(ModelConfig("t8", hidden=512, layers=8, heads=8, vocab=1024),
                   Parallelism(pp=4, vpp=2, global_batch=8), "train", 256, "bf16", 8)
    assert pipeline_factor(g) == pytest.approx((8 + 3 / 2) / 8)
    assert pipeline_factor(graph()) == 1.0


def test_fp8_cast_elements_hand_checked():
    fwd = Node(0, Gemm("fc1", 256, 2048, 512, "fp8"), (), "fwd", "layer", "compute", 1, "fc1")
    assert fp8_cast_elements(fwd) == (256 * 512, 512 * 2048)
    dg = Node(1, Gemm("fc1.dgrad", 256, 512, 2048, "fp8"), (), "bwd", "layer", "compute", 1, "fc1", "dgrad")
    assert fp8_cast_elements(dg) == (256 * 512, 0)
    wg = Node(2, Gemm("fc1.wgrad", 512, 2048, 256, "fp8"), (), "bwd", "layer", "compute", 1, "fc1", "wgrad")
    assert fp8_cast_elements(wg) == (0, 0)
    experts = Node(3, Gemm("expert_fc1", 64, 512, 256, "fp8", 8), (), "fwd", "layer", "compute", 1, "experts")
    assert fp8_cast_elements(experts) == (64 * 256 * 8, 256 * 512 * 8)
    bf = Node(4, Gemm("fc1", 256, 2048, 512, "bf16"), (), "fwd", "layer", "compute", 1, "fc1")
    assert fp8_cast_elements(bf) == (0, 0)


def test_fp8_cast_time_from_the_measured_cast():
    from c3kit.cost.gemmclass import CAST_COMPOSITION, gemm_classes_for

    cls = gemm_classes_for(H100)
    t, k = fp8_cast_time(1e6, H100, stub_timer, "delayed")
    assert k == 1 and t == pytest.approx(cls.cast_fixed_s / 7 + 4.0 / 13.0 * cls.cast_s_per_element * 1e6)
    # the "eager" recipe is the measured composition itself
    assert fp8_cast_time(1e6, H100, stub_timer, "eager")[0] == pytest.approx(float(cls.cast_time(1e6)))
    assert CAST_COMPOSITION == (7, 13.0)
    # a GPU without the measurement: the recipe's bytes on the timer (1 ns per byte here)
    t, k = fp8_cast_time(1e6, get_gpu("B200"), stub_timer, "current")
    assert (t, k) == (pytest.approx(6e6 * 1e-9), 2)
    assert fp8_cast_time(0, H100, stub_timer) == (0.0, 0)


def test_grad_clip_and_launch_gaps_hand_checked():
    g = graph(dp=2)
    got, plan = terms(g)
    params = next(n for n in g.nodes if n.role == "optimizer").op.bytes / ADAM_BYTES_PER_PARAM
    assert got["grad_clip"].seconds == pytest.approx(12 * params * 1e-9 + 1e-6)
    kernels = sum(plan.multiplicity[i] for i, n in enumerate(g.nodes) if n.stream == "compute")
    assert got["launch_gaps"].seconds == pytest.approx(0.9e-6 * kernels)
    graphs = OverheadModel(cuda_graphs=True)
    assert terms(g, graphs)[0]["launch_gaps"].seconds == pytest.approx(0.5e-6 * kernels)


def test_fp8_recipe_keeps_attention_head_and_router_in_bf16():
    g = graph(MOE, dtype="fp8")
    for n in g.nodes:
        if isinstance(n.op, Gemm):
            want = "fp8" if n.role.removeprefix("re_") in ("qkv", "proj", "fc1", "fc2", "experts") else "bf16"
            assert n.op.dtype == want, n.name
        elif hasattr(n.op, "dtype"):
            assert n.op.dtype == "bf16"
    # activations stay BF16 between the FP8 GEMMs: the same collective and memory bytes as a BF16 step
    bf = graph(MOE)
    assert [n.op.bytes for n in g.nodes if not isinstance(n.op, Gemm)] == \
        [n.op.bytes for n in bf.nodes if not isinstance(n.op, Gemm)]


def test_fp8_casts_hand_checked():
    g = graph(dtype="fp8", global_batch=4)  # 4 micro-batches, no pipeline
    got, plan = terms(g)
    expect = 0.0
    for i, n in enumerate(g.nodes):
        act, wt = fp8_cast_elements(n)
        if act:
            expect += fp8_cast_time(act, H100, stub_timer)[0] * plan.multiplicity[i]
        if wt:  # TE delayed scaling: weights cast once per step
            expect += fp8_cast_time(wt, H100, stub_timer)[0] * plan.multiplicity[i] / 4
    assert got["fp8_casts"].seconds == pytest.approx(expect) and expect > 0
    torchao = terms(g, OverheadModel(fp8_scaling="dynamic"))[0]["fp8_casts"].seconds
    assert torchao > expect  # more bytes per cast and weights cast in every micro-batch
    assert "fp8_casts" not in terms(graph())[0]
    with pytest.raises(C3kitError):
        OverheadModel(fp8_scaling="nvfp4")
    assert set(FP8_SCALING) == {"delayed", "current", "dynamic", "eager", "mxfp8", "delayed_uncached"}
    # TE delayed scaling without is_first_microbatch: the same casts, the weights' in every micro-batch
    unc = terms(g, OverheadModel(fp8_scaling="delayed_uncached"))[0]["fp8_casts"]
    assert unc.seconds > expect and unc.runs > got["fp8_casts"].runs
    # MXFP8: one kernel like delayed scaling, 2 / 32 B of E8M0 scales per element more; weights cached per step
    mx = terms(g, OverheadModel(fp8_scaling="mxfp8"))[0]["fp8_casts"]
    current = terms(g, OverheadModel(fp8_scaling="current"))[0]["fp8_casts"].seconds
    assert expect < mx.seconds < current and mx.runs == got["fp8_casts"].runs
    t_d, k_d = fp8_cast_time(1e6, H100, stub_timer, "delayed")
    t_m, k_m = fp8_cast_time(1e6, H100, stub_timer, "mxfp8")
    assert k_d == k_m == 1 and t_m > t_d


def test_moe_imbalance_and_permute_in_the_graph():
    g = graph(MOE)
    got, plan = terms(g)
    assert "moe_imbalance" not in got and "moe_permute" not in got
    assert [n.name for n in g.layer_nodes() if n.role == "permute"] == [
        "moe_permute", "moe_unpermute", "moe_unpermute.bwd", "moe_permute.bwd"]
    # the load imbalance has one place, Parallelism.moe_imbalance: the busiest rank's expert GEMM rows
    assert not hasattr(DEFAULT_OVERHEADS, "moe_imbalance")
    def fc1_rows(**par):  # ep 2: 256 tokens x top-2 over 4 local experts = 128 rows each when balanced
        return next(n.op.m for n in graph(MOE, dp=2, ep=2, **par).layer_nodes() if n.name == "expert_fc1")

    assert (fc1_rows(), fc1_rows(moe_imbalance=1.25)) == (128, 160)


def test_moe_host_sync_hand_checked():
    # 4 layers x 8 micro-batches, no pipeline: one host wait per MoE layer forward = 32 waits, each the measured
    # count wait (36.40 us, call 29 moe_host) plus one eager launch (7.1 us, the H200 host's, transferred to H100)
    g = graph(MOE, dp=2, ep=2, global_batch=16)
    got, _ = terms(g)
    each = moe_host_calibration("H100-SXM").sync_s + eager_launch_s(H100)
    assert 43e-6 < each < 44e-6
    assert got["moe_host_sync"].runs == 4 * 8
    assert got["moe_host_sync"].seconds == pytest.approx(32 * each)
    # full recomputation runs every forward twice: twice the waits
    re = terms(graph(MOE, dp=2, ep=2, global_batch=16, recompute="full"))[0]["moe_host_sync"]
    assert re.runs == 64
    # a pipeline scales it like every per-micro-batch term: (m + (pp - 1) / vpp) / m
    pp = graph(MOE, pp=2, dp=1, global_batch=8)
    assert terms(pp)[0]["moe_host_sync"].seconds == pytest.approx(2 * 8 * each * (8 + 1) / 8)
    assert "moe_host_sync" not in terms(graph())[0]
    assert "moe_host_sync" not in terms(g, OverheadModel(moe_host_sync=False))[0]
    assert "moe_host_sync" not in terms(g, NO_OVERHEADS)[0]


def fast_timer(op, hw, grouped_s=1e-6):
    """1 us per GEMM (grouped_s for a grouped one), 2 us per attention, 1 us per collective, memory ops free."""
    if isinstance(op, MemOp):
        return 0.0
    if isinstance(op, Gemm):
        return grouped_s if op.batch > 1 else 1e-6
    return 1e-6 if isinstance(op, Collective) else 2e-6


def moe_terms(g, model=DEFAULT_OVERHEADS, timer=fast_timer):
    plan = make_plan(g)
    return {o.name: o for o in step_overheads(g, H100, timer, plan, node_times(g, H100, timer), model)}


def test_moe_host_bound_hand_checked():
    # tiny MoE, ep 2 (4 local experts), 4 layers x 8 micro-batches. A layer forward: 15 compute ops, of them 5 GEMMs
    # (qkv, proj, router, expert_fc1, expert_fc2) and the attention: 5 + 2 + 15 x 0.9 (launch gaps) = 20.5 us of GPU;
    # its backward 22 ops, 10 GEMMs and the attention's: 10 + 2 + 22 x 0.9 = 31.8 us
    g = graph(MOE, dp=2, ep=2, global_batch=16)
    fwd = [n for n in g.layer_nodes() if n.stream == "compute" and n.phase == "fwd"]
    bwd = [n for n in g.layer_nodes() if n.stream == "compute" and n.phase == "bwd"]
    assert (len(fwd), sum(isinstance(n.op, Gemm) for n in fwd)) == (15, 5)
    assert (len(bwd), sum(isinstance(n.op, Gemm) for n in bwd)) == (22, 10)
    cal = moe_host_calibration("H100-SXM")
    got = moe_terms(g)["moe_host_bound"]
    assert got.runs == 64
    assert got.seconds == pytest.approx(32 * (cal.base_s["fwd"] - 20.5e-6) + 32 * (cal.base_s["bwd"] - 31.8e-6))
    # experts from a Python loop: 4 x the measured per-expert host time more per pass, less the GPU time the
    # per-expert GEMMs add to the window (6 GEMMs: 4 x 1 us alone + 3 launch gaps - 1 us grouped = 5.7 us each)
    seq = moe_terms(g, OverheadModel(moe_experts="sequential"))["moe_host_bound"].seconds
    assert seq == pytest.approx(got.seconds + 32 * 4 * (cal.per_expert_s["fwd"] + cal.per_expert_s["bwd"])
                                - 32 * 6 * 5.7e-6)
    # full recomputation: the recomputed forward waits for the counts again, a third pass of the forward's GPU time
    full = moe_terms(graph(MOE, dp=2, ep=2, global_batch=16, recompute="full"))["moe_host_bound"]
    assert full.runs == 96 and full.seconds == pytest.approx(got.seconds + 32 * (cal.base_s["fwd"] - 20.5e-6))
    # a GPU slower than the host: nothing exposed (stub_timer: 1 ms per GEMM)
    assert terms(g)[0]["moe_host_bound"].seconds == 0.0
    assert "moe_host_bound" not in moe_terms(g, OverheadModel(moe_host_bound=False))
    assert "moe_host_bound" not in moe_terms(graph(dp=2))


def test_moe_per_expert_hand_checked():
    # 6 expert GEMMs per layer pass pair (fc1, fc2 forward; their dgrad and wgrad), 4 local experts each:
    # 4 x 1 us alone + 3 extra launch gaps x 0.9 us - the grouped GEMM's 2 us = 4.7 us each, x 32 runs
    g = graph(MOE, dp=2, ep=2, global_batch=16)
    grouped2 = lambda op, hw: fast_timer(op, hw, grouped_s=2e-6)  # noqa: E731
    got = moe_terms(g, OverheadModel(moe_experts="per_expert"), grouped2)["moe_per_expert"]
    assert got.seconds == pytest.approx(6 * 32 * 4.7e-6)
    assert got.runs == 6 * 32 * 4
    assert "moe_per_expert" not in moe_terms(g, DEFAULT_OVERHEADS, grouped2)  # grouped: the graph's own GEMM
    # a grouped GEMM priced above its experts alone: floored at 0 (grouped 20 us > 4 x 1 us + 2.7 us)
    slow = lambda op, hw: fast_timer(op, hw, grouped_s=20e-6)  # noqa: E731
    assert moe_terms(g, OverheadModel(moe_experts="per_expert"), slow)["moe_per_expert"].seconds == 0.0
    from c3kit.step.overheads import MOE_EXPERTS

    assert set(MOE_EXPERTS) == {"grouped", "per_expert", "sequential"}


@settings(max_examples=10, deadline=None)
@given(m=st.integers(1, 8), more=st.integers(1, 8), rc=st.sampled_from(["none", "full"]))
def test_moe_host_sync_grows_with_the_forwards(m, more, rc):
    def sync(mb):
        got = moe_terms(graph(MOE, dp=2, ep=2, global_batch=2 * mb, recompute=rc))["moe_host_sync"]
        return got.seconds, got.runs

    (a, na), (b, nb) = sync(m), sync(m + more)
    assert b > a > 0 and na == 4 * m * (2 if rc == "full" else 1)
    assert b / a == pytest.approx(nb / na)  # the same measured wait per forward


@settings(max_examples=20, deadline=None)
@given(scale=st.floats(1.0, 200.0), impl=st.sampled_from(["grouped", "per_expert", "sequential"]))
def test_moe_host_bound_falls_as_the_gpu_slows(scale, impl):
    g = graph(MOE, dp=2, ep=2, global_batch=16)
    model = OverheadModel(moe_experts=impl)
    slow = lambda op, hw: scale * fast_timer(op, hw)  # noqa: E731
    base = moe_terms(g, model)["moe_host_bound"].seconds
    assert 0 <= moe_terms(g, model, slow)["moe_host_bound"].seconds <= base + 1e-12


@settings(max_examples=20, deadline=None)
@given(grouped=st.floats(0.1e-6, 50e-6), more=st.floats(0, 50e-6))
def test_moe_per_expert_falls_as_the_grouped_gemm_slows(grouped, more):
    g = graph(MOE, dp=2, ep=2, global_batch=16)
    model = OverheadModel(moe_experts="per_expert")
    t = [moe_terms(g, model, lambda op, hw, s=s: fast_timer(op, hw, grouped_s=s))["moe_per_expert"].seconds
         for s in (grouped, grouped + more)]
    assert t[0] >= t[1] >= 0


def test_dp_bucket_only_for_small_layers_without_fsdp():
    g = graph(dp=4)
    got, _ = terms(g)
    assert "dp_bucket" in got  # 4 layers of ~3M params: the 40M-parameter bucket holds the whole stage
    assert "dp_bucket" not in terms(graph(dp=4, fsdp=True))[0]
    assert "dp_bucket" not in terms(g, OverheadModel(dp_bucket=False))[0]
    assert "dp_bucket" not in terms(graph(dp=4, dp_overlap=False))[0]  # reduced after the backward: all exposed


def test_project_shows_overheads_as_rows_and_adds_them():
    g = graph(dp=2)
    base = project(g, H100, timer=stub_timer)
    none = project(g, H100, timer=stub_timer, overheads=NO_OVERHEADS)
    full = project(g, H100, timer=stub_timer, overheads=DEFAULT_OVERHEADS)
    assert none.totals.step_time == base.totals.step_time
    rows = [r for r in full.rows if r.role.startswith("overhead.")]
    assert {r.name for r in rows} >= {"launch_gaps", "grad_clip"}
    assert full.totals.overhead == pytest.approx(sum(r.compute_s for r in rows))
    assert full.totals.step_time == pytest.approx(base.totals.step_time + full.totals.overhead)
    assert sum(r.share for r in full.rows) == pytest.approx(
        (full.totals.compute + full.totals.exposed + full.totals.bubble + full.totals.overhead) / full.totals.step_time)


def test_every_term_has_a_source():
    assert set(SOURCES) == {"launch_gaps", "grad_clip", "fp8_casts", "dp_bucket", "fsdp_copy_out",
                            "moe_host_sync", "moe_host_bound", "moe_per_expert", "optimizer_unfused",
                            "moe_expert_casts", "moe_fp8_padding"}
    assert all(len(s) > 40 for s in SOURCES.values())


@pytest.mark.parametrize("bad", [dict(kernel_gap_s=-1e-6), dict(moe_experts="batched"), dict(dp_bucket_params=-1),
                                 dict(optimizer_impl="loop")])
def test_bad_parameters(bad):
    with pytest.raises(C3kitError):
        OverheadModel(**bad)


@settings(max_examples=25, deadline=None)
@given(dp=st.sampled_from([1, 2, 4]), dtype=st.sampled_from(["bf16", "fp8"]), moe=st.booleans(),
       rc=st.sampled_from(["none", "selective", "full"]))
def test_overheads_never_shorten_a_step(dp, dtype, moe, rc):
    g = graph(MOE if moe else DENSE, dtype, dp=dp, recompute=rc)
    base = project(g, H100).totals.step_time
    assert project(g, H100, overheads=DEFAULT_OVERHEADS).totals.step_time >= base


def test_optimizer_impl_hand_checked():
    # 4 layers of 3,147,776 parameters + 2 x 1024 x 512 embeddings = 13,639,680; the fused op moves 30 B each
    g = graph()
    fused_s = 13_639_680 * 30 * 1e-9
    assert "optimizer_unfused" not in terms(g)[0]
    fe = terms(g, OverheadModel(optimizer_impl="foreach"))[0]["optimizer_unfused"]
    assert fe.seconds == pytest.approx(fused_s * (80 / 28 - 1))
    un = terms(g, OverheadModel(optimizer_impl="unfused"))[0]["optimizer_unfused"]
    assert un.seconds == pytest.approx(fused_s * (88 / 28 - 1))
    # per layer 2 layernorms (weight, bias) + 6 matrices, plus embedding, final norm, head: 43 tensors x 9 kernels
    assert un.runs == 9 * 43
    # memory for free: the Python loop's eager launches bound it
    def free(op, hw):
        return 0.0 if isinstance(op, MemOp) else stub_timer(op, hw)

    got = {o.name: o for o in step_overheads(g, H100, free, make_plan(g), node_times(g, H100, free),
                                             OverheadModel(optimizer_impl="unfused"))}
    assert got["optimizer_unfused"].seconds == pytest.approx(387 * eager_launch_s(H100))
    flat = terms(graph(dp=4, fsdp=True), OverheadModel(optimizer_impl="unfused", fsdp_impl="flat"))[0]
    assert flat["optimizer_unfused"].runs == 9 * (4 + 1)  # one flat parameter per FSDP unit
    assert "optimizer_unfused" not in terms(g, NO_OVERHEADS)[0]


def test_optimizer_pass_count_matches_the_h200_foreach_rows():
    import json
    from pathlib import Path

    from c3kit.step.overheads import OPTIMIZER_IMPLS

    rows = json.loads((Path(__file__).parents[2] / "benchmarks/ops_h200/h200-sxm-ops-memory.json").read_text())["rows"]
    t = {(r[0], r[3]): r[5] for r in rows if r[0] in ("adamw_fused", "adamw_foreach")}
    big = [n for (op, n) in t if op == "adamw_foreach" and n >= 64 * 2**20]
    assert big
    for n in big:  # measured 2.81x and 2.66x against 80 / 28 = 2.86x
        assert t[("adamw_foreach", n)] / t[("adamw_fused", n)] == pytest.approx(
            OPTIMIZER_IMPLS["foreach"][1] / OPTIMIZER_IMPLS["fused"][1], rel=0.08)


@settings(max_examples=15, deadline=None)
@given(dp=st.sampled_from([1, 2, 4]), fsdp=st.booleans(), layers=st.integers(1, 6))
def test_optimizer_impls_are_ordered(dp, fsdp, layers):
    m = ModelConfig("t", hidden=256, layers=layers, heads=4, vocab=512)
    g = build_step(m, Parallelism(dp=dp, fsdp=fsdp and dp > 1), "train", 128, "bf16", 8)
    t = [project(g, H100, overheads=OverheadModel(optimizer_impl=k)).totals.step_time
         for k in ("fused", "foreach", "unfused")]
    assert t[0] < t[1] < t[2]


def test_fsdp2_copy_out_hand_checked():
    # dp 4 FSDP, 2 micro-batches, 4 layers: a layer holds 4 h^2 + 2 h F + 2 x 2 h (layernorm) = 3,147,776
    # parameters (6,295,552 B in bf16), gathered in the forward and again in the backward (8 + 8 runs); the
    # untied embeddings 2 x 1024 x 512 x 2 B = 2,097,152 B once per micro-batch. Copy-out reads and writes them.
    g = graph(dp=4, fsdp=True, global_batch=8)
    got, _ = terms(g)
    want = 2 * 1e-9 * (6_295_552 * 16 + 2_097_152 * 2)
    assert got["fsdp_copy_out"].seconds == pytest.approx(want)
    assert got["fsdp_copy_out"].runs == 18
    flat, _ = terms(g, OverheadModel(fsdp_impl="flat"))  # FSDP1 / Megatron FSDP: parameters view the buffer
    assert "fsdp_copy_out" not in flat
    assert "fsdp_copy_out" not in terms(graph(dp=4, dist_optimizer=True, global_batch=8))[0]
    assert "fsdp_copy_out" in SOURCES
    with pytest.raises(C3kitError, match="fsdp_impl"):
        OverheadModel(fsdp_impl="fsdp3")


def test_validation_prices_each_frameworks_fsdp():
    from c3kit.studies.validation import fsdp_impl_of

    assert fsdp_impl_of("torchtitan (FSDP2)") == "fsdp2"
    assert fsdp_impl_of("llm-foundry (Composer, PyTorch FSDP)") == "flat"
    assert fsdp_impl_of("Megatron-Bridge (Megatron-Core, Transformer Engine) with Megatron FSDP") == "flat"


def test_fp8_inference_casts_activations_only():
    from c3kit.hw import get_gpu
    from c3kit.step import project
    from c3kit.step.overheads import DEFAULT_OVERHEADS
    from c3kit.workload.graph import build_step
    from c3kit.workload.model import get_model
    from c3kit.workload.parallel import Parallelism

    m, gpu = get_model("Llama-3-8B"), get_gpu("H200-SXM")
    g = build_step(m, Parallelism(tp=1, micro_batch=64), "decode", 2048, "fp8")
    casts = [r for r in project(g, gpu, overheads=DEFAULT_OVERHEADS).rows if r.role == "overhead.fp8_casts"]
    from c3kit.workload.ops import Gemm

    fp8_gemm_runs = sum(m.layers for n in g.nodes if isinstance(n.op, Gemm) and n.op.dtype == "fp8")
    # one cast per FP8 GEMM input (delayed scaling: one kernel each); the offline-quantized weights are not cast
    assert len(casts) == 1 and casts[0].runs == fp8_gemm_runs == 4 * m.layers


def test_expert_cast_splits_follow_transformer_engine():
    # TE GroupedLinear: one fused multi-tensor cast under delayed scaling only; every other recipe one per expert
    assert expert_cast_splits(OverheadModel(), 16) == 1  # a grouped GEMM
    assert expert_cast_splits(OverheadModel(moe_experts="per_expert"), 16) == 1  # delayed
    assert expert_cast_splits(OverheadModel(moe_experts="per_expert", fp8_scaling="current"), 16) == 16
    assert expert_cast_splits(OverheadModel(moe_experts="per_expert", fp8_scaling="mxfp8"), 16) == 16
    assert expert_cast_splits(OverheadModel(moe_experts="sequential"), 4) == 4  # each expert's own Linear


def test_moe_expert_casts_hand_checked():
    # tiny MoE fp8, ep 2 (4 local experts), 4 layers x 8 micro-batches, no pipeline. Expert casts per step: fc1 and
    # fc2 inputs and their dgrads' output gradients, 4 x 32 runs, plus the two weights once per step, 2 x 4 = 136
    # casts. On H100's measured cast class a cast is kernels / 7 x fixed + bytes x slope, so casting each of the 4
    # experts alone adds 3 x (2 / 7) x fixed per cast under current scaling (2 kernels), 3 x 2 kernels more.
    from c3kit.cost.gemmclass import gemm_classes_for

    g = graph(MOE, dtype="fp8", dp=2, ep=2, global_batch=16)
    model = OverheadModel(moe_experts="per_expert", fp8_scaling="current")
    got, _ = terms(g, model)
    fixed = gemm_classes_for(H100).cast_fixed_s
    assert got["moe_expert_casts"].runs == 3 * 2 * 136
    assert got["moe_expert_casts"].seconds == pytest.approx(3 * 2 / 7 * fixed * 136)
    # the extra kernels get launch gaps too
    base = terms(g, OverheadModel(fp8_scaling="current"))[0]
    assert got["launch_gaps"].seconds - base["launch_gaps"].seconds == pytest.approx(0.9e-6 * 3 * 2 * 136)
    assert got["fp8_casts"].seconds == pytest.approx(base["fp8_casts"].seconds)  # the one cast stays where it was
    assert "moe_expert_casts" not in terms(g, OverheadModel(moe_experts="per_expert"))[0]  # delayed: one kernel
    assert "moe_expert_casts" not in terms(graph(MOE, dp=2, ep=2, global_batch=16), model)[0]  # bf16


def test_moe_fp8_padding_hand_checked():
    # tiny MoE fp8, ep 2: 256 tokens x top-2 = 512 expert rows of hidden 512 = 262,144 elements padded into fc1 and
    # out of fc2, each copy read + written in BF16 (1,048,576 B: 1.048576 ms at the stub's 1 ns per byte) plus a
    # 0.9 us launch gap, twice per GEMM side per layer (forward, backward): 4 x 32 = 128 copies per step
    g = graph(MOE, dtype="fp8", dp=2, ep=2, global_batch=16)
    got, _ = terms(g, OverheadModel(moe_experts="per_expert", fp8_scaling="current"))
    assert got["moe_fp8_padding"].runs == 128
    assert got["moe_fp8_padding"].seconds == pytest.approx(128 * (1.048576e-3 + 0.9e-6))
    # full recomputation pads the recomputed forward's two sides once more
    re = terms(graph(MOE, dtype="fp8", dp=2, ep=2, global_batch=16, recompute="full"),
               OverheadModel(moe_experts="per_expert", fp8_scaling="current"))[0]["moe_fp8_padding"]
    assert re.runs == 192 and re.seconds == pytest.approx(192 * (1.048576e-3 + 0.9e-6))
    assert "moe_fp8_padding" not in terms(g)[0]  # grouped experts
    assert "moe_fp8_padding" not in terms(graph(MOE, dp=2, ep=2, global_batch=16),
                                          OverheadModel(moe_experts="per_expert"))[0]  # bf16: no padding


def test_moe_fp8_padding_shrinks_the_exposed_host_time():
    # the copies are GPU work in the pass the host's issue overlaps with: host-bound exposure falls by their time
    g = graph(MOE, dtype="fp8", dp=2, ep=2, global_batch=16)
    on = moe_terms(g, OverheadModel(moe_experts="per_expert"), lambda op, hw: 1e-9 if isinstance(op, MemOp)
                   else fast_timer(op, hw))
    off = moe_terms(g, OverheadModel(moe_experts="per_expert", fp8_recipe=False),
                    lambda op, hw: 1e-9 if isinstance(op, MemOp) else fast_timer(op, hw))
    assert on["moe_host_bound"].seconds == pytest.approx(
        off["moe_host_bound"].seconds - on["moe_fp8_padding"].seconds, rel=1e-9)
