"""Step-level overheads: time a real training step spends outside the layer graph's GEMMs and collectives.

Each term is named, priced with the same timer as the step's ops (so memory traffic costs what the
cost layer says HBM traffic costs), carries its source, and appears as one row of the per-op table
(role "overhead.<name>"). Terms that run once per micro-batch on a pipeline stage's critical path are
scaled by the pipeline's (m + (pp - 1) / vpp) / m, like every other per-micro-batch op.

Modelled elsewhere, not here: FSDP / ZeRO-3 prefetch (step/plan.py: the all-gather of layer l+1 is
prefetched behind layer l, one layer deep, FSDP2's default implicit prefetch; the first all-gather and
the last reduce-scatter of every micro-batch are exposed), the reduce-scatter dtype (the layer
description reduces fp32 gradients: torchtitan's mixed_precision_reduce default "float32" and
Composer's DEFAULT FSDP mixed precision both reduce in fp32) and the gradient reduction of one layer
behind the backward of the layers below it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from c3kit.cost.launch import eager_launch_s  # noqa: F401 - the measured eager launch, used below and by serve
from c3kit.errors import C3kitError

SOURCES = {
    "launch_gaps": "NVIDIA Technical Blog, Getting Started with CUDA Graphs (A. Gray, 2019): a 2.9 us kernel "
                   "launched back to back on one stream takes 3.8 us per kernel without CUDA graphs and 3.4 us with "
                   "one (V100): ~0.9 us of idle GPU per kernel in eager mode, ~0.5 us in a graph. Not yet measured on "
                   "A100, H100, H200 or B200. Kernels counted: one per compute node of the step graph (a lower "
                   "bound for unfused eager code) plus the FP8 cast kernels.",
    "grad_clip": "Megatron-LM megatron/core/optimizer/clip_grads.py (and torch.nn.utils.clip_grad_norm_ with "
                 "foreach): an L2 norm over every local fp32 gradient (reads 4 B per parameter), an all-reduce of "
                 "the norm over all ranks, then an in-place scale of every gradient (reads and writes 8 B per "
                 "parameter); parameters as sharded by ZeRO-1 / FSDP.",
    "moe_host_sync": "Megatron-Core (core_v0.16.0) moe/token_dispatcher.py: the alltoall dispatcher copies the token "
                     "counts per expert to the host and waits for them (_maybe_dtoh_and_synchronize at cuda_sync_point "
                     "'before_ep_alltoall', dropless; 'before_permutation_1' with a capacity factor; 'before_finish' "
                     "without ep / tp), and the allgather dispatcher calls .cpu() on them: the expert GEMMs take "
                     "their per-expert row counts as host integers. Once per MoE layer forward (and recomputed forward) "
                     "the GPU drains its queue and idles through the wait and the host's launch of the next kernel: "
                     "the measured wait (median .tolist() of the counts, device call 29 moe_host 'sync' rows, "
                     "step/moe_host.py) plus one eager kernel launch (ops-floor tiny_add eager slope); the H200 "
                     "host's figures where the GPU has none of its own.",
    "moe_host_bound": "Host-bound MoE layers (step/moe_host.py): after each token-count wait the GPU's queue is empty, "
                      "so the host's time to issue a MoE layer pass is exposed where it exceeds the GPU time of that "
                      "pass (its compute-stream ops plus their launch gaps). Host issue time measured on the H200 "
                      "host (device call 29, moe_host layer_fwd / layer_bwd rows: a whole MoE layer in Megatron-Core's "
                      "op order issued behind a GPU spin): a median per pass with the experts issued as one call, plus "
                      "a median per local expert issued from a Python loop (Megatron-Core SequentialMLP). Plain "
                      "PyTorch: a lower bound for Transformer Engine modules.",
    "moe_per_expert": "Transformer Engine GroupedLinear (Megatron-Core TEGroupedMLP, chosen by moe_grouped_gemm with "
                      "TE: megatron/core/models/gpt/moe_module_specs.py) runs one cuBLAS GEMM per local expert "
                      "(transformer_engine/pytorch/csrc/extensions/gemm.cpp te_general_grouped_gemm -> "
                      "nvte_multi_tensor_gemm, 'only multi-stream cublas backend'; TE PR #853, issue #1386), as does "
                      "Megatron-Core SequentialMLP: each expert's GEMM is priced on the GEMM curve at its own rows, "
                      "with one launch gap per extra kernel, in place of the one grouped GEMM of the layer graph. "
                      "The multi-stream launch gains nothing: two GEMMs on two streams took 0.99-1.09x of back to "
                      "back on the H200 (device call 29 gemm_pair). Floored at 0 where the grouped price is higher.",
    "fp8_casts": "Every FP8 GEMM operand is quantized from BF16 by a cast kernel: the activation and the weight "
                 "before each forward GEMM, the output gradient before each dgrad GEMM (the wgrad reuses the "
                 "transposed copies). Recipes (FP8_SCALING): Transformer Engine DelayedScaling (its default: one "
                 "fused cast_transpose per operand, reading BF16 and writing the FP8 copy and its transpose, amax "
                 "recorded on the fly, scale from the amax history), TE Float8CurrentScaling (an amax pass, then "
                 "cast_transpose), torchao Float8Linear tensorwise dynamic scaling under torch.compile (an amax "
                 "reduction, then a fused scale + cast), TE MXFP8BlockScaling (Blackwell: one cast_mxfp8_2D_kernel "
                 "per operand, transformer_engine/common/util/cast_kernels.cuh, reading BF16 and writing the "
                 "row-wise and column-wise FP8 copies with one E8M0 scale per 32 elements each); TE caches the FP8 weights across the micro-batches of a "
                 "step (is_first_microbatch), torchao casts them in every forward; inference engines (TensorRT-LLM, vLLM FP8 checkpoints) load weights quantized offline, so prefill and decode cast activations only. Priced from the measured "
                 "unfused amax + scale + cast kernels of runtime/bench/ops.py (cost/gemmclass.py): its time per "
                 "byte moved and per kernel, applied to the recipe's bytes and kernels; the fused TE and compiled "
                 "torchao kernels themselves were not measured. A GPU without the measurement: bytes on the "
                 "roofline.",
    "fsdp_copy_out": "PyTorch FSDP2 (torch.distributed.fsdp fully_shard, _fsdp_collectives.py): "
                     "foreach_all_gather_copy_out waits for the all-gather on the current (compute) stream and "
                     "copies the gathered flat buffer into each parameter's unsharded tensor (split_with_sizes_copy: "
                     "reads and writes the gathered bytes) before the layer runs: on the critical path, once per "
                     "all-gather (forward and, with reshard_after_forward, backward). The copy-in of the local shards "
                     "(all_gather_copy_in) and the reduce-scatter's chunk_cat of the unsharded gradients run on the "
                     "all-gather copy-in and reduce-scatter streams beside the compute and are not added. FSDP1 "
                     "(FlatParameter: parameters are views into the gathered buffer) and Megatron FSDP (contiguous "
                     "buffers) have no copy-out: OverheadModel(fsdp_impl='flat').",
    "moe_expert_casts": "Transformer Engine GroupedLinear (Megatron-Core TEGroupedMLP, --moe-experts per_expert) "
                        "quantizes its input, and in the backward its output gradient, with tex.split_quantize and "
                        "one quantizer per local expert; split_quantize's multi_quantize_impl has a fused "
                        "multi-tensor kernel for delayed scaling only ('Currently only have fused kernel for FP8 "
                        "delayed scaling', nvte_multi_cast_transpose) and otherwise quantizes each expert's rows "
                        "alone (TE v2.10 769ed778 and v2.12 5671fd36 transformer_engine/pytorch/csrc/extensions/"
                        "cast.cpp; current scaling runs nvte_compute_amax, nvte_compute_scale_from_amax and "
                        "nvte_quantize_v2 per tensor, csrc/quantizer.cpp Float8CurrentScalingQuantizer::"
                        "quantize_impl), as each expert's own Linear does under SequentialMLP: every FP8 operand "
                        "cast of an expert GEMM (and the experts' weights, once per step) runs once per local "
                        "expert. Priced as fp8_casts prices a cast, at each expert's share of the elements, less "
                        "the one cast fp8_casts already counts: the measured per-cast fixed cost (H200 amax + scale "
                        "+ cast rows, cost/gemmclass.py) once more per extra expert, the recipe's kernels per cast; "
                        "each extra kernel also gets a launch gap (launch_gaps).",
    "moe_fp8_padding": "Megatron-Core (core_v0.16.0, 3bec9aa9) transformer/moe/experts.py TEGroupedMLP.forward: under "
                       "FP8 the permuted rows go through TE Fp8Padding before linear_fc1 and the experts' output "
                       "through Fp8Unpadding after linear_fc2 (and the permuted probabilities, one column, through "
                       "Fp8Padding); TE (v2.10, 769ed778) module/fp8_padding.py pads every expert's rows to a "
                       "multiple of 16 (32 under MXFP8) with tex.fused_multi_row_padding, a copy of the whole "
                       "tensor, skipped only when every count is already aligned, and the backward copies the "
                       "gradient back (fp8_unpadding.py the reverse). Megatron-Bridge sets "
                       "moe_router_padding_for_fp8=False (recipes/qwen/qwen3_moe.py), so the router does not align "
                       "the counts, and its benchmark's moe_router_force_load_balancing draws random logits "
                       "(router.py apply_random_logits): counts are almost never all aligned. Priced per copy as the "
                       "measured copy class over rows x hidden BF16 (read and write), plus one launch gap; the "
                       "GPU window of moe_host_bound includes them.",
    "optimizer_unfused": "An AdamW step that is not one fused kernel moves each fp32 parameter's state once per "
                         "elementwise pass. MosaicML Composer's DecoupledAdamW (composer/optim/"
                         "decoupled_weight_decay.py DecoupledAdamW.adamw, what llm-foundry trains with) loops over the "
                         "parameter tensors in Python and runs 9 eager kernels on each: param.mul_ (8 B per parameter), "
                         "exp_avg.mul_ (8) and .add_(grad) (12), exp_avg_sq.mul_ (8) and .addcmul_(grad, grad) (12), "
                         "sqrt (8), / (8), .add_(eps) (8), param.addcdiv_ (16): 88 B against the fused kernel's 28 B. "
                         "torch.optim.AdamW(foreach=True) runs the same passes over tensor lists (lerp_ for the first "
                         "moment: 8 passes, 80 B). Priced as the step's fused optimizer op (the measured adamw class "
                         "where the GPU has one) x bytes / 28 B, at least the loop's eager kernel launches (ops-floor "
                         "eager slope) for unfused; the term is that time minus the fused op's. Check on the H200 "
                         "(ops-memory adamw_foreach / adamw_fused at 64M and 268M parameters: 2.81x and 2.66x "
                         "measured, 80 / 28 = 2.86x by this count): tests/step/test_overheads.py.",
    "dp_bucket": "Megatron-Core DistributedDataParallelConfig.bucket_size: None means max(40,000,000, "
                 "1,000,000 x data-parallel size) parameters per bucket; the last bucket's reduction starts only "
                 "when the backward of its layers is done and is exposed. step/plan.py already exposes one "
                 "layer's reduction; this term adds the rest of a bucket larger than one layer.",
}


# FP8 scaling recipe -> (kernels per operand cast, bytes moved per element, weights cast once per step):
# "delayed": TE cast_transpose (read 2 B, write 1 B + 1 B transposed); "current": + an amax pass (read 2 B);
# "dynamic": torchao compiled amax reduction (read 2 B) + scale, cast and transposed copy (read 2 B, write 2 B);
# "eager": the unfused composition runtime/bench/ops.py measured (cost/gemmclass.CAST_COMPOSITION);
# "mxfp8": TE's MXFP8 quantize kernel (read 2 B, write 1 B + 1 B transposed + 2 / 32 B of E8M0 scales);
# "delayed_uncached": "delayed" called without is_first_microbatch, so TE casts the weights in every forward
# (transformer_engine/pytorch/module/linear.py at v0.10: update_fp8_weights = is_first_microbatch is None or
# is_first_microbatch), as llm-foundry's MPT blocks call their te.Linear.
FP8_SCALING = {"delayed": (1, 4.0, True), "current": (2, 6.0, True), "dynamic": (2, 6.0, False),
               "eager": (7, 13.0, False), "mxfp8": (1, 4.0 + 2.0 / 32, True), "delayed_uncached": (1, 4.0, False)}

FSDP_IMPLS = ("fsdp2", "flat")
# how a rank's local experts run (SOURCES moe_per_expert) -> how the host issues them (step/moe_host.HOST_IMPLS):
# one grouped kernel; one cuBLAS GEMM each issued in C++ from one Python call (TE GroupedLinear); a Python loop
# with one GEMM each (Megatron-Core SequentialMLP)
MOE_EXPERTS = {"grouped": "grouped", "per_expert": "grouped", "sequential": "sequential"}
# AdamW implementation -> (kernels per parameter tensor, bytes moved per fp32 parameter): SOURCES["optimizer_unfused"]
OPTIMIZER_IMPLS = {"fused": (1, 28.0), "foreach": (8, 80.0), "unfused": (9, 88.0)}


@dataclass(frozen=True)
class OverheadModel:
    """Which step-level overheads are priced, and their parameters (sources in SOURCES)."""

    kernel_gap_s: float = 0.9e-6  # idle GPU per eager kernel launch (SOURCES["launch_gaps"])
    cuda_graphs: bool = False  # the step is captured in CUDA graphs: graph_kernel_gap_s per kernel
    graph_kernel_gap_s: float = 0.5e-6
    grad_clip: bool = True
    fp8_recipe: bool = True  # cast kernels of the FP8 GEMMs under dtype fp8 (which ops are FP8: layer.op_dtype)
    fp8_scaling: str = "delayed"  # FP8_SCALING key: Transformer Engine's default recipe
    dp_bucket_params: float = 40e6  # Megatron-Core default bucket (at least 1e6 x dp)
    dp_bucket: bool = True
    fsdp_impl: str = "fsdp2"  # "fsdp2" (per-parameter sharding, copy-out) or "flat" (FSDP1, Megatron FSDP)
    moe_host_sync: bool = True  # the host waits for the token counts once per MoE layer forward (SOURCES)
    moe_host_bound: bool = True  # MoE layer passes whose host issue time exceeds their GPU time (SOURCES)
    moe_experts: str = "grouped"  # MOE_EXPERTS key: how the local experts' GEMMs run
    optimizer_impl: str = "fused"  # OPTIMIZER_IMPLS: fused AdamW kernel, foreach, or a per-tensor loop (Composer)

    def __post_init__(self) -> None:
        if self.fsdp_impl not in FSDP_IMPLS:
            raise C3kitError(f"overheads: fsdp_impl {self.fsdp_impl!r}: use one of {', '.join(FSDP_IMPLS)}")
        for name in ("kernel_gap_s", "graph_kernel_gap_s", "dp_bucket_params"):
            if not getattr(self, name) >= 0:
                raise C3kitError(f"overheads: {name} must be >= 0, got {getattr(self, name)!r}")
        if self.optimizer_impl not in OPTIMIZER_IMPLS:
            raise C3kitError(f"overheads: optimizer_impl {self.optimizer_impl!r}: use one of {', '.join(OPTIMIZER_IMPLS)}")
        if self.fp8_scaling not in FP8_SCALING:
            raise C3kitError(f"overheads: unknown fp8_scaling {self.fp8_scaling!r}: use one of {', '.join(FP8_SCALING)}")
        if self.moe_experts not in MOE_EXPERTS:
            raise C3kitError(f"overheads: moe_experts {self.moe_experts!r}: use one of {', '.join(MOE_EXPERTS)}")


DEFAULT_OVERHEADS = OverheadModel()
NO_OVERHEADS = OverheadModel(kernel_gap_s=0.0, graph_kernel_gap_s=0.0, grad_clip=False, fp8_recipe=False,
                             dp_bucket=False, moe_host_sync=False, moe_host_bound=False)


@dataclass(frozen=True)
class Overhead:
    """One priced overhead: seconds per GPU per step on the critical path, how many runs, and how it was priced."""

    name: str
    seconds: float
    runs: float
    detail: str
    source: str


def pipeline_factor(graph) -> float:
    """Critical-path multiple of per-micro-batch time: (m + (pp - 1) / vpp) / m."""
    m = max(int(graph.micro_batches), 1)
    pp, vpp = int(getattr(graph.par, "pp", 1)), max(int(getattr(graph.par, "vpp", 1)), 1)
    return (m + (pp - 1) / vpp) / m


def fp8_cast_elements(nd) -> tuple[float, float]:
    """(activation or gradient elements, weight elements) cast to FP8 for one run of a GEMM node."""
    from c3kit.workload.ops import Gemm

    op = nd.op
    if not isinstance(op, Gemm) or op.dtype != "fp8":
        return 0.0, 0.0
    if nd.grad == "dgrad":  # dgrad (M x K from M x N and N x K): the output gradient M x N is cast
        return float(op.m * op.n * op.batch), 0.0
    if nd.grad == "wgrad":  # reuses the transposed copies made for the forward and the dgrad
        return 0.0, 0.0
    return float(op.m * op.k * op.batch), float(op.k * op.n * op.batch)


def expert_cast_splits(model: OverheadModel, local_experts: int) -> int:
    """Quantize calls one FP8 operand cast of a MoE layer's expert GEMM takes (SOURCES moe_expert_casts): one per
    local expert where the experts run one GEMM each, except Transformer Engine's GroupedLinear under delayed
    scaling (one fused multi-tensor cast); 1 for a grouped GEMM."""
    if model.moe_experts == "grouped" or (model.moe_experts == "per_expert" and model.fp8_scaling == "delayed"):
        return 1
    return max(int(local_experts), 1)


def fp8_cast_time(elements: float, hw, timer, scaling: str = "delayed") -> tuple[float, int]:
    """(seconds, kernels) of casting `elements` BF16 elements to FP8 under a scaling recipe (FP8_SCALING)."""
    from c3kit.cost.gemmclass import CAST_COMPOSITION, gemm_classes_for
    from c3kit.workload.ops import MemOp

    if elements <= 0:
        return 0.0, 0
    kernels, per_el, _ = FP8_SCALING[scaling]
    cls = gemm_classes_for(hw)
    if cls.cast_s_per_element is not None:
        k0, b0 = CAST_COMPOSITION
        return kernels / k0 * cls.cast_fixed_s + per_el / b0 * cls.cast_s_per_element * elements, kernels
    return float(timer(MemOp("fp8_cast", per_el * elements), hw)), kernels


def optimizer_tensors(graph, flat: bool) -> int:
    """Parameter tensors the optimizer loops over on one rank: one flat parameter per FSDP unit (every layer and the
    root) with flat FSDP, else every weight matrix, bias and norm of the stage's layers plus embedding, final norm and
    head."""
    L = int(graph.layers_per_stage)
    if flat:
        return L + 1
    m = graph.model
    norms = 2 * (2 if m.norm == "layernorm" else 1)
    return L * (norms + (4 + (3 if m.gated_mlp else 2)) * (2 if m.bias else 1)) + 3


def optimizer_impl_overhead(graph, hw, fused_s: float, params: float, model: OverheadModel) -> Overhead:
    """Seconds an AdamW of model.optimizer_impl adds over the fused optimizer op priced at fused_s (SOURCES)."""
    kernels_each, per_param = OPTIMIZER_IMPLS[model.optimizer_impl]
    base = OPTIMIZER_IMPLS["fused"][1]
    t = fused_s * per_param / base
    detail = f"{params:,.0f} parameters x {per_param:.0f} B vs {base:.0f} B fused"
    kernels = 0
    if model.optimizer_impl == "unfused":
        flat = getattr(graph.par, "fsdp", False) and model.fsdp_impl == "flat"
        kernels = kernels_each * optimizer_tensors(graph, flat)
        t = max(t, kernels * eager_launch_s(hw))
        detail += f", {kernels:,} eager kernels"
    return Overhead("optimizer_unfused", max(t - fused_s, 0.0), kernels, detail, SOURCES["optimizer_unfused"])


def step_overheads(graph, hw, timer, plan, op_t, model: OverheadModel = DEFAULT_OVERHEADS) -> tuple[Overhead, ...]:
    """Every enabled overhead of one step graph on hw, priced with `timer` (op_t: the nodes' times, one run)."""
    from c3kit.workload.graph import ADAM_BYTES_PER_PARAM
    from c3kit.workload.ops import Collective, MemOp

    nodes = graph.nodes
    runs = plan.multiplicity
    pf = pipeline_factor(graph)
    out: list[Overhead] = []
    fp8 = model.fp8_recipe and str(graph.dtype) == "fp8"

    # FP8 recipe: the cast kernels feeding every FP8 GEMM (per micro-batch; TE's weight casts once per step)
    cast_s = cast_kernels = split_s = split_kernels = 0.0
    if fp8:
        once = FP8_SCALING[model.fp8_scaling][2]
        mbs = max(int(graph.micro_batches), 1)
        cache: dict = {}
        for i, nd in enumerate(nodes):
            act, wt = fp8_cast_elements(nd)
            if graph.phase != "train":  # inference engines load weights quantized to FP8 offline: no weight casts
                wt = 0.0
            if nd.stream != "compute" or not act + wt:
                continue
            per = pf if nd.scope != "step" else 1.0
            splits = expert_cast_splits(model, nd.op.batch) if nd.role.removeprefix("re_") == "experts" else 1
            for el, n_runs, crit in ((act, runs[i], per), (wt, runs[i] / mbs if once else runs[i], 1.0 if once else per)):
                if el:
                    hit = cache.get((el, 1))
                    if hit is None:
                        hit = cache[(el, 1)] = fp8_cast_time(el, hw, timer, model.fp8_scaling)
                    cast_s += hit[0] * n_runs * crit
                    cast_kernels += hit[1] * n_runs
                    if splits > 1:  # the same bytes, cast one local expert at a time (moe_expert_casts)
                        each = cache.get((el, splits))
                        if each is None:
                            each = cache[(el, splits)] = fp8_cast_time(el / splits, hw, timer, model.fp8_scaling)
                        split_s += (splits * each[0] - hit[0]) * n_runs * crit
                        split_kernels += (splits * each[1] - hit[1]) * n_runs
        out.append(Overhead("fp8_casts", cast_s, cast_kernels,
                            f"{cast_kernels:,.0f} cast kernels ({model.fp8_scaling} scaling)", SOURCES["fp8_casts"]))
        if split_kernels > 0:
            out.append(Overhead("moe_expert_casts", split_s, split_kernels,
                                f"{split_kernels:,.0f} more cast kernels, one quantize per local expert "
                                f"({model.fp8_scaling} scaling)", SOURCES["moe_expert_casts"]))
        cast_kernels += split_kernels

    # launch gaps: one kernel per compute node run (+ casts)
    gap = model.graph_kernel_gap_s if model.cuda_graphs else model.kernel_gap_s
    if gap > 0:
        micro = sum(runs[i] for i, nd in enumerate(nodes) if nd.stream == "compute" and nd.scope != "step")
        once = sum(runs[i] for i, nd in enumerate(nodes) if nd.stream == "compute" and nd.scope == "step")
        kernels = micro + once + cast_kernels
        out.append(Overhead("launch_gaps", gap * ((micro + cast_kernels) * pf + once), kernels,
                            f"{kernels:,.0f} kernels x {gap * 1e6:.2f} us{' (CUDA graphs)' if model.cuda_graphs else ''}",
                            SOURCES["launch_gaps"]))

    # gradient clipping over the local (sharded) parameters, plus the norm's all-reduce
    opt = [i for i, nd in enumerate(nodes) if nd.role == "optimizer" and isinstance(nd.op, MemOp)]
    if model.grad_clip and opt and graph.phase == "train":
        params = nodes[opt[0]].op.bytes / ADAM_BYTES_PER_PARAM
        t = float(timer(MemOp("grad_clip", 12.0 * params), hw))
        gpus = int(graph.par.gpus)
        if gpus > 1:
            span = "inter" if gpus > graph.gpus_per_node else "intra"
            t += float(timer(Collective("grad_norm", "all_reduce", 4.0, gpus, "dp", span,
                                        graph.gpus_per_node if span == "inter" and gpus % graph.gpus_per_node == 0
                                        else 0), hw))
        out.append(Overhead("grad_clip", t, 1, f"{params:,.0f} local parameters", SOURCES["grad_clip"]))

    # an optimizer that is not one fused kernel: its extra elementwise passes (and, looped, its launches)
    if model.optimizer_impl != "fused" and opt and graph.phase == "train":
        out.append(optimizer_impl_overhead(graph, hw, float(op_t[opt[0]]), nodes[opt[0]].op.bytes / ADAM_BYTES_PER_PARAM,
                                           model))

    # MoE (the load imbalance is Parallelism.moe_imbalance, in the expert GEMMs' rows): count waits, host-bound
    # passes, per-expert GEMMs
    if graph.model.is_moe and graph.phase == "train":
        out += moe_overheads(graph, hw, timer, runs, op_t, pf, model, gap)

    # FSDP2: the all-gather copy-out on the compute stream, once per all-gather run
    if model.fsdp_impl == "fsdp2" and getattr(graph.par, "fsdp", False):
        copy_s = copies = 0.0
        cache = {}
        for i, nd in enumerate(nodes):
            if nd.role != "fsdp_ag" or not isinstance(nd.op, Collective) or nd.op.ranks < 2:
                continue
            c = MemOp(nd.op.name + ".copy_out", 2.0 * nd.op.bytes)  # read the gathered buffer, write the params
            t = cache.get(c)
            if t is None:
                t = cache[c] = float(timer(c, hw))
            copy_s += t * runs[i] * pf
            copies += runs[i]
        if copies:
            out.append(Overhead("fsdp_copy_out", copy_s, copies, f"{copies:,.0f} all-gather copy-outs",
                                SOURCES["fsdp_copy_out"]))

    # DP buckets larger than one layer: the rest of the last bucket is exposed
    dp = int(getattr(graph.par, "dp", 1))
    grads = [i for i, nd in enumerate(nodes) if nd.role == "dp_grad" and nd.scope == "layer"
             and isinstance(nd.op, Collective)]
    if (model.dp_bucket and dp > 1 and not getattr(graph.par, "fsdp", False) and grads
            and getattr(graph.par, "dp_overlap", True)):  # reduced after the backward: all exposed already
        i = grads[0]
        op = nodes[i].op
        per_param = 4.0  # fp32 gradients (workload.graph's grad_dtype default)
        layer_params = op.bytes / per_param
        total = layer_params * int(graph.layers_per_stage)
        bucket = min(max(model.dp_bucket_params, 1e6 * dp), total)
        if bucket > layer_params:
            from c3kit.step.placement import placed

            big = placed(replace(nodes[i], op=replace(op, bytes=bucket * per_param)), graph)
            t = max(float(timer(big, hw)) - float(op_t[i]), 0.0)
            out.append(Overhead("dp_bucket", t, 1, f"last bucket {bucket:,.0f} params vs one layer {layer_params:,.0f}",
                                SOURCES["dp_bucket"]))
    return tuple(out)


def moe_overheads(graph, hw, timer, runs, op_t, pf: float, model: OverheadModel, gap: float) -> list[Overhead]:
    """The MoE terms of one training step graph: moe_host_sync, moe_host_bound, moe_per_expert (SOURCES)."""
    from c3kit.step.moe_host import exposed_host_s, host_issue_s, moe_host_calibration, moe_pass_gpu, per_expert_gemms

    out: list[Overhead] = []
    passes = moe_pass_gpu(graph, op_t, runs, gap)
    if not passes or not (model.moe_host_sync or model.moe_host_bound or model.moe_experts != "grouped"):
        return out
    n_fwd = sum(n for ps, (_, n) in passes.items() if ps != "bwd")
    if model.moe_host_sync:
        each = moe_host_calibration(hw.name).sync_s + eager_launch_s(hw)
        out.append(Overhead("moe_host_sync", each * n_fwd * pf, n_fwd,
                            f"{n_fwd:,.0f} host waits x {each * 1e6:.1f} us", SOURCES["moe_host_sync"]))
    el = int(graph.model.n_experts) // max(int(getattr(graph.par, "ep", 1)), 1)
    if model.moe_experts != "grouped":
        t, gemms, per_pass = per_expert_gemms(graph, hw, timer, runs, op_t, gap)
        out.append(Overhead("moe_per_expert", max(t, 0.0) * pf, gemms,
                            f"{gemms:,.0f} expert GEMMs one per expert ({t * pf:+.4g} s vs grouped)",
                            SOURCES["moe_per_expert"]))
        if t > 0:  # the GPU time the host's issue overlaps with (the grouped price kept where it is the higher)
            passes = {ps: (g + per_pass[ps], n) for ps, (g, n) in passes.items()}
    if model.moe_experts == "per_expert" and model.fp8_recipe and str(graph.dtype) == "fp8":
        t, copies, per_pass = fp8_padding_copies(graph, hw, timer, runs, gap)
        out.append(Overhead("moe_fp8_padding", t * pf, copies,
                            f"{copies:,.0f} row-padding copies of the experts' inputs and outputs",
                            SOURCES["moe_fp8_padding"]))
        passes = {ps: (g + per_pass[ps], n) for ps, (g, n) in passes.items()}
    if model.moe_host_bound:
        cal = moe_host_calibration(hw.name)
        host = {ps: host_issue_s(cal, ps, el, MOE_EXPERTS[model.moe_experts]) for ps in ("fwd", "bwd")}
        t = sum(exposed_host_s(host["bwd" if ps == "bwd" else "fwd"], g) * n for ps, (g, n) in passes.items())
        out.append(Overhead("moe_host_bound", t * pf, sum(n for _, n in passes.values()),
                            f"host {host['fwd'] * 1e3:.2f} / {host['bwd'] * 1e3:.2f} ms per layer fwd / bwd, "
                            f"{el} local experts ({model.moe_experts})", SOURCES["moe_host_bound"]))
    return out


def fp8_padding_copies(graph, hw, timer, runs, gap_s: float) -> tuple[float, float, dict]:
    """(seconds per step, copies per step, {pass: seconds per pass run}) of the FP8 row padding around the local
    experts (SOURCES moe_fp8_padding): fc1's input and fc2's output, rows x hidden BF16, copied once in the forward
    and their gradients once in the backward, each on the measured copy class plus one launch gap; a recomputed
    forward copies again. One critical path (no pipeline factor); passes as in step.moe_host.moe_pass_gpu."""
    from c3kit.workload.ops import Gemm, MemOp

    t = copies = 0.0
    per_pass = {"fwd": 0.0, "re": 0.0, "bwd": 0.0}
    for i, nd in enumerate(graph.nodes):
        op = nd.op
        if nd.stream != "compute" or nd.role.removeprefix("re_") != "experts" or not isinstance(op, Gemm) or nd.grad:
            continue
        width = {"expert_fc1": op.k, "expert_fc2": op.n}.get(nd.name.removeprefix("re."), 0)
        if not width:
            continue
        el = float(op.m * op.batch * width)
        c = float(timer(MemOp("moe_fp8_padding", 2.0 * 2.0 * el, 0.0, (("copy", el, 1),)), hw)) + gap_s
        if nd.name.startswith("re."):
            per_pass["re"] += c
            t, copies = t + c * runs[i], copies + runs[i]
        else:
            per_pass["fwd"] += c
            per_pass["bwd"] += c
            t, copies = t + 2 * c * runs[i], copies + 2 * runs[i]
    return t, copies, per_pass
