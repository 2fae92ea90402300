"""Serving metrics from a SimResult: TTFT, TPOT, ITL, end-to-end latency, throughput, goodput under SLOs.

Definitions (those of vLLM's benchmark_serving): TTFT = first token time - arrival; TPOT = (finish -
first token) / (output tokens - 1) per request with more than one output token; ITL = every gap
between two consecutive tokens of a request (an iteration's duration counts once per request it
decoded, plus the gap across each preemption); duration = last finish - first arrival; throughput
= tokens or requests / duration; goodput = requests meeting every SLO / duration. An SLO set is met
at a rate when at least `attainment` of the requests meet every SLO (DistServe's convention).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

import numpy as np

from c3kit.serve.sim import SimResult
from c3kit.serve.workload import ServeError

PERCENTILES = (50, 90, 99)
SLO_KEYS = ("ttft", "tpot", "itl", "e2e")


@dataclass(frozen=True)
class SLO:
    """Latency targets in seconds (None: no target) and the share of requests that must meet all of them."""

    ttft: float | None = None
    tpot: float | None = None
    itl: float | None = None
    e2e: float | None = None
    attainment: float = 0.9

    def describe(self) -> str:
        """Human-readable, e.g. 'ttft <= 2 s, tpot <= 100 ms (90% of requests)'."""
        from c3kit.units import fmt_time

        parts = [f"{k} <= {fmt_time(getattr(self, k))}" for k in SLO_KEYS if getattr(self, k) is not None]
        return ", ".join(parts) + f" ({100 * self.attainment:g}% of requests)"


_DUR = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(us|µs|ms|s|min)?\s*$")
_SCALE = {None: 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "min": 60.0}


def parse_duration(text: str) -> float:
    """Seconds from '2s', '100ms', '250us', '1.5' (seconds)."""
    m = _DUR.match(str(text))
    if not m:
        raise ServeError(f"cannot read {text!r} as a duration: use e.g. 2s, 100ms or 250us")
    v = float(m.group(1)) * _SCALE[m.group(2)]
    if not (v > 0) or not math.isfinite(v):
        raise ServeError(f"a latency target must be > 0, got {text!r}")
    return v


def parse_slo(text: str) -> SLO:
    """An SLO from 'ttft=2s,tpot=100ms[,itl=..][,e2e=..][,attain=0.99]'."""
    if not text or not str(text).strip():
        raise ServeError("empty SLO: use e.g. ttft=2s,tpot=100ms")
    vals: dict = {}
    for part in str(text).split(","):
        if "=" not in part:
            raise ServeError(f"cannot parse SLO term {part.strip()!r}: use KEY=VALUE with KEY in "
                             f"{', '.join(SLO_KEYS)} or attain")
        k, v = (s.strip().lower() for s in part.split("=", 1))
        if k in vals:
            raise ServeError(f"SLO term {k!r} given twice")
        if k in SLO_KEYS:
            vals[k] = parse_duration(v)
        elif k in ("attain", "attainment"):
            try:
                a = float(v)
            except ValueError:
                raise ServeError(f"SLO attain must be a fraction in (0, 1], got {v!r}") from None
            if not 0 < a <= 1:
                raise ServeError(f"SLO attain must be a fraction in (0, 1], got {v!r}")
            vals["attainment"] = a
        else:
            raise ServeError(f"unknown SLO key {k!r}: use {', '.join(SLO_KEYS)} or attain")
    if not any(k in vals for k in SLO_KEYS):
        raise ServeError("an SLO needs at least one latency target: ttft, tpot, itl or e2e")
    return SLO(**vals)


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The q-th percentile (0..100) of values repeated by integer weights (lower value at ties)."""
    mask = weights > 0
    v, w = values[mask], weights[mask]
    if len(v) == 0:
        return float("nan")
    order = np.argsort(v, kind="stable")
    v, w = v[order], np.cumsum(w[order])
    rank = math.floor(q / 100.0 * (w[-1] - 1) + 1e-9)  # numpy's "lower" method on the expanded values
    return float(v[int(np.searchsorted(w, rank, side="right"))])


@dataclass(frozen=True)
class Metrics:
    """Headline serving figures of one run (seconds, tokens/s, requests/s)."""

    requests: int
    duration_s: float
    request_rate: float  # offered: requests / span of arrivals
    throughput_rps: float
    output_tps: float
    total_tps: float
    ttft: dict
    tpot: dict
    itl: dict
    e2e: dict
    mean_ttft: float
    mean_tpot: float
    mean_e2e: float
    mean_itl: float  # over every inter-token gap (vLLM's "Mean ITL")
    mean_batch: float  # decode + prefill requests per iteration, time-weighted
    max_batch: int
    mean_kv_use: float  # share of KV blocks in use, time-weighted
    max_kv_use: float
    preemptions: int
    iterations: int
    goodput_rps: float = float("nan")
    slo_attained: float = float("nan")
    slo_met: bool | None = None

    def to_dict(self) -> dict:
        """Plain JSON-ready data."""
        return asdict(self)


