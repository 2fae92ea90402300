"""CLI: `c3kit analyze`: one training or inference step, per operator, with simple overlap."""

from __future__ import annotations

import inspect
from pathlib import Path

import typer

from c3kit import api
from c3kit.cli.common import (JSON_OPT, POWER_HELP, console, emit_json, out_dir_option, out_file_option,
                              rich_table)
from c3kit.units import fmt_bytes, fmt_time

DEFAULT_OUT = "c3kit-out"


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.command("analyze")(analyze)


_D = {k: p.default for k, p in inspect.signature(api.analyze).parameters.items()}  # the API's defaults are the CLI's


def analyze(
    model: str = typer.Option(_D["model"], "--model", help="Preset name or path to a Hugging Face config.json."),
    hw: str = typer.Option(_D["hw"], "--hw", help="GPU from `c3kit hw list` (or a catalog TOML file)."),
    gpus: int = typer.Option(_D["gpus"], "--gpus", help="GPUs in the job.",
                             show_default="one node; more nodes when the training state does not fit"),
    tp: int = typer.Option(_D["tp"], "--tp", help="Tensor-parallel size.",
                           show_default="the largest of 8, 4, 2, 1 dividing the GPUs and the heads"),
    sp: bool = typer.Option(_D["sp"], "--sp/--no-sp", help="Sequence parallelism.",
                            show_default="on with TP > 1 in training"),
    dp: int = typer.Option(_D["dp"], "--dp", help="Data-parallel size.", show_default="gpus / (tp x cp x pp)"),
    fsdp: bool = typer.Option(_D["fsdp"], "--fsdp/--no-fsdp", help="Shard weights, gradients, optimizer over DP "
                              "(ZeRO-3).", show_default="when fastest"),
    dist_opt: bool = typer.Option(_D["dist_opt"], "--dist-opt/--no-dist-opt",
                                  help="Shard the optimizer state over DP (ZeRO-1).", show_default="when needed to fit"),
    zero2: bool = typer.Option(_D["zero2"], "--zero2/--no-zero2",
                               help="Shard the gradients as well as the optimizer state over DP (ZeRO-2: DeepSpeed "
                                    "stage 2; gradients reduce-scattered, each rank keeps its shard)."),
    pp: int = typer.Option(_D["pp"], "--pp", help="Pipeline stages.", show_default="the fewest that fit"),
    vpp: int = typer.Option(_D["vpp"], "--vpp", help="Virtual pipeline stages per GPU (interleaved 1F1B)."),
    ep: int = typer.Option(_D["ep"], "--ep", help="Expert-parallel size (MoE models)."),
    cp: int = typer.Option(_D["cp"], "--cp", help="Context-parallel size: ring attention over cp GPUs, each holding "
                           "seq / cp tokens as two load-balanced chunks (training; gpus = tp x cp x pp x dp)."),
    pp_split: str = typer.Option(_D["pp_split"], "--pp-split",
                                 help="How layers split over pipeline stages: even (Megatron-Core), torchtitan (its "
                                      "default split points), embedding_loss (Megatron's account-for-embedding/loss "
                                      "options) or llama3 (the Llama 3 paper's: a chunk may hold the embedding or "
                                      "the loss alone)."),
    seq: int = typer.Option(_D["seq"], "--seq", help="Sequence length (decode: KV-cache length)."),
    batch: int = typer.Option(_D["batch"], "--batch", help="Global batch in sequences.",
                              show_default="micro-batch x dp x max(8, 4 x pp) in training"),
    micro_batch: int = typer.Option(_D["micro_batch"], "--micro-batch", help="Micro-batch in sequences.",
                                    show_default="1 in training, batch / dp in inference"),
    dtype: str = typer.Option(_D["dtype"], "--dtype", help="Compute dtype (bf16, fp16, fp8, fp32)."),
    phase: str = typer.Option(_D["phase"], "--phase", help="train, prefill or decode."),
    recompute: str = typer.Option(_D["recompute"], "--recompute",
                                  help="none, selective (the attention core), full, op (torchtitan's op-level "
                                       "selective AC) or layer (every --recompute-every-th layer in full).",
                                  show_default="the least of none, selective, full that fits"),
    recompute_every: int = typer.Option(_D["recompute_every"], "--recompute-every",
                                        help="With --recompute layer: every N-th layer is recomputed (torchtitan's "
                                             "selective_ac_option N)."),
    overlap: str = typer.Option(_D["overlap"], "--overlap",
                                help="Overlap of collective-GEMM pairs: none, simple (dependencies only, independent "
                                     "pairs fully overlapped), contended (independent pairs at the compute / comm "
                                     "contention measured on the H200), auto (the overlap engine's selector per pair), "
                                     "a family (serial, bulk, ring, ficco, fused) or a schedule name.",
                                show_default="contended"),
    policy: str = typer.Option(_D["policy"], "--policy", hidden=True, help="Old name of --overlap (serial = none)."),
    trace: Path = out_file_option(_D["trace"], "Write a Perfetto/Chrome trace JSON of the whole step: a process "
                                  "per pipeline stage (open in ui.perfetto.dev).", flag="--trace", show_default="no trace"),
    fsdp_impl: str = typer.Option(_D["fsdp_impl"], "--fsdp-impl",
                                  help="FSDP implementation: fsdp2 (PyTorch fully_shard; its all-gather copy-out is "
                                       "priced) or flat (FSDP1 FlatParameter, Megatron FSDP: no copy-out)."),
    fp8_scaling: str = typer.Option(_D["fp8_scaling"], "--fp8-scaling",
                                    help="FP8 recipe of the cast kernels feeding the FP8 GEMMs: delayed (Transformer "
                                         "Engine DelayedScaling), current (TE Float8CurrentScaling), dynamic (torchao "
                                         "Float8Linear), eager (unfused PyTorch), mxfp8 (TE MXFP8BlockScaling) or "
                                         "delayed_uncached (delayed, weights re-cast every micro-batch)."),
    cost_model: str = typer.Option(_D["cost_model"], "--cost-model", help="roofline, efficiency or table (c3kit.cost)."),
    power: str = typer.Option(_D["power"], "--power", help=POWER_HELP),
    attention_backend: str = typer.Option(_D["attention_backend"], "--attention-backend",
                                          help="Attention kernel: cudnn, flash2, flash1, efficient or unfused (separate "
                                               "GEMMs and softmax, as Megatron-LM ran it before fused attention).",
                                          show_default="what current PyTorch's SDPA picks on the GPU: cudnn on "
                                                       "H100, H200, B200; flash2 elsewhere"),
    norm_rope: str = typer.Option(_D["norm_rope"], "--norm-rope",
                                  help="How RMSNorm and RoPE run: fused (one kernel per norm: F.rms_norm, Transformer "
                                       "Engine, compiled code) or eager (written out in fp32 eager PyTorch, as "
                                       "torchtitan's rmsnorm and the Llama reference code)."),
    glue: str = typer.Option(_D["glue"], "--glue",
                             help="The backward's memory-bound glue by how the block is written: split (one QKV and "
                                  "one gate/up GEMM split into views: autograd copies the gradients back together), "
                                  "separate (separate projections: input-gradient adds; torchtitan) or fused "
                                  "(Megatron-Core with Transformer Engine, compiled code: none)."),
    grad_acc: str = typer.Option(_D["grad_acc"], "--grad-acc",
                                 help="How weight gradients accumulate (AccumulateGrad): none, micro (eager: every micro-batch after "
                                      "the first adds) or every (every backward adds).",
                                 show_default="micro for split / separate glue with several micro-batches, else none"),
    fsdp_sync: str = typer.Option(_D["fsdp_sync"], "--fsdp-sync",
                                  help="With FSDP: micro (parameters gathered before each forward and backward, "
                                       "gradients reduce-scattered, every micro-batch) or step (gathered once and kept "
                                       "unsharded over the step's micro-batches, gradients reduce-scattered once after "
                                       "the last backward: torchtitan with pipeline parallelism)."),
    loss_kernel: str = typer.Option(_D["loss_kernel"], "--loss-kernel",
                                    help="The training loss's cross-entropy kernels: eager (torch CrossEntropyLoss "
                                         "under autocast, the logits cast to fp32: the measured cross_entropy "
                                         "kernels) or xentropy (flash-attn's fused softmax cross-entropy, "
                                         "llm-foundry's loss_fn fused_crossentropy: priced at its HBM bytes; "
                                         "workload.layer.LOSS_KERNELS)."),
    bias_grads: bool = typer.Option(_D["bias_grads"], "--bias-grads/--no-bias-grads",
                                    help="A model with biases: each linear's bias gradient summed over the tokens by "
                                         "a kernel of its own (torch.nn.Linear under autograd, llm-foundry's MPT in "
                                         "bf16: priced at its HBM bytes); off where it is fused (Transformer Engine's "
                                         "FP8 Linear; workload.layer.BIAS_GRADS)."),
    grad_reduce_dtype: str = typer.Option(_D["grad_reduce_dtype"], "--grad-reduce-dtype",
                                          help="The dtype data-parallel gradients are reduced and held in: fp32 "
                                               "(Megatron-Core's fp32 main_grad, FSDP reduce_dtype fp32, Composer's "
                                               "FSDP mixed_precision DEFAULT) or bf16 (Composer's PURE; per "
                                               "validation run: studies/data/fsdp_precision.csv)."),
    train_metrics_dtype: str = typer.Option(_D["train_metrics_dtype"], "--train-metrics-dtype",
                                            help="With --train-metrics: the logits' dtype in those passes: fp32 "
                                                 "(inside torch.autocast, which casts cross_entropy's input up: "
                                                 "the measured kernels) or bf16 (Composer's amp_fp8, te.fp8_autocast "
                                                 "alone: priced at its HBM bytes; workload.layer.METRICS_BF16)."),
    moe_a2a_overlap: bool = typer.Option(_D["moe_a2a_overlap"], "--moe-a2a-overlap/--no-moe-a2a-overlap",
                                         help="MoE with --ep > 1: the expert-parallel all-to-alls run behind another "
                                              "micro-batch's compute (Megatron-Core overlap_moe_expert_parallel_comm; "
                                              "needs --vpp > 1 with --pp > 1, no full recomputation)."),
    train_metrics: int = typer.Option(_D["train_metrics"], "--train-metrics",
                                      help="Cross-entropy passes over the logits per micro-batch for training metrics "
                                           "(Composer, as llm-foundry runs it: 2)."),
    flat_param_grads: bool = typer.Option(_D["flat_param_grads"], "--flat-param-grads/--no-flat-param-grads",
                                          help="With FSDP: PyTorch FSDP1's FlatParameter views, whose backward "
                                               "concatenates each unit's gradients (llm-foundry)."),
    cp_impl: str = typer.Option(_D["cp_impl"], "--cp-impl",
                                help="With --cp: ring (a KV ring beside the attention) or torch (torch "
                                     "context_parallel as torchtitan runs it: all-gathered KV, fp32 merges)."),
    moe_experts: str = typer.Option(_D["moe_experts"], "--moe-experts",
                                    help="How a MoE rank's local experts' GEMMs run: grouped (one grouped kernel), "
                                         "per_expert (one cuBLAS GEMM each from one call: Transformer Engine "
                                         "GroupedLinear) or sequential (a Python loop: Megatron-Core SequentialMLP)."),
    moe_imbalance: float = typer.Option(_D["moe_imbalance"], "--moe-imbalance",
                                        help="MoE load imbalance: the busiest expert-parallel rank's expert tokens "
                                             "over the balanced share (>= 1; 1 = balanced)."),
    dp_overlap: bool = typer.Option(_D["dp_overlap"], "--dp-overlap/--no-dp-overlap",
                                    help="DP gradients reduced behind the backward, or after it, exposed (Megatron-LM "
                                         "2021-22, DeepSpeed's pipeline engine; not with --fsdp)."),
    pp_p2p_overlap: bool = typer.Option(_D["pp_p2p_overlap"], "--pp-p2p-overlap/--no-pp-p2p-overlap",
                                        help="Pipeline sends / receives behind compute (Megatron-Core overlap_p2p_comm; "
                                             "NeMo and Megatron-Bridge set it with --vpp > 1)."),
    tp_comm_overlap: str = typer.Option(_D["tp_comm_overlap"], "--tp-comm-overlap",
                                        help="Transformer Engine's userbuffers TP overlap (needs --sp): none, pipeline "
                                             "(TE's default methods), pipeline_margin (NeMo's H100 configs: the "
                                             "pipelined reduce-scatters' GEMMs leave the comm SMs free) or "
                                             "ring_exchange (Megatron-Bridge's FP8 H100 configs); each TP pair is "
                                             "priced by its method's overlap-engine schedule."),
    pp_engine: str = typer.Option(_D["pp_engine"], "--pp-engine",
                                  help="Pipeline exchanges: megatron (paired sends), megatron_2021 (1/tp slices "
                                       "all-gathered, without --sp), deepspeed or deepspeed_2020 (DeepSpeed's "
                                       "engine: blocking transfers in turn); workload.parallel.PP_ENGINE_SOURCES."),
    optimizer_impl: str = typer.Option(_D["optimizer_impl"], "--optimizer-impl",
                                       help="AdamW: fused (one kernel), foreach (torch multi-tensor) or unfused (a "
                                            "per-tensor loop of eager kernels: Composer's DecoupledAdamW)."),
    out: Path = out_dir_option(DEFAULT_OUT, "Report folder (checked before the run)."),
    as_json: bool = JSON_OPT,
) -> None:
    """Project one step per operator: compute, communication, exposed communication, share of step, memory per GPU.

    Auto layout (options left unset): one node of GPUs; TP the largest of 8, 4, 2, 1 that divides the GPUs and the
    attention heads; SP on with TP in training; PP the fewest stages and recompute the least (none, selective,
    full) that fit in memory; in training, when one node cannot hold the state, 2, 4, ... 64 nodes of DP with the
    optimizer state sharded (ZeRO-1). Batch: 8 micro-batches of 1 sequence per DP rank (4 x PP when more).
    The same call from Python: c3kit.analyze(...) (docs/analyze.md).
    """
    res = api.analyze(model, hw, gpus=gpus, tp=tp, sp=sp, dp=dp, fsdp=fsdp, dist_opt=dist_opt, pp=pp, vpp=vpp,
                      ep=ep, cp=cp, pp_split=pp_split, seq=seq, batch=batch, micro_batch=micro_batch, dtype=dtype,
                      phase=phase, recompute=recompute, overlap=overlap, policy=policy, trace=trace,
                      cost_model=cost_model, fsdp_impl=fsdp_impl, power=power, attention_backend=attention_backend,
                      norm_rope=norm_rope, fp8_scaling=fp8_scaling, glue=glue, grad_acc=grad_acc, fsdp_sync=fsdp_sync,
                      recompute_every=recompute_every, moe_a2a_overlap=moe_a2a_overlap,
                      loss_kernel=loss_kernel, bias_grads=bias_grads, grad_reduce_dtype=grad_reduce_dtype,
                      train_metrics_dtype=train_metrics_dtype, zero2=zero2,
                      train_metrics=train_metrics, flat_param_grads=flat_param_grads, cp_impl=cp_impl,
                      moe_experts=moe_experts, moe_imbalance=moe_imbalance,
                      dp_overlap=dp_overlap, pp_p2p_overlap=pp_p2p_overlap, optimizer_impl=optimizer_impl,
                      tp_comm_overlap=tp_comm_overlap, pp_engine=pp_engine)
    write_report(out, res)
    if as_json:
        emit_json({**res.to_dict(), "out": str(out)})
        return
    _print(res, out)


