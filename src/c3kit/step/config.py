"""Resolve a step request (model, GPU, sizes, partly given parallelism) into a checked, fitting config."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial

from c3kit.errors import C3kitError, MemoryFitError, WorkloadError


@dataclass(frozen=True)
class StepConfig:
    """Everything one projection needs, plus notes on what was chosen automatically."""

    model: object  # ModelConfig
    hw: object  # GPU
    par: object  # Parallelism
    phase: str
    seq: int
    dtype: str
    graph: object  # StepGraph
    memory: object = None  # workload.memory report, when the workload layer provides one
    chosen: tuple[str, ...] = field(default=())
    tried: tuple["Candidate", ...] = field(default=())  # every layout the search looked at, in order
    attn_backend: str = ""  # the attention kernel asked for (workload.attention.BACKENDS); "" = the GPU's default
    norm_rope: str = "fused"  # how RMSNorm and RoPE run (workload.layer.NORM_ROPE)
    glue: str = "split"  # the backward's memory-bound glue (workload.layer.GLUE)
    grad_acc: str = ""  # gradient accumulation into .grad (workload.layer.GRAD_ACC; "" = from glue, micro-batches)
    train_metrics: int = 0  # training-metric cross-entropy passes per micro-batch (workload.layer.check_train_metrics)
    flat_param_grads: bool = False  # FSDP1's per-unit gradient concatenation (workload.layer.FLAT_PARAM_GRADS)
    grad_dtype: str = "fp32"  # the dtype DP gradients are reduced and held in (workload.layer.GRAD_REDUCE_DTYPES)
    loss_kernel: str = "eager"  # the training loss's cross-entropy kernels (workload.layer.LOSS_KERNELS)
    bias_grads: bool = False  # the biased linears' own bias-gradient reductions (workload.layer.BIAS_GRADS)
    metrics_fp32: bool = True  # training metrics on fp32 logits, else bf16 (workload.layer.METRICS_BF16)


@dataclass(frozen=True)
class Candidate:
    """One layout the auto-layout looked at: what it was and what became of it."""

    gpus: int
    pp: int
    sharding: str  # "ddp", "zero1" or "fsdp"
    recompute: str
    verdict: str  # "chosen", "fits", "does not fit: ..." or "slower: ..."
    seconds_per_sequence: float = float("nan")  # step time / global batch (NaN when not priced)

    def label(self) -> str:
        """A short description: gpus, pp, sharding, recompute."""
        return f"{self.gpus} GPUs pp {self.pp} {self.sharding} recompute {self.recompute}"


def _positive(name: str, v) -> None:
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
        raise C3kitError(f"--{name} must be a positive whole number, got {v!r}")


def check_memory(model, par, phase: str, seq: int, dtype: str, hw, grad_dtype: str = "fp32"):
    """The workload layer's memory verdict (raises MemoryFitError when it does not fit); None if unavailable."""
    try:
        from c3kit.workload import memory
    except ImportError:
        return None
    return memory.check_fits(model, hw, par=par, phase=phase, seq=seq, dtype=dtype, grad_dtype=grad_dtype)


