"""A serving setup (model, GPU, layout, scheduler, pricer) and the runs built on it: one rate, a sweep, the SLO search."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from c3kit.serve.kv import KVCapacity, kv_capacity
from c3kit.serve.metrics import SLO, Metrics, compute
from c3kit.serve.pricing import StepPricer
from c3kit.serve.scheduler import SchedulerConfig
from c3kit.serve.sim import SimResult, simulate
from c3kit.serve.workload import LengthSpec, ServeError, Workload, poisson

Progress = Callable[[int], None]


@dataclass
class ServeSetup:
    """Everything fixed across the runs of one study: the replica, its KV capacity, scheduler limits and pricer."""

    model: object
    hw: object
    tp: int
    pp: int
    ep: int
    replicas: int
    dtype: str
    kv: KVCapacity
    sched: SchedulerConfig
    pricer: object
    label: str = ""
    notes: list = field(default_factory=list)

    def describe(self) -> str:
        """One line: model, GPUs, layout, KV cache and scheduler limits."""
        s = self.sched
        return (f"{self.model.name} on {self.replicas} x {self.tp * self.pp} {self.hw.name} (tp {self.tp}, pp {self.pp}"
                + (f", ep {self.ep}" if self.ep > 1 else "") + f"), {self.dtype}; KV cache {self.kv.tokens:,} tokens "
                f"per replica ({s.kv_blocks:,} blocks of {s.block_size}); max {s.max_batched_tokens} batched tokens, "
                f"{s.max_seqs} sequences, chunked prefill {'on' if s.chunked_prefill else 'off'}"
                + (", prompts beside decode" if s.mixed_batches and not s.chunked_prefill else "")
                + (", KV reserved for whole requests" if s.reserve_kv else "") + "; engine terms "
                f"{self.pricer.engine.name if hasattr(self.pricer, 'engine') else 'none'}")


def make_setup(model: str = "Llama-3-8B", hw: str = "H200-SXM", tp: int = 1, pp: int = 1, ep: int = 1,
               replicas: int = 1, dtype: str = "bf16", cost_model=None, policy=None, max_batched_tokens: int = 8192,
               max_seqs: int = 256, chunked_prefill: bool = True, gpu_memory_utilization: float = 0.9,
               block_size: int = 16, timer=None, engine=None, mixed_batches: bool = False,
               reserve_kv: bool = False, kv_of_free: bool = False) -> ServeSetup:
    """Resolve names into a ServeSetup (KV capacity from the memory model, a StepPricer for the layout).

    engine: the serving engine's terms beyond the kernels (serve/overheads.py ENGINES; None: "none").
    mixed_batches / reserve_kv: TensorRT-LLM's in-flight batching and GUARANTEED_NO_EVICT (scheduler.py);
    kv_of_free: gpu_memory_utilization is a fraction of the memory free after loading (TensorRT-LLM, kv.py)."""
    from c3kit.hw.catalog import get_gpu
    from c3kit.workload.model import get_model

    for k, v in (("tp", tp), ("pp", pp), ("ep", ep), ("replicas", replicas)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ServeError(f"--{k} must be a whole number >= 1, got {v!r}")
    m = get_model(model) if isinstance(model, str) else model
    g = get_gpu(hw) if isinstance(hw, str) else hw
    sched_probe = SchedulerConfig(kv_blocks=1, max_batched_tokens=max_batched_tokens, max_seqs=max_seqs,
                                  chunked_prefill=chunked_prefill, block_size=block_size)
    kv = kv_capacity(m, g, tp=tp, pp=pp, ep=ep, dtype=dtype, max_batched_tokens=max_batched_tokens,
                     gpu_memory_utilization=gpu_memory_utilization, block_size=block_size, of_free=kv_of_free)
    sched = SchedulerConfig(kv_blocks=kv.blocks, max_batched_tokens=sched_probe.max_batched_tokens,
                            max_seqs=max_seqs, chunked_prefill=chunked_prefill, block_size=block_size,
                            mixed_batches=mixed_batches, reserve_kv=reserve_kv)
    pricer = StepPricer(m, g, tp=tp, pp=pp, ep=ep, dtype=dtype, cost_model=cost_model, policy=policy, timer=timer,
                        engine=engine)
    return ServeSetup(m, g, tp, pp, ep, replicas, dtype, kv, sched, pricer)


@dataclass
class RateRun:
    """One simulated run: offered rate (inf = all at once; NaN = a trace), its metrics and raw result."""

    rate: float
    metrics: Metrics
    result: SimResult


def run_workload(setup: ServeSetup, w: Workload, rate: float = float("nan"), slo: SLO | None = None,
                 progress: Progress | None = None) -> RateRun:
    """Simulate a workload on the setup."""
    r = simulate(w, setup.pricer, setup.sched, setup.replicas, progress)
    return RateRun(rate, compute(r, slo), r)


def run_rate(setup: ServeSetup, rate: float, n: int, prompt: LengthSpec, output: LengthSpec, seed: int = 0,
             slo: SLO | None = None, progress: Progress | None = None) -> RateRun:
    """Poisson arrivals at `rate` requests/s over all replicas."""
    return run_workload(setup, poisson(rate, n, prompt, output, seed), rate, slo, progress)


def sweep(setup: ServeSetup, rates, n: int, prompt: LengthSpec, output: LengthSpec, seed: int = 0,
          slo: SLO | None = None, progress: Progress | None = None) -> list[RateRun]:
    """One run per rate (same seed: the same lengths, arrivals scaled), in the order given."""
    return [run_rate(setup, r, n, prompt, output, seed, slo, progress) for r in rates]


@dataclass
class SloSearch:
    """The highest rate found to meet the SLO (NaN if none), every run tried, and the saturated throughput."""

    best_rate: float
    runs: list
    saturated_rps: float


def find_max_rate(setup: ServeSetup, slo: SLO, n: int, prompt: LengthSpec, output: LengthSpec, seed: int = 0,
                  steps: int = 7, progress: Progress | None = None) -> SloSearch:
    """Bisect the request rate in log space between 1/64 of the saturated throughput and 1.25 times it."""
    sat = run_rate(setup, math.inf, n, prompt, output, seed, slo, progress)
    x = sat.metrics.throughput_rps
    runs = [sat]
    lo, hi = x / 64.0, x * 1.25
    first = run_rate(setup, lo, n, prompt, output, seed, slo, progress)
    runs.append(first)
    if not first.metrics.slo_met:
        return SloSearch(float("nan"), runs, x)
    top = run_rate(setup, hi, n, prompt, output, seed, slo, progress)
    runs.append(top)
    if top.metrics.slo_met:
        return SloSearch(hi, runs, x)
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        r = run_rate(setup, mid, n, prompt, output, seed, slo, progress)
        runs.append(r)
        if r.metrics.slo_met:
            lo = mid
        else:
            hi = mid
    runs.sort(key=lambda r: r.rate)
    return SloSearch(lo, runs, x)


def search_runs(steps: int = 7) -> int:
    """How many runs find_max_rate makes at most (for progress bars)."""
    return 3 + steps
