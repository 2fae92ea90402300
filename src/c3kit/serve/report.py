"""Tables, figures and a Perfetto trace of serving runs (added to an open c3kit.report.Report)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from c3kit.serve.metrics import PERCENTILES, per_request

TRACE_MAX_ITERATIONS = 20000  # Perfetto stays responsive; the CSV has every iteration


def summary_frame(runs) -> pd.DataFrame:
    """One row per run: rate, throughput, latency percentiles (ms), KV use, batch, preemptions, SLO attainment."""
    rows = []
    for r in runs:
        m = r.metrics
        row = {"rate_rps": r.rate, "requests": m.requests, "throughput_rps": m.throughput_rps,
               "output_tok_s": m.output_tps, "total_tok_s": m.total_tps}
        for name in ("ttft", "tpot", "itl", "e2e"):
            for p in PERCENTILES:
                row[f"{name}_p{p}_ms"] = getattr(m, name)[f"p{p}"] * 1e3
        row.update(mean_batch=m.mean_batch, max_batch=m.max_batch, mean_kv_use=m.mean_kv_use,
                   max_kv_use=m.max_kv_use, preemptions=m.preemptions, iterations=m.iterations,
                   goodput_rps=m.goodput_rps, slo_attained=m.slo_attained)
        rows.append(row)
    return pd.DataFrame(rows)


def request_frame(result) -> pd.DataFrame:
    """Per-request arrival, lengths, TTFT, TPOT, end-to-end latency (s) and preemptions."""
    pr = per_request(result)
    return pd.DataFrame({"arrival_s": result.arrival, "prompt_len": result.prompt, "output_len": result.output,
                         "ttft_s": pr["ttft"], "tpot_s": pr["tpot"], "e2e_s": pr["e2e"],
                         "preemptions": result.preemptions})


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def fig_cdfs(runs):
    """Latency CDFs (TTFT, TPOT, end-to-end), one line per run."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for r in runs:
        pr = per_request(r.result)
        label = "trace" if math.isnan(r.rate) else ("all at t=0" if math.isinf(r.rate) else f"{r.rate:.3g} req/s")
        for ax, key in zip(axes, ("ttft", "tpot", "e2e")):
            x = np.sort(pr[key][np.isfinite(pr[key])]) * 1e3
            if len(x):
                ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=label)
    for ax, t in zip(axes, ("TTFT", "TPOT", "end-to-end latency")):
        ax.set_xlabel(f"{t} (ms)")
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of requests")
    axes[-1].legend(fontsize=7)
    fig.suptitle("Latency CDFs")
    return fig


def fig_capacity(df: pd.DataFrame, best_rate: float | None = None):
    """Throughput and p99 TPOT (and p99 TTFT) against the offered rate."""
    plt = _plt()
    d = df[np.isfinite(df["rate_rps"])].sort_values("rate_rps")
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
    a.plot(d["rate_rps"], d["throughput_rps"], "o-", label="served")
    a.plot(d["rate_rps"], d["rate_rps"], ":", color="grey", label="offered")
    a.set_xlabel("offered rate (req/s)")
    a.set_ylabel("throughput (req/s)")
    a.legend()
    b.plot(d["rate_rps"], d["tpot_p99_ms"], "o-", label="p99 TPOT")
    b.plot(d["rate_rps"], d["ttft_p99_ms"], "s--", label="p99 TTFT")
    b.set_yscale("log")
    b.set_xlabel("offered rate (req/s)")
    b.set_ylabel("ms")
    b.legend()
    for ax in (a, b):
        ax.grid(alpha=0.3)
        if best_rate is not None and math.isfinite(best_rate):
            ax.axvline(best_rate, color="green", alpha=0.5)
    fig.suptitle("Capacity curve")
    return fig


def fig_timeline(result, replica: int = 0):
    """KV-cache use and batch size over time (one replica)."""
    plt = _plt()
    it = result.iterations
    it = it[it[:, 0] == replica]
    fig, (a, b) = plt.subplots(2, 1, figsize=(11, 4.8), sharex=True)
    t = it[:, 1]
    a.plot(t, 100 * it[:, 6] / result.kv_blocks, lw=0.8)
    a.set_ylabel("KV blocks used (%)")
    b.plot(t, it[:, 5], lw=0.8, label="decode requests")
    b.plot(t, it[:, 4], lw=0.8, label="prefill requests")
    b.plot(t, it[:, 7], lw=0.8, label="waiting")
    b.set_ylabel("requests")
    b.set_xlabel("time (s)")
    b.legend(fontsize=7)
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.suptitle(f"KV cache and batch over time (replica {replica})")
    return fig


def perfetto_trace(result, max_iterations: int = TRACE_MAX_ITERATIONS) -> dict:
    """Chrome / Perfetto trace JSON: one complete event per iteration per replica, KV and batch counters."""
    events = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "c3kit serve"}}]
    for rep in range(result.replicas):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": rep, "args": {"name": f"replica {rep}"}})
    it = result.iterations[:max_iterations]
    for row in it:
        rep, t, d, pt, pn, dn, kv, wq, rn, pre = row
        us, dus = t * 1e6, d * 1e6
        events.append({"name": f"prefill {int(pt)} / decode {int(dn)}", "ph": "X", "pid": 0, "tid": int(rep),
                       "ts": us, "dur": dus, "args": {"prefill_tokens": int(pt), "prefill_requests": int(pn),
                                                      "decode_requests": int(dn), "kv_blocks_used": int(kv),
                                                      "waiting": int(wq), "running": int(rn), "preempted": int(pre)}})
        events.append({"name": f"replica {int(rep)}", "ph": "C", "pid": 0, "ts": us,
                       "args": {"kv_used_pct": 100.0 * kv / result.kv_blocks, "batch": int(pn + dn),
                                "waiting": int(wq)}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"iterations_total": int(len(result.iterations)), "iterations_shown": int(len(it))}}