def resolve(model: str = "llama-3-70b", hw: str = "H200-SXM", gpus: int | None = None, tp: int | None = None,
            sp: bool | None = None, dp: int | None = None, fsdp: bool | None = None, pp: int | None = None,
            ep: int = 1, seq: int = 8192, batch: int | None = None, micro_batch: int | None = None,
            dtype: str = "bf16", phase: str = "train", recompute: str | None = None, vpp: int = 1,
            dist_optimizer: bool | None = None, cp: int = 1, pp_split: str = "even", cost_model=None,
            policy=None, attn_backend: str = "", norm_rope: str = "fused", glue: str = "split",
            grad_acc: str = "", fsdp_sync: str = "micro", recompute_every: int = 2,
            moe_a2a_overlap: bool = False, train_metrics: int = 0, flat_param_grads: bool = False,
            cp_impl: str = "ring", moe_imbalance: float = 1.0, dp_overlap: bool = True,
            pp_p2p_overlap: bool = False, tp_comm_overlap: str = "none", grad_dtype: str = "fp32",
            loss_kernel: str = "eager", bias_grads: bool = False, metrics_fp32: bool = True,
            zero2: bool = False, pp_engine: str = "megatron") -> StepConfig:
    """Build the model, GPU, parallelism and graph; fill unset sizes with the fastest layout that fits.

    The auto-layout tries pipeline stages and optimizer / weight sharding (ZeRO-1, FSDP) before
    recomputation: for every pipeline depth and sharding it keeps the least recomputation that fits
    in memory, prices each such layout with `cost_model` and `policy` (default: `c3kit analyze`'s) and
    picks the one with the shortest time per sequence. With the pipeline depth searched and no batch
    given, every candidate gets the same global batch (8 sequences per tensor-parallel group), so
    deeper pipelines are not favoured by a larger batch. When the GPU count is left open it starts at
    one node and doubles the node count until some layout fits. Everything it looked at is in `tried`.
    cp (context parallelism) is never searched: it multiplies the GPUs of every layout (gpus = tp x cp x
    pp x dp) and needs the sequence to split into 2 x cp load-balanced chunks. pp_split: how layers split
    over pipeline stages (workload.parallel.PP_SPLITS); the search tries only depths the split accepts.
    fsdp_sync: how often FSDP layouts gather and reduce-scatter (workload.parallel.FSDP_SYNC); recompute_every:
    with recompute "layer", every N-th layer is recomputed. moe_a2a_overlap: a MoE model's expert-parallel
    all-to-alls overlap another micro-batch's compute (Megatron-Core overlap_moe_expert_parallel_comm: needs ep > 1;
    the search then skips full recomputation and, without vpp > 1, pipeline stages).
    train_metrics, flat_param_grads: framework ops of the
    graph (workload.graph.build_step); cp_impl: how context parallelism runs (workload.parallel.CP_IMPLS).
    dp_overlap False: DP gradients reduced after the backward (workload.parallel.DP_OVERLAP_SOURCES; the search then
    skips FSDP); pp_p2p_overlap: pipeline sends and receives behind compute (PP_P2P_OVERLAP_SOURCE).
    grad_dtype, loss_kernel, bias_grads, metrics_fp32: framework facts of the graph (workload.graph.build_step;
    their choices: workload.layer.GRAD_REDUCE_DTYPES, LOSS_KERNELS, BIAS_GRADS, METRICS_BF16); grad_dtype also sizes
    the gradients in the memory check. zero2: ZeRO-2, gradients sharded over DP as well as the optimizer state
    (Parallelism.zero2; the search then tries that sharding only).
    tp_comm_overlap: Transformer Engine's userbuffers TP overlap (workload.parallel.TP_COMM_OVERLAPS; needs sp with
    tp > 1, a no-op with tp 1).
    """
    from c3kit.hw import get_gpu
    from c3kit.hw.model import dtype_bytes
    from c3kit.workload.model import get_model

    _check_request(attn_backend, norm_rope, glue, grad_acc, train_metrics, cp_impl, fsdp_sync, fsdp, ep, recompute,
                   pp, vpp, dp_overlap, pp_split, cp, seq, phase, moe_a2a_overlap,
                   (("gpus", gpus), ("tp", tp), ("dp", dp), ("pp", pp), ("ep", ep), ("seq", seq), ("batch", batch),
                    ("micro-batch", micro_batch), ("vpp", vpp), ("cp", cp), ("recompute-every", recompute_every)))
    _check_framework_facts(grad_dtype, loss_kernel)
    _check_zero2(zero2, fsdp, dist_optimizer)
    from c3kit.workload.parallel import check_tp_comm_overlap

    check_tp_comm_overlap(tp_comm_overlap)
    dtype_bytes(dtype)
    m = get_model(model)
    if bias_grads and not m.bias:
        raise WorkloadError(f"--bias-grads prices the linears' bias gradients: model {m.name} has no biases "
                            "(drop --bias-grads)")
    gpu = get_gpu(hw)
    gpu.peak_flops(dtype)
    node = gpu.gpus_per_node
    train = phase == "train"
    auto_gpus = gpus is None and dp is None
    auto_tp = tp is None
    gpus, tp, sp = _fill_sizes(m, node, train, gpus, tp, sp, dp, pp, cp)
    if tp_comm_overlap != "none" and tp > 1 and not sp:
        raise C3kitError(f"--tp-comm-overlap {tp_comm_overlap} overlaps sequence parallelism's all-gathers and "
                         "reduce-scatters (Transformer Engine userbuffers): use it with --sp")
    rcs, shardings = _search_options(train, recompute, moe_a2a_overlap, fsdp, dist_optimizer, dp_overlap)
    counts = [gpus] + ([gpus * k for k in (2, 4, 8, 16, 32, 64)] if auto_gpus and train else [])
    fixed = dict(tp=tp, sp=sp, ep=ep, vpp=vpp, cp=cp, pp_split=pp_split, fsdp_sync=fsdp_sync, cp_impl=cp_impl,
                 recompute_every=recompute_every, moe_a2a_overlap=moe_a2a_overlap, moe_imbalance=moe_imbalance,
                 dp_overlap=dp_overlap, pp_p2p_overlap=pp_p2p_overlap, tp_comm_overlap=tp_comm_overlap,
                 pp_engine=pp_engine)
    if zero2:  # ZeRO-2: the optimizer state sharded as ZeRO-1 shards it, the gradients as well
        fixed["zero2"], shardings = True, ["zero1"]
    graph_opts = dict(attn_backend=attn_backend, norm_rope=norm_rope, glue=glue, grad_acc=grad_acc,
                      train_metrics=train_metrics, flat_param_grads=flat_param_grads)
    graph_opts.update(grad_dtype=grad_dtype, loss_kernel=loss_kernel, bias_grads=bias_grads, metrics_fp32=metrics_fp32)
    tried: list[Candidate] = []
    last_fit: Exception | None = None
    for n in counts:
        pps = _pipeline_depths(n, m.layers, fixed, pp, dp)
        if not pps and pp is None:
            continue
        layout = partial(_layout, n=n, fixed=fixed, dp=dp, pp=pp, micro_batch=micro_batch, batch=batch, train=train)
        fitting, last_fit = _fitting(n, pps, shardings, rcs, layout, m, phase, seq, dtype, gpu, tried, last_fit,
                                     grad_dtype)
        if not fitting:
            continue
        tried, par, mem, graph = _fastest(fitting, tried, m, phase, seq, dtype, gpu, cost_model, policy, graph_opts)
        # --zero2 asks for the optimizer sharding: not a choice of the search
        chosen = _chosen_notes(par, n, gpus, node, auto_gpus, auto_tp, pp, dp, True if zero2 else dist_optimizer, fsdp,
                               batch, recompute, train, len(tried))
        return StepConfig(m, gpu, par, phase, seq, dtype, graph, mem, tuple(chosen), tuple(tried), attn_backend,
                          norm_rope, glue, grad_acc, train_metrics, flat_param_grads, grad_dtype=grad_dtype,
                          loss_kernel=loss_kernel, bias_grads=bias_grads, metrics_fp32=metrics_fp32)
    if last_fit is None:
        raise WorkloadError(f"{m.name}: no pipeline depth divides its {m.layers} layers with tp {tp} on "
                            f"{gpus} GPUs: change --gpus, --tp or --pp")
    hint = "" if (pp is None and recompute is None) else " (or leave --pp and --recompute unset to search them)"
    raise MemoryFitError(f"{last_fit}{hint}")


