"""Serving workloads: request arrival times and prompt / output lengths (Poisson, trace files, length specs).

Length specs (prompt and output lengths, tokens):
- "512": every request the same length;
- "uniform:LO:HI": integers uniform in [LO, HI];
- "normal:MEAN:STD", "lognormal:MEAN:SIGMA", "exp:MEAN": rounded, at least 1 (lognormal: MEAN is the
  mean of the distribution, SIGMA the shape of the underlying normal);
- "sharegpt" / "alpaca": dataset-like lognormals whose means are the published per-dataset means of
  the vLLM paper (DATASETS below, with the source); the shape is an assumption, not a fit to the data.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from c3kit.errors import C3kitError


class ServeError(C3kitError):
    """A serving workload, layout or scheduler setting that cannot be simulated."""


# name -> (prompt mean, output mean, lognormal shape sigma, source)
DATASETS = {
    "sharegpt": (161.31, 337.99, 1.0,
                 "means: Kwon et al., 'Efficient Memory Management for LLM Serving with PagedAttention' "
                 "(SOSP 2023, arXiv:2309.06180) Fig. 11, ShareGPT input/output lengths; sigma 1.0 assumed"),
    "sharegpt-vllm-bench": (202.0, 179.0, 1.0,
                            "means: vLLM blog 'vLLM v0.6.0: 2.7x Throughput Improvement' (2024-09-05), its benchmark's "
                            "ShareGPT sample (500 prompts): average input 202, output 179 tokens; sigma 1.0 assumed"),
    "alpaca": (19.31, 58.45, 0.6,
               "means: Kwon et al. (SOSP 2023, arXiv:2309.06180) Fig. 11, Alpaca input/output lengths; "
               "sigma 0.6 assumed"),
}
MAX_LEN = 1 << 20  # cap on sampled lengths (tokens): a far tail beyond any model's context


@dataclass(frozen=True)
class LengthSpec:
    """How request lengths are drawn: kind ("fixed", "uniform", "normal", "lognormal", "exp") and parameters."""

    kind: str
    a: float
    b: float = 0.0
    text: str = ""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n lengths (int64, >= 1)."""
        if self.kind == "fixed":
            x = np.full(n, self.a)
        elif self.kind == "uniform":
            x = rng.integers(int(self.a), int(self.b) + 1, n)
        elif self.kind == "normal":
            x = rng.normal(self.a, self.b, n)
        elif self.kind == "lognormal":
            mu = math.log(self.a) - 0.5 * self.b ** 2  # so that the mean is self.a
            x = rng.lognormal(mu, self.b, n)
        elif self.kind == "exp":
            x = rng.exponential(self.a, n)
        else:  # pragma: no cover - parse_lengths only makes the kinds above
            raise ServeError(f"unknown length kind {self.kind!r}")
        return np.clip(np.rint(x), 1, MAX_LEN).astype(np.int64)

    @property
    def mean(self) -> float:
        """The mean length before rounding and clipping."""
        return {"fixed": self.a, "uniform": (self.a + self.b) / 2}.get(self.kind, self.a)


def _num(text: str, part: str) -> float:
    try:
        v = float(part)
    except ValueError:
        raise ServeError(f"length spec {text!r}: {part!r} is not a number") from None
    if not math.isfinite(v):
        raise ServeError(f"length spec {text!r}: {part!r} is not a finite number")
    return v