def _pcts(x: np.ndarray) -> dict:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return {f"p{p}": float("nan") for p in PERCENTILES}
    v = np.percentile(x, PERCENTILES)
    return {f"p{p}": float(a) for p, a in zip(PERCENTILES, v)}


def per_request(r: SimResult) -> dict[str, np.ndarray]:
    """TTFT, TPOT and end-to-end latency per request (s; TPOT NaN for one-token outputs)."""
    ttft = r.first_token - r.arrival
    e2e = r.finish - r.arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(r.output > 1, (r.finish - r.first_token) / np.maximum(r.output - 1, 1), np.nan)
    return {"ttft": ttft, "tpot": tpot, "e2e": e2e}


def itl_values(r: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """(gap seconds, how many inter-token intervals had it): iteration durations by decode count, and preemption gaps."""
    it = r.iterations
    vals = np.concatenate([it[:, 2], r.gaps]) if len(it) else r.gaps
    w = np.concatenate([it[:, 5], np.ones(len(r.gaps))]) if len(it) else np.ones(len(r.gaps))
    return vals, w


def slo_mask(r: SimResult, slo: SLO) -> np.ndarray:
    """Which requests meet every latency target (ITL: the largest inter-token gap is not tracked per request;
    a request meets an ITL target when its TPOT does)."""
    pr = per_request(r)
    ok = np.ones(r.n, bool)
    if slo.ttft is not None:
        ok &= pr["ttft"] <= slo.ttft
    if slo.tpot is not None:
        ok &= ~(pr["tpot"] > slo.tpot)  # NaN (one output token) has no TPOT to miss
    if slo.itl is not None:
        ok &= ~(pr["tpot"] > slo.itl)
    if slo.e2e is not None:
        ok &= pr["e2e"] <= slo.e2e
    return ok


def compute(r: SimResult, slo: SLO | None = None) -> Metrics:
    """The Metrics of a run, with goodput and SLO attainment when an SLO is given."""
    pr = per_request(r)
    start = float(r.arrival.min())
    end = float(np.nanmax(r.finish))
    dur = max(end - start, 1e-12)
    span = float(r.arrival.max() - start)
    it = r.iterations
    d = it[:, 2] if len(it) else np.zeros(0)
    busy = float(d.sum()) or 1.0
    batch = it[:, 4] + it[:, 5] if len(it) else np.zeros(0)
    kv = it[:, 6] / r.kv_blocks if len(it) else np.zeros(0)
    iv, iw = itl_values(r)
    itl = {f"p{p}": weighted_percentile(iv, iw, p) for p in PERCENTILES}
    out_tokens = float(r.output.sum())
    m = dict(
        requests=r.n, duration_s=dur, request_rate=(r.n - 1) / span if span > 0 else float("inf"),
        throughput_rps=r.n / dur, output_tps=out_tokens / dur, total_tps=(out_tokens + float(r.prompt.sum())) / dur,
        ttft=_pcts(pr["ttft"]), tpot=_pcts(pr["tpot"]), itl=itl, e2e=_pcts(pr["e2e"]),
        mean_ttft=float(np.mean(pr["ttft"])), mean_tpot=float(np.nanmean(pr["tpot"])) if np.isfinite(pr["tpot"]).any()
        else float("nan"), mean_e2e=float(np.mean(pr["e2e"])),
        mean_itl=float((iv * iw).sum() / iw.sum()) if iw.sum() > 0 else float("nan"),
        mean_batch=float((batch * d).sum() / busy), max_batch=int(batch.max()) if len(batch) else 0,
        mean_kv_use=float((kv * d).sum() / busy), max_kv_use=float(kv.max()) if len(kv) else 0.0,
        preemptions=int(r.preemptions.sum()), iterations=len(it))
    if slo is not None:
        ok = slo_mask(r, slo)
        att = float(ok.mean())
        m.update(goodput_rps=float(ok.sum()) / dur, slo_attained=att, slo_met=bool(att >= slo.attainment))
    return Metrics(**m)


def time_in_system(r: SimResult) -> tuple[float, float]:
    """(time-average number of requests in the system, from the iteration records; busy seconds covered).

    Counts waiting + running requests at each iteration start, weighted by the iteration's duration,
    plus zero for idle stretches; with several replicas the counts of all replicas are summed.
    """
    it = r.iterations
    if not len(it):
        return 0.0, 0.0
    dur = float(np.nanmax(r.finish) - r.arrival.min())
    occupied = float(((it[:, 7] + it[:, 8]) * it[:, 2]).sum())
    return occupied / dur, float(it[:, 2].sum())