config_dict = api.config_dict


def _describe(cfg) -> str:
    c = config_dict(cfg)
    return (f"{c['model']} {c['phase']} on {c['gpus']} x {c['hw']}: tp {c['tp']}{' +sp' if c['sp'] else ''}, "
            f"pp {c['pp']}{f' x vpp {c[chr(118) + chr(112) + chr(112)]}' if c['vpp'] > 1 else ''}, "
            f"{f'cp {c[chr(99) + chr(112)]}, ' if c['cp'] > 1 else ''}dp {c['dp']}"
            f"{' (fsdp)' if c['fsdp'] else (' (zero-2)' if c['zero2'] and c['dist_optimizer'] else ' (zero-1)' if c['dist_optimizer'] else '')}{f', ep {c[chr(101) + chr(112)]}' if c['ep'] > 1 else ''}, "
            f"seq {c['seq']}, batch {c['global_batch']} ({c['micro_batches']} x micro {c['micro_batch']}), "
            f"recompute {c['recompute']}, {c['dtype']}"
            f"{'' if c['tp_comm_overlap'] == 'none' else ', TE userbuffers TP overlap ' + c['tp_comm_overlap']}"
            f"{'' if c['pp_engine'] == 'megatron' or c['pp'] == 1 else ', pp engine ' + c['pp_engine']}")