def _check_request(attn_backend, norm_rope, glue, grad_acc, train_metrics, cp_impl, fsdp_sync, fsdp, ep, recompute,
                   pp, vpp, dp_overlap, pp_split, cp, seq, phase, moe_a2a_overlap, sizes) -> None:
    """Reject unknown names, non-positive sizes and options that cannot run together (one clear error)."""
    from c3kit.workload.attention import check_backend
    from c3kit.workload.graph import PHASES
    from c3kit.workload.layer import check_glue, check_grad_acc, check_norm_rope, check_train_metrics
    from c3kit.workload.parallel import FSDP_SYNC, PP_SPLITS, RECOMPUTE, check_cp_impl

    check_backend(attn_backend)
    check_norm_rope(norm_rope)
    check_glue(glue)
    if grad_acc:
        check_grad_acc(grad_acc)
    check_train_metrics(train_metrics)
    check_cp_impl(cp_impl)
    for name, v in sizes:
        _positive(name, v)
    if fsdp_sync not in FSDP_SYNC:
        raise C3kitError(f"unknown FSDP sync {fsdp_sync!r}: use one of {', '.join(FSDP_SYNC)}")
    if fsdp_sync != "micro" and fsdp is False:
        raise C3kitError(f"--fsdp-sync {fsdp_sync} gathers FSDP-sharded parameters: use it with --fsdp (or drop it)")
    if moe_a2a_overlap and ep == 1:
        raise C3kitError("--moe-a2a-overlap hides expert-parallel all-to-alls: use it with --ep > 1")
    if moe_a2a_overlap and recompute == "full":
        raise C3kitError("--moe-a2a-overlap does not run with full recomputation (Megatron-Core refuses it): "
                         "use --recompute none or selective")
    if moe_a2a_overlap and pp is not None and pp > 1 and vpp == 1:
        raise C3kitError("--moe-a2a-overlap with --pp > 1 needs virtual pipeline stages (--vpp > 1), as Megatron-Core")
    if not dp_overlap and fsdp:
        raise C3kitError("--no-dp-overlap reduces gradients after the backward, which FSDP does not: drop one of them")
    if pp_split not in PP_SPLITS:
        raise C3kitError(f"unknown pipeline split {pp_split!r}: use one of {', '.join(PP_SPLITS)}")
    if cp > 1 and seq % (2 * cp):
        raise C3kitError(f"--seq {seq} does not split into 2 x cp {cp} = {2 * cp} load-balanced chunks: "
                         f"use a sequence length divisible by {2 * cp}")
    if cp > 1 and phase != "train":
        raise C3kitError(f"context parallelism (--cp {cp}) is modelled for training only: "
                         f"use --cp 1 with --phase {phase}")
    if phase not in PHASES:
        raise C3kitError(f"unknown phase {phase!r}: use one of {', '.join(PHASES)}")
    if recompute is not None and recompute not in RECOMPUTE:
        raise C3kitError(f"unknown recompute {recompute!r}: use one of {', '.join(RECOMPUTE)}")


