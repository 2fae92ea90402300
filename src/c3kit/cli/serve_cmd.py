"""CLI: `c3kit serve`: simulate an LLM server under a request load; `c3kit serve study`: the inference studies."""

from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path

import typer

from c3kit.cli.common import (JSON_OPT, POWER_OPT, console, df_table, emit_json, finish_studies, out_dir_option,
                              progress_bar, rich_table, with_power)
from c3kit.units import fmt_time

serve_app = typer.Typer(help="Serving: TTFT, TPOT and throughput of an LLM server under load (docs/serve.md).",
                        invoke_without_command=True)
DEFAULT_OUT = "c3kit-out/serve"


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.add_typer(serve_app, name="serve")


def _rates(text: str | None) -> list[float] | None:
    from c3kit.serve.workload import ServeError

    if text is None:
        return None
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ServeError(f"--rates must be comma-separated numbers (requests/s), got {text!r}") from None
    if not vals or any(not (v > 0) or not math.isfinite(v) for v in vals):
        raise ServeError(f"--rates must be finite numbers > 0 (requests/s), got {text!r}")
    return vals


@serve_app.callback()
def serve(
    ctx: typer.Context,
    model: str = typer.Option("Llama-3-8B", "--model", help="Preset name or path to a Hugging Face config.json."),
    hw: str = typer.Option("H200-SXM", "--hw", help="GPU from `c3kit hw list`."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel size of one replica."),
    pp: int = typer.Option(1, "--pp", help="Pipeline stages of one replica."),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel size (MoE models)."),
    replicas: int = typer.Option(1, "--replicas", help="Replicas behind a round-robin load balancer."),
    rate: float = typer.Option(None, "--rate", help="Poisson arrival rate (requests/s over all replicas) [default: 10]."),
    rates: str = typer.Option(None, "--rates", help="Comma-separated rates: a capacity curve."),
    trace: Path = typer.Option(None, "--trace", help="CSV or JSONL trace with arrival_s, prompt_len, output_len."),
    prompt_len: str = typer.Option("sharegpt", "--prompt-len",
                                   help="N, uniform:LO:HI, normal:MEAN:STD, lognormal:MEAN:SIGMA, exp:MEAN, "
                                        "sharegpt or alpaca."),
    output_len: str = typer.Option("sharegpt", "--output-len", help="Output lengths, same forms as --prompt-len."),
    requests: int = typer.Option(1000, "--requests", help="Requests per simulated run."),
    seed: int = typer.Option(0, "--seed", help="Random seed of arrivals and lengths."),
    slo: str = typer.Option(None, "--slo", help="Latency SLOs, e.g. ttft=2s,tpot=100ms[,e2e=..][,attain=0.9]; "
                                                "without --rate/--rates: find the highest rate meeting them."),
    max_batched_tokens: int = typer.Option(8192, "--max-batched-tokens", help="Token budget per iteration."),
    max_seqs: int = typer.Option(256, "--max-seqs", help="Most sequences per iteration."),
    chunked_prefill: bool = typer.Option(True, "--chunked-prefill/--no-chunked-prefill",
                                         help="Chunk long prompts and mix them with decodes (vLLM V1)."),
    gpu_mem_util: float = typer.Option(0.9, "--gpu-mem-util", help="Share of GPU memory for weights + KV (vLLM)."),
    block_size: int = typer.Option(16, "--block-size", help="Tokens per KV-cache block (vLLM's --block-size)."),
    mixed_batches: bool = typer.Option(False, "--mixed-batches/--no-mixed-batches",
                                       help="Without chunked prefill: whole prompts run beside the decode batch "
                                            "(TensorRT-LLM in-flight batching)."),
    reserve_kv: bool = typer.Option(False, "--reserve-kv/--no-reserve-kv",
                                    help="Admit a request only with KV for its whole life reserved, never preempt "
                                         "(TensorRT-LLM GUARANTEED_NO_EVICT)."),
    kv_of_free: bool = typer.Option(False, "--kv-of-free/--kv-of-total",
                                    help="--gpu-mem-util as a share of the memory left after the weights "
                                         "(TensorRT-LLM) instead of the whole GPU (vLLM)."),
    dtype: str = typer.Option("bf16", "--dtype", help="Weights, activations and KV dtype."),
    cost_model: str = typer.Option("efficiency", "--cost-model", help="roofline, efficiency or table (c3kit.cost)."),
    power: str = POWER_OPT,
    policy: str = typer.Option("simple", "--policy", help="Overlap policy of the step model: simple or serial."),
    engine: str = typer.Option("none", "--engine",
                               help="Engine terms beyond the kernels (docs/serve.md): none, loop, loop-eager or "
                                    "vllm-v0 (CUDA graph capture sizes, eager dispatch, host time per iteration)."),
    out: Path = typer.Option(Path(DEFAULT_OUT), "--out", help="Report folder (tables, figures, Perfetto trace)."),
    as_json: bool = JSON_OPT,
) -> None:
    """Simulate serving: TTFT, TPOT, ITL, latency, throughput, goodput; a rate sweep or the highest rate meeting SLOs."""
    if ctx.invoked_subcommand is not None:
        return
    from c3kit.serve import experiment as ex
    from c3kit.serve.metrics import parse_slo
    from c3kit.serve.workload import load_trace, parse_lengths

    step_policy, rate_list = _check_args(policy, engine, requests, rate, rates, trace)
    slo_obj = parse_slo(slo) if slo is not None else None
    p_spec, o_spec = parse_lengths(prompt_len, "prompt"), parse_lengths(output_len, "output")
    workload = load_trace(trace) if trace is not None else None
    cm, cost_label = with_power(cost_model, power)
    setup = ex.make_setup(model, hw, tp=tp, pp=pp, ep=ep, replicas=replicas, dtype=dtype, cost_model=cm,
                          policy=step_policy, max_batched_tokens=max_batched_tokens, max_seqs=max_seqs,
                          chunked_prefill=chunked_prefill, gpu_memory_utilization=gpu_mem_util, engine=engine,
                          block_size=block_size, mixed_batches=mixed_batches, reserve_kv=reserve_kv,
                          kv_of_free=kv_of_free)
    if workload is not None:
        setup.sched.check(workload)
    else:
        # the longest request the length specs can draw must fit: check on a sample of the real draws
        from c3kit.serve.workload import poisson

        setup.sched.check(poisson(1.0, requests, p_spec, o_spec, seed))
    mode = _mode(workload, rate_list, slo_obj, rate)
    runs, search = _simulate(setup, mode, workload, rate, rate_list, requests, p_spec, o_spec, seed, slo_obj,
                             not as_json)
    main = _main_run(runs, search)
    info = {"setup": setup.describe(), "cost_model": cost_label, "policy": policy, "engine": engine, "mode": mode,
            "workload": main.result.source, "kv": setup.kv.to_dict(),
            "slo": slo_obj.describe() if slo_obj else None,
            "best_rate_rps": (search.best_rate if search else None),
            "saturated_rps": (search.saturated_rps if search else None)}
    _write_report(out, setup, runs, main, info)
    from c3kit.serve.report import summary_frame

    df = summary_frame(runs)
    if as_json:
        emit_json({**info, "runs": df.to_dict(orient="records"), "metrics": main.metrics.to_dict(), "out": str(out)})
        return
    _print(setup, info, df, main, out)


def _check_args(policy: str, engine: str, requests: int, rate, rates, trace):
    """Reject bad or conflicting options before any work: (the step model's overlap policy, the --rates list)."""
    from c3kit.errors import C3kitError
    from c3kit.serve.overheads import get_engine
    from c3kit.serve.workload import ServeError
    from c3kit.step import SerialOverlap, SimpleOverlap

    policies = {"simple": SimpleOverlap(), "serial": SerialOverlap()}
    if policy not in policies:
        raise C3kitError(f"unknown overlap policy {policy!r}: use one of {', '.join(policies)}")
    get_engine(engine)  # an unknown name fails before any work
    if requests < 1:
        raise ServeError(f"--requests must be >= 1, got {requests}")
    if rate is not None and (not (rate > 0) or not math.isfinite(rate)):
        raise ServeError(f"--rate must be a finite number > 0 (requests/s), got {rate:g}")
    rate_list = _rates(rates)
    if trace is not None and (rate is not None or rate_list is not None):
        raise ServeError("give either --trace or --rate/--rates, not both")
    if rate is not None and rate_list is not None:
        raise ServeError("give either --rate or --rates, not both")
    return policies[policy], rate_list


def _mode(workload, rate_list, slo_obj, rate) -> str:
    """What to simulate: a trace, a rate sweep, the highest rate meeting the SLOs, or one rate."""
    if workload is not None:
        return "trace"
    if rate_list is not None:
        return "sweep"
    if slo_obj is not None and rate is None:
        return "slo"
    return "rate"


def _simulate(setup, mode: str, workload, rate, rate_list, requests: int, p_spec, o_spec, seed: int, slo_obj,
              show: bool):
    """Run the mode's simulations under a progress bar: (runs, the SLO search or None)."""
    from c3kit.serve import experiment as ex

    if mode == "trace":
        total = workload.n
    elif mode == "sweep":
        total = requests * len(rate_list)
    elif mode == "slo":
        total = requests * ex.search_runs()
    else:
        total = requests
    search = None
    with _progress(total, show) as advance:
        if mode == "trace":
            runs = [ex.run_workload(setup, workload, float("nan"), slo_obj, advance)]
        elif mode == "sweep":
            runs = ex.sweep(setup, rate_list, requests, p_spec, o_spec, seed, slo_obj, advance)
        elif mode == "slo":
            search = ex.find_max_rate(setup, slo_obj, requests, p_spec, o_spec, seed, progress=advance)
            runs = [r for r in search.runs if math.isfinite(r.rate)]
        else:
            runs = [ex.run_rate(setup, rate if rate is not None else 10.0, requests, p_spec, o_spec, seed, slo_obj,
                                advance)]
    return runs, search


def _main_run(runs, search):
    if search is not None and math.isfinite(search.best_rate):
        return min(runs, key=lambda r: abs(math.log(r.rate / search.best_rate)))
    return runs[-1]


@contextmanager
def _progress(total: int, enabled: bool = True):
    """A progress bar over simulated requests; yields advance(k): k more requests finished."""
    done = [0]
    with progress_bar("simulating", enabled) as update:
        update(0, total)

        def advance(k: int) -> None:
            done[0] += k
            update(done[0], total)

        yield advance


def _write_report(out: Path, setup, runs, main, info: dict) -> None:
    from c3kit.report import Report
    from c3kit.serve import report as sr

    df = sr.summary_frame(runs)
    with Report(out, f"c3kit serve: {setup.model.name} on {setup.hw.name}") as rep:
        rep.text(setup.describe() + f". Cost model {info['cost_model']}, overlap policy {info['policy']}.")
        rep.text(f"Workload: {info['workload']}." + (f" SLO: {info['slo']}." if info["slo"] else ""))
        if info["best_rate_rps"] is not None:
            b = info["best_rate_rps"]
            rep.text(f"Highest rate meeting the SLO: {b:.4g} req/s" if math.isfinite(b) else
                     "No rate tried meets the SLO (the lowest tried was 1/64 of the saturated throughput).")
            rep.text(f"Saturated throughput (all requests at t = 0): {info['saturated_rps']:.4g} req/s.")
        rep.table("summary", df, "Per run: throughput, latency percentiles (ms), batch, KV use")
        rep.table("requests", sr.request_frame(main.result), "Per request of the main run (s)", show_rows=0)
        rep.table("iterations", main.result.iteration_frame(), "Per scheduler iteration of the main run",
                  show_rows=0)
        rep.figure("latency_cdf", sr.fig_cdfs(runs), "TTFT, TPOT and end-to-end latency CDFs")
        if sum(math.isfinite(r.rate) for r in runs) > 1:
            rep.figure("capacity", sr.fig_capacity(df, info["best_rate_rps"]), "Throughput and p99 latency vs rate")
        rep.figure("timeline", sr.fig_timeline(main.result), "KV-cache use and batch size over time")
        rep.json("trace", sr.perfetto_trace(main.result))
        rep.text("trace.json: the scheduler's iterations (open in ui.perfetto.dev or chrome://tracing).")
        rep.json("metrics", {**info, "metrics": main.metrics.to_dict()})


def _print(setup, info: dict, df, main, out: Path) -> None:
    console.print(setup.describe())
    console.print(f"workload: {info['workload']}; cost model {info['cost_model']}")
    cols = {"rate_rps": "rate req/s", "throughput_rps": "served req/s", "output_tok_s": "out tok/s",
            "ttft_p50_ms": "TTFT p50 ms", "ttft_p99_ms": "TTFT p99 ms", "tpot_p50_ms": "TPOT p50 ms",
            "tpot_p99_ms": "TPOT p99 ms", "e2e_p99_ms": "E2E p99 ms", "mean_batch": "batch", "max_kv_use": "max KV",
            "preemptions": "preempt"}
    if info["slo"]:
        cols.update({"slo_attained": "SLO met", "goodput_rps": "goodput"})
    console.print(df_table("Serving runs", df[list(cols)].rename(columns=cols).round(4)))
    m = main.metrics
    console.print(rich_table("Main run", ["metric", "p50", "p90", "p99"], [
        (k.upper(), *(fmt_time(getattr(m, k)[f"p{p}"]) for p in (50, 90, 99))) for k in ("ttft", "tpot", "itl", "e2e")]))
    if info["best_rate_rps"] is not None:
        b = info["best_rate_rps"]
        console.print(f"highest rate meeting {info['slo']}: " + (f"{b:.4g} req/s" if math.isfinite(b) else "none")
                      + f" (saturated throughput {info['saturated_rps']:.4g} req/s)")
    console.print(f"report: {out}/report.md")


@serve_app.command("study")
def study(
    name: str = typer.Argument("all", help="dma, pim, fused or all."),
    quick: bool = typer.Option(False, "--quick", help="Fewer rates and requests."),
    out: Path = out_dir_option("c3kit-out/serve-study", "Report folder (CSV, PNG, report.md)."),
    as_json: bool = JSON_OPT,
) -> None:
    """The inference studies on the serving simulator: DMA collectives, PIM GEMVs, fused GEMM + reduce-scatter."""
    from c3kit.studies.serving import run_named

    with progress_bar("serving studies", not as_json) as update:
        results = run_named(name, quick=quick, progress=lambda label: update(0, None, label))
    finish_studies(results, out, "c3kit serve study", as_json)