def _memory_rows(res) -> list[tuple[str, str, str]]:
    m = res.memory
    rows = [(k.replace("_", " "), fmt_bytes(getattr(m, k)), f"{100 * getattr(m, k) / m.capacity:.1f}%")
            for k in api.MEMORY_KINDS]
    rows.append(("total", fmt_bytes(m.total), f"{100 * m.total / m.capacity:.1f}%"))
    rows.append((f"capacity ({m.gpu})", fmt_bytes(m.capacity), "100.0%"))
    return rows


def _memory_line(res) -> str:
    m = res.memory
    return (f"memory per GPU: {fmt_bytes(m.total)} of {fmt_bytes(m.capacity)} ({100 * m.total / m.capacity:.0f}%), "
            f"{fmt_bytes(m.headroom)} free")


def _modes_rows(modes) -> list:
    return [(m["mode"], fmt_time(m["step_time"]), fmt_time(m["exposed"]),
             "-" if m["mode"] == "simple" else f"{100 * m['vs_simple']:+.1f}%") for m in modes]


def _print(res, out: Path) -> None:
    cfg, result = res.config, res.step
    console.print(_describe(cfg) + f"; cost model {res.cost_model}; overlap {res.overlap}")
    console.print("basis per op class: " + ", ".join(f"{k} {v}" for k, v in res.basis().items()))
    a = res.attention()
    console.print(f"attention backend: {a['backend']}{' (the GPU default)' if a['default'] else ''}, {a['basis']}")
    if cfg.chosen:
        console.print(f"chosen automatically: {', '.join(cfg.chosen)}")
    if len(cfg.tried) > 1:
        fit = [c for c in cfg.tried if not c.verdict.startswith("does not fit")]
        console.print(rich_table("Layouts that fit (least recomputation per pipeline depth and sharding)",
                                 ["layout", "verdict", "s / sequence"],
                                 [(c.label(), c.verdict, "-" if c.seconds_per_sequence != c.seconds_per_sequence
                                   else fmt_time(c.seconds_per_sequence)) for c in fit]))
        if len(fit) < len(cfg.tried):
            console.print(f"also tried {len(cfg.tried) - len(fit)} layouts that do not fit in memory "
                          f"(all listed in the report and in --json)")
    roles = result.by_role()
    rows = [(r.role, r.phase, fmt_time(r.compute_s), fmt_time(r.comm_s), fmt_time(r.exposed_s),
             f"{100 * r.share:.1f}%", r.schedule, f"{r.overlap_speedup:.2f}x") for r in roles.itertuples(index=False)]
    console.print(rich_table(f"Per operator (per GPU, per step), overlap {result.policy}",
                             ["op", "phase", "compute", "comm", "exposed comm", "share of step", "schedule",
                              "overlap speedup"], rows))
    t = result.totals
    console.print(rich_table("Totals", ["metric", "value"], [
        ("step time", fmt_time(t.step_time)), ("compute", fmt_time(t.compute)), ("communication", fmt_time(t.comm)),
        ("exposed comm", fmt_time(t.exposed)), ("hidden comm", fmt_time(t.hidden)),
        ("pipeline bubble", fmt_time(t.bubble)), ("step-level overheads", fmt_time(t.overhead)),
        ("comm share (serialized)", f"{100 * t.comm_share:.1f}%"),
        ("exposed share of step", f"{100 * t.exposed_share:.1f}%"), ("MFU", f"{100 * t.mfu:.1f}%"),
        ("tokens/s (all GPUs)", f"{t.tokens_per_s:,.0f}")]))
    console.print(rich_table("Memory per GPU", ["kind", "bytes", "of capacity"], _memory_rows(res)))
    console.print(_stream_line(result))
    console.print(_memory_line(res))
    if res.overlap_modes:
        console.print(rich_table("Step time by overlap mode (change against simple)",
                                 ["overlap", "step time", "exposed comm", "vs simple"], _modes_rows(res.overlap_modes)))
    console.print(f"report: {out}/report.md")