def _check_framework_facts(grad_dtype: str, loss_kernel: str) -> None:
    """Reject an unknown gradient reduce dtype or loss kernel (one clear error)."""
    from c3kit.workload.layer import check_grad_reduce_dtype, check_loss_kernel

    check_grad_reduce_dtype(grad_dtype)
    check_loss_kernel(loss_kernel)


def _check_zero2(zero2: bool, fsdp, dist_optimizer) -> None:
    """Reject ZeRO-2 with FSDP or without optimizer sharding (one clear error)."""
    if zero2 and fsdp:
        raise C3kitError("--fsdp already shards the gradients (ZeRO-3 includes ZeRO-2): drop --zero2")
    if zero2 and dist_optimizer is False:
        raise C3kitError("--zero2 shards the optimizer state as well as the gradients: drop --no-dist-opt")


def _fill_sizes(m, node: int, train: bool, gpus, tp, sp, dp, pp, cp: int) -> tuple[int, int, bool]:
    """(gpus, tp, sp) with unset ones filled (one node; the largest TP of 8, 4, 2, 1 that divides the GPUs and
    the heads; SP with TP in training), checked to divide the GPUs."""
    if gpus is None:
        gpus = (tp or 1) * cp * (pp or 1) * dp if dp is not None else max(node, (tp or 1) * cp * (pp or 1))
    if tp is None:
        tp = next((t for t in (8, 4, 2, 1) if t * cp <= gpus and gpus % (t * cp) == 0 and m.heads % t == 0), 1)
    if sp is None:
        sp = tp > 1 and train
    if gpus % (tp * cp):
        raise WorkloadError(f"{gpus} GPUs are not divisible by tp {tp}" + (f" x cp {cp} = {tp * cp}" if cp > 1 else "")
                            + ": change --gpus, --tp" + (" or --cp" if cp > 1 else ""))
    if pp is not None and gpus % (tp * cp * pp):
        raise WorkloadError(f"{gpus} GPUs are not divisible by tp {tp}" + (f" x cp {cp}" if cp > 1 else "")
                            + f" x pp {pp} = {tp * cp * pp}: change --gpus, --tp" + (", --cp" if cp > 1 else "")
                            + " or --pp")
    return gpus, tp, sp


