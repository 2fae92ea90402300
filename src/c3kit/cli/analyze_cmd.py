"""CLI: `c3kit analyze`: one training or inference step, per operator, with simple overlap."""

from __future__ import annotations

from pathlib import Path

import typer

from c3kit.cli.common import JSON_OPT, POWER_OPT, console, emit_json, rich_table, with_power
from c3kit.units import fmt_time

DEFAULT_OUT = "c3kit-out"


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.command("analyze")(analyze)


def analyze(
    model: str = typer.Option("Llama-3-70B", "--model", help="Preset name or path to a Hugging Face config.json."),
    hw: str = typer.Option("H200-SXM", "--hw", help="GPU from `c3kit hw list` (or a catalog TOML file)."),
    gpus: int = typer.Option(None, "--gpus", help="GPUs in the job [default: one node]."),
    tp: int = typer.Option(None, "--tp", help="Tensor-parallel size [default: 8, or fewer GPUs]."),
    sp: bool = typer.Option(None, "--sp/--no-sp", help="Sequence parallelism [default: on with TP in training]."),
    dp: int = typer.Option(None, "--dp", help="Data-parallel size [default: gpus / (tp x pp)]."),
    fsdp: bool = typer.Option(None, "--fsdp/--no-fsdp",
                              help="Shard weights, gradients, optimizer over DP (ZeRO-3) [default: when fastest]."),
    dist_opt: bool = typer.Option(None, "--dist-opt/--no-dist-opt",
                                  help="Shard the optimizer state over DP (ZeRO-1) [default: when needed to fit]."),
    pp: int = typer.Option(None, "--pp", help="Pipeline stages [default: the fewest that fit]."),
    vpp: int = typer.Option(1, "--vpp", help="Virtual pipeline stages per GPU (interleaved 1F1B)."),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel size (MoE models)."),
    seq: int = typer.Option(8192, "--seq", help="Sequence length (decode: KV-cache length)."),
    batch: int = typer.Option(None, "--batch", help="Global batch in sequences [default: 8 micro-batches per DP rank]."),
    micro_batch: int = typer.Option(None, "--micro-batch",
                                    help="Micro-batch in sequences [default: 1 in training, batch / dp in inference]."),
    dtype: str = typer.Option("bf16", "--dtype", help="Compute dtype (bf16, fp16, fp8, fp32)."),
    phase: str = typer.Option("train", "--phase", help="train, prefill or decode."),
    recompute: str = typer.Option(None, "--recompute", help="none, selective or full [default: the least that fits]."),
    policy: str = typer.Option("simple", "--policy", help="Overlap policy: simple (dependencies) or serial."),
    cost_model: str = typer.Option("efficiency", "--cost-model", help="roofline, efficiency or table (c3kit.cost)."),
    power: str = POWER_OPT,
    out: Path = typer.Option(Path(DEFAULT_OUT), "--out", help="Report folder."),
    as_json: bool = JSON_OPT,
) -> None:
    """Project one step per operator: compute, communication, exposed communication, share of step."""
    from c3kit.errors import C3kitError
    from c3kit.step import SerialOverlap, SimpleOverlap, project
    from c3kit.step.config import resolve

    policies = {"simple": SimpleOverlap(), "serial": SerialOverlap()}
    if policy not in policies:
        raise C3kitError(f"unknown overlap policy {policy!r}: use one of {', '.join(policies)}")
    cm, cost_model = with_power(cost_model, power)
    cfg = resolve(model=model, hw=hw, gpus=gpus, tp=tp, sp=sp, dp=dp, fsdp=fsdp, pp=pp, ep=ep, seq=seq,
                  batch=batch, micro_batch=micro_batch, dtype=dtype, phase=phase, recompute=recompute, vpp=vpp,
                  dist_optimizer=dist_opt, cost_model=cm, policy=policies[policy])
    from c3kit.step.overheads import DEFAULT_OVERHEADS

    result = project(cfg.graph, cfg.hw, policy=policies[policy], cost_model=cm, overheads=DEFAULT_OVERHEADS)
    write_report(out, cfg, result, cost_model)
    if as_json:
        emit_json({"config": config_dict(cfg), "chosen": list(cfg.chosen), "tried": list(cfg.tried),
                   "cost_model": cost_model,
                   **result.to_dict(), "out": str(out)})
        return
    _print(cfg, result, out, cost_model)


def config_dict(cfg) -> dict:
    """The resolved configuration as plain data."""
    p = cfg.par
    return {"model": cfg.model.name, "hw": cfg.hw.name, "phase": cfg.phase, "seq": cfg.seq, "dtype": cfg.dtype,
            "gpus": p.gpus, "tp": p.tp, "sp": p.sp, "dp": p.dp, "fsdp": p.fsdp, "pp": p.pp, "vpp": p.vpp, "ep": p.ep,
            "micro_batch": p.micro_batch, "global_batch": p.global_batch, "micro_batches": p.grad_accum,
            "recompute": p.recompute, "dist_optimizer": p.dist_optimizer}