def parse_lengths(text: str, which: str = "prompt") -> LengthSpec:
    """A LengthSpec from "N", "uniform:LO:HI", "normal:MEAN:STD", "lognormal:MEAN:SIGMA", "exp:MEAN" or a dataset name."""
    s = str(text).strip().lower()
    usage = ("use N, uniform:LO:HI, normal:MEAN:STD, lognormal:MEAN:SIGMA, exp:MEAN or one of "
             + ", ".join(DATASETS))
    if s in DATASETS:
        p, o, sigma, _ = DATASETS[s]
        return LengthSpec("lognormal", p if which == "prompt" else o, sigma, s)
    parts = s.split(":")
    kind, args = parts[0], parts[1:]
    if not args:
        v = _num(text, kind) if kind.replace(".", "", 1).lstrip("-").isdigit() else None
        if v is None:
            raise ServeError(f"{which} length {text!r} is not a length: {usage}")
        if v < 1 or v != int(v):
            raise ServeError(f"{which} length must be a whole number >= 1, got {text!r}")
        return LengthSpec("fixed", v, text=s)
    arity = {"uniform": 2, "normal": 2, "lognormal": 2, "exp": 1}
    if kind not in arity or len(args) != arity[kind]:
        raise ServeError(f"{which} length {text!r} is not a length: {usage}")
    vals = [_num(text, a) for a in args]
    if kind == "uniform":
        lo, hi = vals
        if lo < 1 or hi < lo or lo != int(lo) or hi != int(hi):
            raise ServeError(f"{which} length {text!r}: need whole numbers 1 <= LO <= HI")
        return LengthSpec("uniform", lo, hi, s)
    if vals[0] <= 0 or (len(vals) > 1 and vals[1] < 0):
        raise ServeError(f"{which} length {text!r}: the mean must be > 0 and the spread >= 0")
    return LengthSpec(kind, vals[0], vals[1] if len(vals) > 1 else 0.0, s)


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival: arrival times (s), prompt and output lengths (tokens); `source` says where from."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    source: str = ""

    def __post_init__(self) -> None:
        n = len(self.arrival)
        if n == 0:
            raise ServeError("the workload has no requests: give --requests >= 1 or a non-empty trace")
        if len(self.prompt) != n or len(self.output) != n:
            raise ServeError("arrival, prompt and output arrays must have the same length")
        if (self.prompt < 1).any() or (self.output < 1).any():
            raise ServeError("prompt and output lengths must be >= 1 token")
        if not np.isfinite(self.arrival).all() or (self.arrival < 0).any():
            raise ServeError("arrival times must be finite and >= 0 s")
        if (np.diff(self.arrival) < 0).any():
            order = np.argsort(self.arrival, kind="stable")
            for k in ("arrival", "prompt", "output"):
                object.__setattr__(self, k, getattr(self, k)[order])

    @property
    def n(self) -> int:
        """Number of requests."""
        return len(self.arrival)

    def split(self, replicas: int) -> list["Workload"]:
        """Round-robin the requests over replicas (a load balancer that rotates), in arrival order."""
        if replicas == 1:
            return [self]
        return [Workload(self.arrival[i::replicas], self.prompt[i::replicas], self.output[i::replicas],
                         f"{self.source} (replica {i} of {replicas})") for i in range(replicas) if i < self.n]


def poisson(rate: float, n: int, prompt: LengthSpec | str, output: LengthSpec | str, seed: int = 0) -> Workload:
    """n requests with exponential inter-arrival times at `rate` requests/s (rate = inf: all at t = 0)."""
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ServeError(f"the number of requests must be >= 1, got {n!r}")
    if not (rate > 0):
        raise ServeError(f"request rate must be > 0 requests/s, got {rate!r}")
    p = parse_lengths(prompt, "prompt") if isinstance(prompt, str) else prompt
    o = parse_lengths(output, "output") if isinstance(output, str) else output
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0, n)  # drawn at every rate, so one seed gives the same lengths at all rates
    arr = np.zeros(n) if math.isinf(rate) else np.cumsum(gaps) / rate
    return Workload(arr, p.sample(rng, n), o.sample(rng, n),
                    f"Poisson {rate:g} req/s, prompt {p.text or p.kind}, output {o.text or o.kind}, seed {seed}")


TRACE_COLUMNS = ("arrival_s", "prompt_len", "output_len")


def load_trace(path: str | Path) -> Workload:
    """Requests from a CSV or JSONL file with columns arrival_s, prompt_len, output_len."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise ServeError(f"trace {p} does not exist: give a CSV or JSONL file with columns {', '.join(TRACE_COLUMNS)}")
    try:
        if p.suffix.lower() in (".jsonl", ".json", ".ndjson"):
            rows = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
            df = pd.DataFrame(rows)
        else:
            df = pd.read_csv(p)
    except (ValueError, json.JSONDecodeError, UnicodeDecodeError, pd.errors.ParserError) as e:
        raise ServeError(f"trace {p} is not a CSV or JSONL request trace ({type(e).__name__}): "
                         f"need columns {', '.join(TRACE_COLUMNS)}") from None
    missing = [c for c in TRACE_COLUMNS if c not in df.columns]
    if missing:
        raise ServeError(f"trace {p} lacks column(s) {', '.join(missing)}: need {', '.join(TRACE_COLUMNS)}")
    try:
        arr = df["arrival_s"].to_numpy(dtype=float)
        pl = df["prompt_len"].to_numpy(dtype=float)
        ol = df["output_len"].to_numpy(dtype=float)
    except (ValueError, TypeError):
        raise ServeError(f"trace {p}: arrival_s, prompt_len and output_len must be numbers") from None
    if len(arr) == 0:
        raise ServeError(f"trace {p} has no requests")
    if not (np.isfinite(pl).all() and np.isfinite(ol).all()) or (pl != np.rint(pl)).any() or (ol != np.rint(ol)).any():
        raise ServeError(f"trace {p}: prompt_len and output_len must be whole numbers")
    if (pl < 1).any() or (ol < 1).any():
        raise ServeError(f"trace {p}: prompt_len and output_len must be >= 1")
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ServeError(f"trace {p}: arrival_s must be finite and >= 0")
    return Workload(arr, pl.astype(np.int64), ol.astype(np.int64), f"trace {p.name} ({len(arr)} requests)")