def _search_options(train: bool, recompute, moe_a2a_overlap: bool, fsdp, dist_optimizer,
                    dp_overlap: bool) -> tuple[list[str], list[str]]:
    """(recomputations, optimizer/weight shardings) the search tries, least recomputation and sharding first."""
    rcs = [recompute] if recompute is not None else (["none", "selective", "full"] if train else ["none"])
    if moe_a2a_overlap:
        rcs = [rc for rc in rcs if rc != "full"]
    if fsdp:
        shardings = ["fsdp"]
    elif dist_optimizer is not None:
        shardings = ["zero1" if dist_optimizer else "ddp"]
    elif train:
        shardings = ["ddp", "zero1"] + ([] if fsdp is False or not dp_overlap else ["fsdp"])
    else:
        shardings = ["ddp"]
    return rcs, shardings


def _pipeline_depths(n: int, layers: int, fixed: dict, pp, dp) -> list[int]:
    """The pipeline depths to try on n GPUs: the one given, else every depth that divides the GPUs and whose
    layer split the pipeline split accepts."""
    if pp is not None:
        return [pp]
    tp, cp, vpp = fixed["tp"], fixed["cp"], fixed["vpp"]
    return [p for p in range(1, min(layers, 64) + 1) if n % (tp * cp * p) == 0 and _splits(layers, p, vpp,
                                                                                             fixed["pp_split"])
            and (p > 1 or vpp == 1) and (dp is None or tp * cp * p * dp == n)
            and not (fixed["moe_a2a_overlap"] and p > 1 and vpp == 1)]


def _splits(layers: int, p: int, vpp: int, pp_split: str) -> bool:
    """Whether the layers split over p pipeline stages (x vpp) by pp_split."""
    from c3kit.workload.parallel import rank_layer_counts

    try:
        rank_layer_counts(layers, p, vpp, pp_split)
    except WorkloadError:
        return False
    return True