def _stream_line(result) -> str:
    parts = [f"{r.stream.upper()} {fmt_time(r.comm_s)}: {100 * r.hidden_frac:.0f}% hidden, "
             f"{fmt_time(r.exposed_s)} exposed" for r in result.by_stream().itertuples(index=False)]
    return "communication by group: " + ("; ".join(parts) if parts else "none")


def memory_figure(res):
    """A stacked bar of memory per GPU by kind against the GPU's capacity (a matplotlib Figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = res.memory
    fig, ax = plt.subplots(figsize=(8, 2.6))
    left = 0.0
    colors = dict(zip(api.MEMORY_KINDS, ("#4c72b0", "#dd8452", "#c44e52", "#55a868", "#8172b3", "#937860")))
    for k in api.MEMORY_KINDS:
        v = getattr(m, k) / 1e9
        if v > 0:
            ax.barh([0], [v], left=left, color=colors[k], label=f"{k.replace('_', ' ')} {v:.3g} GB")
            left += v
    ax.axvline(m.capacity / 1e9, color="k", ls="--", lw=1.2)
    ax.text(m.capacity / 1e9, 0.45, f" capacity {m.capacity / 1e9:.3g} GB", va="bottom", ha="right", fontsize=9)
    ax.set_xlim(0, max(m.total, m.capacity) / 1e9 * 1.05)
    ax.set_ylim(-0.6, 0.8)
    ax.set_yticks([])
    ax.set_xlabel("GB per GPU")
    ax.set_title(f"Memory per GPU: {m.total / 1e9:.3g} GB of {m.capacity / 1e9:.3g} GB on {m.gpu}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, fontsize=8, frameon=False)
    return fig


def write_report(out: Path, res) -> None:
    """Write report.md, per-op, per-role and memory CSVs and three PNG figures into out (all or nothing)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from c3kit.report import Report

    cfg, result = res.config, res.step
    roles = result.by_role()
    streams = result.by_stream()
    t = result.totals
    with Report(out, f"c3kit analyze: {cfg.model.name} {cfg.phase} step") as rep:
        rep.text(_describe(cfg) + ".")
        if cfg.chosen:
            rep.text(f"Chosen automatically: {', '.join(cfg.chosen)}.")
        a = res.attention()
        rep.text(f"Attention backend: {a['backend']}" + (" (what current PyTorch's SDPA picks on this GPU)"
                                                          if a['default'] else "") + f"; basis: {a['basis']}.")
        if len(cfg.tried) > 1:
            rep.table("layouts_tried", pd.DataFrame([{"layout": c.label(), "verdict": c.verdict,
                                                      "seconds_per_sequence": c.seconds_per_sequence}
                                                     for c in cfg.tried]), "Layouts the auto-layout tried")
        how = "nothing overlaps" if result.policy in ("none", "serial") else "ops overlap where dependencies allow"
        rep.text(f"Cost model: c3kit.cost {res.cost_model!r}. Overlap policy: {result.policy} ({how}; see "
                 "docs/analyze.md in the c3kit repository). "
                 f"Step time {fmt_time(t.step_time)}, compute {fmt_time(t.compute)}, communication "
                 f"{fmt_time(t.comm)} of which {fmt_time(t.exposed)} exposed and {fmt_time(t.hidden)} hidden, "
                 f"pipeline bubble {fmt_time(t.bubble)}; MFU {100 * t.mfu:.1f}%, {t.tokens_per_s:,.0f} tokens/s.")
        rep.text(_stream_line(result) + ". TP collectives that the next op needs are exposed unless an "
                 "independent GEMM (the weight gradient in the backward) covers them; DP gradient reductions hide "
                 "behind the backward of the layers below; FSDP gathers are prefetched one layer ahead.")
        rep.text(_memory_line(res)[0].upper() + _memory_line(res)[1:] + " (c3kit.workload.memory).")
        if len(streams):
            rep.table("streams", streams, "Communication by parallel group (seconds per GPU per step)")
        if res.overlap_modes:
            rep.table("overlap_modes", pd.DataFrame(list(res.overlap_modes)), "Step time by overlap mode: none "
                      "(every collective on the critical path), simple (dependencies only), contended (independent "
                      "pairs at the measured contention, the default), auto (the selector per "
                      "collective-GEMM pair, contended's rule for the other pairs), each schedule family forced "
                      "where it applies; vs_simple = step time / "
                      "simple - 1")
        rep.table("totals", pd.DataFrame([{"metric": k, "value": v} for k, v in vars(t).items()]), "Totals (SI units)")
        rep.table("memory", res.memory_frame(), "Memory per GPU (bytes and GB)")
        rep.table("by_role", roles, "Per operator role and phase (seconds per GPU per step)")
        rep.table("ops", result.frame(), "Every node of the step graph", show_rows=0)

        labels = [f"{r.role}/{r.phase}" for r in roles.itertuples(index=False)]
        fig, ax = plt.subplots(figsize=(10, max(3.0, 0.28 * len(labels))))
        y = range(len(labels))
        ax.barh(y, roles["compute_s"], color="#4c72b0", label="compute")
        ax.barh(y, roles["exposed_s"], left=roles["compute_s"], color="#dd5555", label="exposed comm")
        ax.barh(y, roles["hidden_s"], left=roles["compute_s"] + roles["exposed_s"], color="#f2b5b5",
                label="hidden comm")
        ax.set_yticks(list(y), labels)
        ax.invert_yaxis()
        ax.set_xlabel("seconds per GPU per step")
        ax.legend(loc="lower right")
        ax.set_title("Time per operator")
        rep.figure("time_per_op", fig, "Compute, exposed and hidden communication per operator")

        rep.figure("memory", memory_figure(res), "Memory per GPU by kind against the GPU's capacity")

        comm = roles[roles["comm_s"] > 0]
        if len(comm):
            fig, ax = plt.subplots(figsize=(8, max(2.5, 0.35 * len(comm) + 1)))
            y = range(len(comm))
            ax.barh(y, comm["exposed_s"], color="#dd5555", label="exposed")
            ax.barh(y, comm["hidden_s"], left=comm["exposed_s"], color="#8fbf8f", label="hidden")
            ax.set_yticks(list(y), [f"{r.role}/{r.phase}" for r in comm.itertuples(index=False)])
            ax.invert_yaxis()
            ax.set_xlabel("seconds per GPU per step")
            ax.legend(loc="lower right")
            ax.set_title("Communication: exposed vs hidden")
            rep.figure("exposed_vs_hidden", fig, "Exposed and hidden communication per collective")