def _describe(cfg) -> str:
    c = config_dict(cfg)
    return (f"{c['model']} {c['phase']} on {c['gpus']} x {c['hw']}: tp {c['tp']}{' +sp' if c['sp'] else ''}, "
            f"pp {c['pp']}{f' x vpp {c[chr(118) + chr(112) + chr(112)]}' if c['vpp'] > 1 else ''}, dp {c['dp']}"
            f"{' (fsdp)' if c['fsdp'] else (' (zero-1)' if c['dist_optimizer'] else '')}{f', ep {c[chr(101) + chr(112)]}' if c['ep'] > 1 else ''}, "
            f"seq {c['seq']}, batch {c['global_batch']} ({c['micro_batches']} x micro {c['micro_batch']}), "
            f"recompute {c['recompute']}, {c['dtype']}")


def _print(cfg, result, out: Path, cost_model: str) -> None:
    console.print(_describe(cfg) + f"; cost model {cost_model}")
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
             f"{100 * r.share:.1f}%") for r in roles.itertuples(index=False)]
    console.print(rich_table("Per operator (per GPU, per step)", ["op", "phase", "compute", "comm", "exposed comm",
                                                                 "share of step"], rows))
    t = result.totals
    console.print(rich_table("Totals", ["metric", "value"], [
        ("step time", fmt_time(t.step_time)), ("compute", fmt_time(t.compute)), ("communication", fmt_time(t.comm)),
        ("exposed comm", fmt_time(t.exposed)), ("hidden comm", fmt_time(t.hidden)),
        ("pipeline bubble", fmt_time(t.bubble)), ("step-level overheads", fmt_time(t.overhead)),
        ("comm share (serialized)", f"{100 * t.comm_share:.1f}%"),
        ("exposed share of step", f"{100 * t.exposed_share:.1f}%"), ("MFU", f"{100 * t.mfu:.1f}%"),
        ("tokens/s (all GPUs)", f"{t.tokens_per_s:,.0f}")]))
    console.print(_stream_line(result))
    console.print(f"report: {out}/report.md")


def _stream_line(result) -> str:
    parts = [f"{r.stream.upper()} {fmt_time(r.comm_s)}: {100 * r.hidden_frac:.0f}% hidden, "
             f"{fmt_time(r.exposed_s)} exposed" for r in result.by_stream().itertuples(index=False)]
    return "communication by group: " + ("; ".join(parts) if parts else "none")


def write_report(out: Path, cfg, result, cost_name: str = "efficiency") -> None:
    """Write report.md, per-op and per-role CSVs and two PNG figures into out (all or nothing)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from c3kit.report import Report

    roles = result.by_role()
    t = result.totals
    with Report(out, f"c3kit analyze: {cfg.model.name} {cfg.phase} step") as rep:
        rep.text(_describe(cfg) + ".")
        if cfg.chosen:
            rep.text(f"Chosen automatically: {', '.join(cfg.chosen)}.")
        if len(cfg.tried) > 1:
            rep.table("layouts_tried", pd.DataFrame([{"layout": c.label(), "verdict": c.verdict,
                                                      "seconds_per_sequence": c.seconds_per_sequence}
                                                     for c in cfg.tried]), "Layouts the auto-layout tried")
        rep.text(f"Cost model: c3kit.cost {cost_name!r}. Overlap policy: {result.policy} (ops overlap where dependencies allow; see docs/analyze.md). "
                 f"Step time {fmt_time(t.step_time)}, compute {fmt_time(t.compute)}, communication "
                 f"{fmt_time(t.comm)} of which {fmt_time(t.exposed)} exposed and {fmt_time(t.hidden)} hidden, "
                 f"pipeline bubble {fmt_time(t.bubble)}; MFU {100 * t.mfu:.1f}%, {t.tokens_per_s:,.0f} tokens/s.")
        rep.text(_stream_line(result) + ". TP collectives that the next op needs are exposed unless an "
                 "independent GEMM (the weight gradient in the backward) covers them; DP gradient reductions hide "
                 "behind the backward of the layers below; FSDP gathers are prefetched one layer ahead.")
        rep.table("streams", result.by_stream(), "Communication by parallel group (seconds per GPU per step)")
        rep.table("totals", pd.DataFrame([{"metric": k, "value": v} for k, v in vars(t).items()]), "Totals (SI units)")
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

        comm = roles[roles["comm_s"] > 0]
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