def _layout(p: int, sharding: str, rc: str, n: int, fixed: dict, dp, pp, micro_batch, batch, train: bool):
    """The Parallelism of one candidate: n GPUs, p stages, a sharding and a recomputation, with its batch."""
    from c3kit.workload.parallel import Parallelism

    tp, cp = fixed["tp"], fixed["cp"]
    d = dp if dp is not None else n // (tp * cp * p)
    if tp * cp * p * d != n:
        raise WorkloadError(f"{n} GPUs != tp {tp}" + (f" x cp {cp}" if cp > 1 else "")
                            + f" x pp {p} x dp {d} = {tp * cp * p * d}: change --gpus or the parallel sizes")
    if micro_batch is not None:
        mb = micro_batch
    elif not train and batch is not None and batch % d == 0:
        mb = batch // d  # inference: every sequence of a DP rank in one forward pass
    else:
        mb = 1
    if batch is not None:
        gb = batch
    elif not train:
        gb = mb * d
    elif pp is None:  # one global batch for every pipeline depth: 8 micro-batches per stage-replica
        gb = mb * (n // (tp * cp)) * 8
    else:
        gb = mb * d * max(8, 4 * p)
    # FSDP and the distributed optimizer (ZeRO-1/2) shard over the dp x cp ranks that hold the same weights (memory,
    # Structure.dp, Megatron-Core's data-parallel group with cp), so cp alone can carry either
    return Parallelism(dp=d, fsdp=sharding == "fsdp" and d * cp > 1, pp=p, micro_batch=mb, global_batch=gb, recompute=rc,
                       dist_optimizer=sharding == "zero1" and d * cp > 1, **fixed)


def _fitting(n: int, pps, shardings, rcs, layout, m, phase: str, seq: int, dtype: str, gpu, tried: list,
             last_fit, grad_dtype: str = "fp32"):
    """For every pipeline depth and sharding, the least recomputation that fits in memory: ([(par, memory,
    index in tried)], the last memory error). Appends every layout looked at to `tried`."""
    fitting = []
    for p in pps:
        for sharding in shardings:
            for rc in rcs:  # least recomputation first: the first that fits is the fastest of its kind
                par = layout(p, sharding, rc)
                if (sharding == "zero1" and not par.dist_optimizer) or (sharding == "fsdp" and not par.fsdp):
                    if sharding != shardings[0]:
                        break  # with dp 1 ZeRO-1 and FSDP are plain data parallelism: already tried
                par.validate(m, n)
                try:
                    mem = check_memory(m, par, phase, seq, dtype, gpu, grad_dtype)
                except MemoryFitError as e:
                    last_fit = e
                    tried.append(Candidate(n, p, sharding, rc, "does not fit: " + _short_fit(e)))
                    continue
                fitting.append((par, mem, len(tried)))
                tried.append(Candidate(n, p, sharding, rc, "fits"))
                break
    return fitting, last_fit


def _fastest(fitting, tried: list, m, phase: str, seq: int, dtype: str, gpu, cost_model, policy, graph_opts: dict):
    """Price the fitting layouts (when more than one) and pick the shortest time per sequence: (tried with
    verdicts and times, par, memory, graph)."""
    from c3kit.workload.graph import build_step

    best = None
    for par, mem, i in fitting:
        graph = build_step(m, par, phase, seq, dtype, gpu.gpus_per_node, **graph_opts)
        per_seq = (_price(graph, gpu, cost_model, policy) / par.global_batch) if len(fitting) > 1 else float("nan")
        tried[i] = replace(tried[i], seconds_per_sequence=float(per_seq))
        if best is None or per_seq < best[0]:
            best = (per_seq, par, mem, graph, i)
    _, par, mem, graph, i = best
    tried = [replace(c, verdict="chosen") if k == i else
             (replace(c, verdict=f"slower: {c.seconds_per_sequence / best[0]:.2f}x") if c.verdict == "fits" else c)
             for k, c in enumerate(tried)]
    return tried, par, mem, graph


def _short_fit(e: Exception) -> str:
    """The first clause of a MemoryFitError (the need against the capacity)."""
    return str(e).split(": raise")[0].split(" (")[0]


def _price(graph, gpu, cost_model, policy) -> float:
    """Step seconds of one candidate, by the model `c3kit analyze` prices with."""
    from c3kit.cost.model import as_model
    from c3kit.step.overheads import DEFAULT_OVERHEADS
    from c3kit.step.project import project

    cm = as_model("efficiency").with_(power="sustained") if cost_model is None else as_model(cost_model)
    return project(graph, gpu, cost_model=cm, policy=policy, overheads=DEFAULT_OVERHEADS).totals.step_time


def _chosen_notes(par, n, gpus, node, auto_gpus, auto_tp, pp, dp, dist_optimizer, fsdp, batch, recompute, train,
                  tried) -> list[str]:
    """What the auto-layout filled in, in words."""
    chosen = []
    if auto_tp:
        chosen.append(f"tp={par.tp}")
    if n != gpus:
        chosen.append(f"gpus={n} ({n // node} nodes: one node cannot hold the training state)")
    elif auto_gpus:
        chosen.append(f"gpus={n}")
    if pp is None:
        chosen.append(f"pp={par.pp}")
    if dp is None:
        chosen.append(f"dp={par.dp}")
    if dist_optimizer is None and fsdp is None and train:
        chosen.append("FSDP (ZeRO-3)" if par.fsdp else "distributed optimizer (ZeRO-1)" if par.dist_optimizer
                      else "no optimizer sharding")
    if batch is None:
        chosen.append(f"batch={par.global_batch}")
    if recompute is None and train:
        chosen.append(f"recompute={par.recompute}")
    if tried > 1:
        chosen.append(f"fastest of the fitting layouts among {tried} tried")
    return chosen
