"""The Python API of `c3kit analyze`: one call, the CLI's defaults, a result with to_json() and to_pandas().

`c3kit analyze` calls `analyze()` here with its options, so the command and the API cannot drift apart:
the CLI's option defaults are read from this function's signature.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from c3kit.errors import C3kitError

MAX_GPUS = 1 << 20  # about a million GPUs: ten times the largest announced cluster; beyond it a typo
MEMORY_KINDS = ("weights", "gradients", "optimizer", "activations", "kv_cache", "buffers")
POLICIES = ("simple", "serial")  # the old --policy names; --overlap takes these modes and more (step/policy.py)


@dataclass(frozen=True)
class AnalyzeResult:
    """One projected step: the resolved layout (`config`), the per-op projection (`step`) and memory per GPU."""

    config: object  # c3kit.step.config.StepConfig
    step: object  # c3kit.step.StepResult
    memory: object  # c3kit.workload.memory.MemoryReport
    cost_model: str  # the cost model's label, e.g. "efficiency (sustained clocks)"
    overlap: str = "contended"  # the --overlap mode the step was projected under (step.policy.DEFAULT_MODE)
    overlap_modes: tuple = ()  # step time per overlap mode (c3kit.step.project.compare_overlap rows)
    trace: str | None = None  # the Perfetto trace file written, if any

    @property
    def totals(self):
        """The step's StepTotals (seconds, MFU, tokens/s; SI units)."""
        return self.step.totals

    @property
    def step_time(self) -> float:
        """Seconds per training or inference step."""
        return self.step.totals.step_time

    def config_dict(self) -> dict:
        """The resolved layout as plain data (model, GPU, parallel sizes, batch, recompute, dtype)."""
        return config_dict(self.config)

    def memory_dict(self) -> dict:
        """Bytes per GPU by kind, the total, the GPU's capacity, the headroom and whether it fits."""
        return memory_dict(self.memory)

    def basis(self) -> dict:
        """Where each op class's parameters come from on this GPU (cost.basis: measured / transferred /
        projected / datasheet)."""
        from c3kit.cost.basis import basis

        return basis(self.config.hw.name)

    def basis_sources(self) -> dict:
        """Where each op class's parameters come from on this GPU: calibration file, transfer, published source
        with its retrieval date, or datasheet (cost.basis.basis_sources)."""
        from c3kit.cost.basis import basis_sources

        return basis_sources(self.config.hw.name)

    def attention(self) -> dict:
        """The attention backend priced (asked for, or the GPU's default: what current PyTorch's SDPA picks
        there), whether it is the default, and the basis of its price on this GPU."""
        return attention_dict(self.config)

    def grad_acc(self) -> str:
        """How weight gradients accumulate into .grad in this step (workload.layer.GRAD_ACC), as priced."""
        from c3kit.workload.layer import default_grad_acc

        cfg = self.config
        if cfg.phase != "train":
            return "none"
        return getattr(cfg, "grad_acc", "") or default_grad_acc(getattr(cfg, "glue", "split"), cfg.par.grad_accum)

    def to_dict(self) -> dict:
        """Everything as plain JSON-ready data (the document `c3kit analyze --json` prints, less `out`)."""
        return {"config": self.config_dict(), "chosen": list(self.config.chosen), "cost_model": self.cost_model,
                "basis": self.basis(), "basis_sources": self.basis_sources(), "attention": self.attention(),
                "norm_rope": getattr(self.config, "norm_rope", "fused"), "glue": getattr(self.config, "glue", "split"),
                "grad_acc": self.grad_acc(),
                "tried": [asdict(c) for c in self.config.tried],
                **self.step.to_dict(), "memory": self.memory_dict(), "overlap": self.overlap,
                "overlap_modes": [dict(m) for m in self.overlap_modes], "trace": self.trace}

    def to_json(self, indent: int | None = 2) -> str:
        """to_dict() as a JSON string."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_pandas(self):
        """Every node of the step graph as a DataFrame: role, phase, stream, runs, compute/comm/exposed/hidden s."""
        return self.step.frame()

    def by_role(self):
        """Per-op rows summed by (role, phase), a DataFrame sorted by share of step."""
        return self.step.by_role()

    def memory_frame(self):
        """Memory per GPU as a DataFrame: one row per kind plus total and capacity, bytes and GB."""
        import pandas as pd

        m = self.memory
        rows = [(k, getattr(m, k)) for k in MEMORY_KINDS] + [("total", m.total), ("capacity", m.capacity)]
        return pd.DataFrame({"kind": [k for k, _ in rows], "bytes": [float(v) for _, v in rows],
                             "gb": [float(v) / 1e9 for _, v in rows]})


def config_dict(cfg) -> dict:
    """A resolved StepConfig as plain data (every option that changes the priced step, so a --json answer says what
    was asked)."""
    p = cfg.par
    facts = framework_facts_dict(cfg)  # the framework facts validation prices per run, by analyze's option names
    return {**facts, "model": cfg.model.name, "hw": cfg.hw.name, "phase": cfg.phase, "seq": cfg.seq, "dtype": cfg.dtype,
            "gpus": p.gpus, "tp": p.tp, "sp": p.sp, "dp": p.dp, "fsdp": p.fsdp, "pp": p.pp, "vpp": p.vpp, "ep": p.ep,
            "cp": p.cp, "pp_split": p.pp_split,
            "micro_batch": p.micro_batch, "global_batch": p.global_batch, "micro_batches": p.grad_accum,
            "recompute": p.recompute, "dist_optimizer": p.dist_optimizer, "fsdp_sync": p.fsdp_sync,
            "dp_overlap": p.dp_overlap, "pp_p2p_overlap": p.pp_p2p_overlap, "tp_comm_overlap": p.tp_comm_overlap,
            "pp_engine": p.pp_engine,
            "cp_impl": p.cp_impl,
            "moe_a2a_overlap": p.moe_a2a_overlap, "moe_imbalance": p.moe_imbalance,
            "train_metrics": getattr(cfg, "train_metrics", 0), "flat_param_grads": getattr(cfg, "flat_param_grads", False)}


def framework_facts_dict(cfg) -> dict:
    """The framework facts of a resolved StepConfig by their analyze option names (gradient reduce dtype, loss
    kernel, bias gradients, training-metrics dtype; ZeRO-2)."""
    return {"zero2": bool(getattr(cfg.par, "zero2", False)), "grad_reduce_dtype": getattr(cfg, "grad_dtype", "fp32"),
            "loss_kernel": getattr(cfg, "loss_kernel", "eager"), "bias_grads": getattr(cfg, "bias_grads", False),
            "train_metrics_dtype": "fp32" if getattr(cfg, "metrics_fp32", True) else "bf16"}


def attention_dict(cfg) -> dict:
    """{backend, default (bool), basis, source of the default} of a resolved StepConfig."""
    from c3kit.cost.attention import attention_basis, default_backend, default_source, resolve_backend

    asked = getattr(cfg, "attn_backend", "")
    name = resolve_backend(asked, cfg.hw.name)
    return {"backend": name, "default": not asked or name == default_backend(cfg.hw.name),
            "basis": attention_basis(cfg.hw.name)[name], "default_source": default_source(cfg.hw.name)}


def memory_dict(m) -> dict:
    """A MemoryReport as plain data (bytes)."""
    return {**{k: float(getattr(m, k)) for k in MEMORY_KINDS}, "total": float(m.total),
            "capacity": float(m.capacity), "headroom": float(m.headroom), "fits": bool(m.fits), "gpu": m.gpu}


def check_request(hw: str, gpus: int | None, dp: int | None, fsdp: bool | None, dist_opt: bool | None, dtype: str) -> None:
    """Refuse requests that resolve() would accept but that make no sense (raises C3kitError)."""
    from c3kit.hw import get_gpu

    if fsdp and dist_opt:
        raise C3kitError("--fsdp already shards the optimizer state (ZeRO-3 includes ZeRO-1): drop --dist-opt")
    for name, v in (("gpus", gpus), ("dp", dp)):
        if isinstance(v, int) and v > MAX_GPUS:
            raise C3kitError(f"--{name} {v:,} is more GPUs than any cluster has: at most {MAX_GPUS:,}")
    gpu = get_gpu(hw)
    if dtype == "fp8" and "fp8" not in gpu.flops:
        raise C3kitError(f"{gpu.name} has no FP8 tensor cores ({gpu.name} lists {', '.join(gpu.flops)}): "
                         "use --dtype bf16, or a GPU with FP8 such as H100-SXM")


def _metrics_fp32(train_metrics_dtype: str, train_metrics: int) -> bool:
    """Whether the training metrics score fp32 logits (Structure.metrics_fp32), from the dtype asked for."""
    from c3kit.workload.layer import check_train_metrics_dtype

    if check_train_metrics_dtype(train_metrics_dtype) != "fp32" and not train_metrics:
        raise C3kitError(f"--train-metrics-dtype {train_metrics_dtype} is the dtype of the training metrics' passes: "
                         "use it with --train-metrics > 0")
    return train_metrics_dtype == "fp32"


def with_power(cost_model: str, power: str):
    """(CostModel, label) for a cost model name and a GEMM clock mode; roofline stays the ideal (no clock factor)."""
    from c3kit.cost.model import as_model

    cm = as_model(cost_model).with_(power=power)  # an unknown mode is a one-line CostError
    if power == "burst" or cm.kind == "roofline":
        return cm.with_(power="burst"), cost_model
    return cm, f"{cost_model} ({power} clocks)"


def analyze(model: str = "Llama-3-70B", hw: str = "H200-SXM", *, gpus: int | None = None, tp: int | None = None,
            sp: bool | None = None, dp: int | None = None, fsdp: bool | None = None, dist_opt: bool | None = None,
            pp: int | None = None, vpp: int = 1, ep: int = 1, cp: int = 1, pp_split: str = "even", seq: int = 8192,
            batch: int | None = None, micro_batch: int | None = None, dtype: str = "bf16", phase: str = "train",
            recompute: str | None = None, overlap: str | None = None, policy: str | None = None, trace=None,
            compare_overlap: bool = True, overheads="default", fsdp_impl: str = "fsdp2",
            cost_model: str = "efficiency", power: str = "sustained",
            attention_backend: str | None = None, norm_rope: str = "fused", fp8_scaling: str = "delayed",
            glue: str = "split", grad_acc: str = "", fsdp_sync: str = "micro",
            loss_kernel: str = "eager", bias_grads: bool = False, grad_reduce_dtype: str = "fp32",
            train_metrics_dtype: str = "fp32", zero2: bool = False,
            recompute_every: int = 2, moe_a2a_overlap: bool = False, train_metrics: int = 0,
            flat_param_grads: bool = False, cp_impl: str = "ring", moe_experts: str = "grouped",
            moe_imbalance: float = 1.0, dp_overlap: bool = True, pp_p2p_overlap: bool = False,
            optimizer_impl: str = "fused", tp_comm_overlap: str = "none", pp_engine: str = "megatron") -> AnalyzeResult:
    """Project one training or inference step per operator, with memory per GPU (the `c3kit analyze` call).

    overlap: none, simple, contended (default: step.policy.DEFAULT_MODE), auto, a schedule family or a schedule
    name (c3kit.step.policy);
    policy is its old name (serial = none). trace: a path to write the whole step's Perfetto trace to.
    compare_overlap: also the step time under none, simple, contended, auto and each family (result.overlap_modes).
    overheads: the step-level overheads added to the step (c3kit.step.overheads): "default"
    (DEFAULT_OVERHEADS, what `c3kit validate` scores), an OverheadModel, or None for none.
    cp: context-parallel size (ring attention; gpus = tp x cp x pp x dp, never searched). pp_split: how
    layers split over pipeline stages when they do not divide (even, torchtitan, embedding_loss, llama3).
    fsdp_impl: "fsdp2" (PyTorch fully_shard: the all-gather copy-out is priced) or "flat" (FSDP1,
    Megatron FSDP); it sets the default overheads' OverheadModel.fsdp_impl.
    fp8_scaling: the FP8 recipe whose cast kernels feed the FP8 GEMMs (step.overheads.FP8_SCALING: delayed,
    current, dynamic, eager, mxfp8, delayed_uncached); it sets the default overheads' OverheadModel.fp8_scaling.
    attention_backend: the attention kernel, one of c3kit.workload.attention.BACKENDS (cudnn, flash2, flash1, efficient,
    unfused); None: what current PyTorch's SDPA picks on the GPU (cudnn on H100, H200 and B200, flash2 elsewhere;
    cost/data/attention_backends.toml).
    norm_rope: how RMSNorm and RoPE run: "fused" (one kernel per norm, rotate-half RoPE) or "eager" (written out
    in fp32 eager PyTorch, as torchtitan's `rmsnorm` and the Llama reference code); workload.layer.NORM_ROPE.
    glue: the backward's memory-bound glue by how the block is written: "split" (one QKV and one gate/up GEMM split
    into views: cat copies), "separate" (separate projections: input-gradient adds) or "fused" (Megatron-Core with
    Transformer Engine, compiled code: none); grad_acc: "none", "micro" or "every" (AccumulateGrad's adds into
    .grad), "" = "micro" for eager code with several micro-batches; workload.layer.GLUE, GRAD_ACC.
    fsdp_sync: with FSDP, "micro" (parameters gathered and gradients reduce-scattered every micro-batch) or "step"
    (once per step, parameters kept unsharded over the micro-batches: torchtitan with pipeline parallelism);
    workload.parallel.FSDP_SYNC, FSDP_SYNC_SOURCES. recompute: none, selective, full, op or layer
    (workload.parallel.RECOMPUTE_SOURCES); recompute_every: with "layer", every N-th layer is recomputed.
    moe_a2a_overlap: a MoE model's expert-parallel all-to-alls overlap another micro-batch's compute (Megatron-Core
    overlap_moe_expert_parallel_comm; workload.parallel.MOE_A2A_OVERLAP_SOURCE).
    train_metrics: cross-entropy passes over the logits per micro-batch for training metrics (Composer's
    LanguageCrossEntropy and LanguagePerplexity: 2; workload.layer.check_train_metrics); flat_param_grads: FSDP1's
    per-unit gradient concatenation (workload.layer.FLAT_PARAM_GRADS); cp_impl: "ring" or "torch" (torch
    context_parallel as torchtitan runs it: workload.parallel.CP_IMPL_SOURCES).
    moe_experts: how a MoE rank's local experts' GEMMs run (step.overheads.MOE_EXPERTS: grouped, per_expert as
    Transformer Engine GroupedLinear, sequential as Megatron-Core SequentialMLP); it sets the default overheads'
    OverheadModel.moe_experts. moe_imbalance: the busiest expert-parallel rank's expert tokens over the balanced
    share (Parallelism.moe_imbalance, >= 1). dp_overlap False: DP gradients
    reduced after the backward (Megatron-LM 2021-22, DeepSpeed's pipeline engine); pp_p2p_overlap: pipeline p2p
    behind compute (Megatron-Core overlap_p2p_comm): workload.parallel.DP_OVERLAP_SOURCES, PP_P2P_OVERLAP_SOURCE.
    optimizer_impl: AdamW as one fused kernel, foreach, or a per-tensor loop ("unfused": Composer's DecoupledAdamW);
    it sets the default overheads' OverheadModel.optimizer_impl (step.overheads.OPTIMIZER_IMPLS).
    loss_kernel: the training loss's cross-entropy kernels (workload.layer.LOSS_KERNELS: eager, xentropy as
    llm-foundry's fused_crossentropy); bias_grads: a biased model's linears reduce their bias gradients in kernels of
    their own (workload.layer.BIAS_GRADS); grad_reduce_dtype: the dtype DP gradients are reduced and held in
    (workload.layer.GRAD_REDUCE_DTYPES); train_metrics_dtype: the logits' dtype in the train_metrics passes
    (workload.layer.TRAIN_METRICS_DTYPES; bf16: METRICS_BF16, needs train_metrics > 0). zero2: ZeRO-2, gradients
    sharded over DP as well as the optimizer state (workload.parallel.Parallelism.zero2).
    tp_comm_overlap: Transformer Engine's userbuffers TP overlap, by the forward reduce-scatters' method: none,
    pipeline (TE's defaults), pipeline_margin (NeMo's H100 configs) or ring_exchange (Megatron-Bridge's FP8 H100
    configs); each tensor-parallel pair is then priced by its method's overlap-engine schedule (step/tpcomm.py,
    workload.parallel.TP_COMM_OVERLAP_SOURCES). Needs sp with tp > 1.
    Unset layout sizes are searched (c3kit.step.config.resolve) with this cost model and overlap mode
    (auto, families and schedules included: each candidate layout is priced under that mode).
    """
    from c3kit.step import project
    from c3kit.step.config import resolve
    from c3kit.step.policy import DEFAULT_MODE, policy_for

    mode = overlap or ({"serial": "none"}.get(policy, policy) if policy else DEFAULT_MODE)
    policy_for(mode)  # reject an unknown mode before any work
    from c3kit.workload.attention import check_backend

    backend = check_backend(attention_backend or "")
    from c3kit.workload.layer import check_glue, check_grad_acc, check_norm_rope

    check_norm_rope(norm_rope)
    check_glue(glue)
    if grad_acc:
        check_grad_acc(grad_acc)
    check_request(hw, gpus, dp, fsdp, dist_opt, dtype)
    metrics_fp32 = _metrics_fp32(train_metrics_dtype, train_metrics)
    if isinstance(overheads, str):
        if overheads != "default":
            raise C3kitError(f"overheads {overheads!r}: give 'default', an OverheadModel or None")
        from c3kit.step.overheads import DEFAULT_OVERHEADS

        overheads = DEFAULT_OVERHEADS
        if (fsdp_impl, fp8_scaling, moe_experts, optimizer_impl) != (
                overheads.fsdp_impl, overheads.fp8_scaling, overheads.moe_experts, overheads.optimizer_impl):
            from dataclasses import replace

            # an unknown name is a one-line C3kitError
            overheads = replace(overheads, fsdp_impl=fsdp_impl, fp8_scaling=fp8_scaling, moe_experts=moe_experts,
                                optimizer_impl=optimizer_impl)
    cm, label = with_power(cost_model, power)
    pw = getattr(cm, "power", "burst")
    search = policy_for(mode, pw)  # the layout search prices under the mode asked for (auto included)
    cfg = resolve(model=model, hw=hw, gpus=gpus, tp=tp, sp=sp, dp=dp, fsdp=fsdp, pp=pp, ep=ep, seq=seq,
                  batch=batch, micro_batch=micro_batch, dtype=dtype, phase=phase, recompute=recompute, vpp=vpp,
                  dist_optimizer=dist_opt, cp=cp, pp_split=pp_split, cost_model=cm, policy=search,
                  grad_dtype=grad_reduce_dtype, loss_kernel=loss_kernel, bias_grads=bias_grads,
                  metrics_fp32=metrics_fp32, zero2=zero2,
                  attn_backend=backend, norm_rope=norm_rope, glue=glue, grad_acc=grad_acc, fsdp_sync=fsdp_sync,
                  recompute_every=recompute_every, moe_a2a_overlap=moe_a2a_overlap, train_metrics=train_metrics,
                  flat_param_grads=flat_param_grads, cp_impl=cp_impl, moe_imbalance=moe_imbalance,
                  dp_overlap=dp_overlap, pp_p2p_overlap=pp_p2p_overlap, tp_comm_overlap=tp_comm_overlap,
                  pp_engine=pp_engine)
    step = project(cfg.graph, cfg.hw, policy=policy_for(mode, pw), cost_model=cm, overheads=overheads)
    modes = ()
    if compare_overlap:
        from c3kit.step.project import compare_overlap as compare

        extra = step.totals.overhead  # step-level overheads do not depend on the overlap mode
        modes = [{**r, "step_time": r["step_time"] + extra} for r in compare(cfg.graph, cfg.hw, cost_model=cm,
                                                                              power=pw)]
        base = next((r["step_time"] for r in modes if r["mode"] == "simple"), None)
        modes = tuple({**r, "vs_simple": r["step_time"] / base - 1.0 if base else 0.0} for r in modes)
    if trace is not None:
        from c3kit.step.trace import write_trace

        write_trace(trace, cfg.graph, cfg.hw, policy=policy_for(mode, pw), cost_model=cm)
    mem = cfg.memory
    if mem is None:
        from c3kit.workload.memory import memory_report

        mem = memory_report(cfg.graph, cfg.hw)
    return AnalyzeResult(config=cfg, step=step, memory=mem, cost_model=label, overlap=mode, overlap_modes=modes,
                         trace=None if trace is None else str(trace))


__all__ = ["AnalyzeResult", "analyze", "with_power"]
