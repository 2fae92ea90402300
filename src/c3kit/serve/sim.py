"""The serving event loop: arrivals, scheduler iterations priced by a pricer, per-request and per-iteration records.

The loop is the whole simulator core: the scheduler (scheduler.py) decides what runs, the pricer
(pricing.py, or any callable (prefill chunks, decode count, decode KV tokens) -> seconds) says how
long it takes, and time advances by that. Replicas serve round-robin shares of the workload
independently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from c3kit.serve.scheduler import Scheduler, SchedulerConfig
from c3kit.serve.workload import ServeError, Workload

ITER_COLUMNS = ("replica", "start_s", "dur_s", "prefill_tokens", "prefill_reqs", "decode_reqs", "kv_blocks_used",
                "waiting", "running", "preempted")


@dataclass
class SimResult:
    """Per-request times (s) and per-iteration records of one simulated run (all replicas)."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    preemptions: np.ndarray
    iterations: np.ndarray  # rows of ITER_COLUMNS
    gaps: np.ndarray  # inter-token gaps across preemptions (s)
    kv_blocks: int
    block_size: int
    replicas: int = 1
    source: str = ""
    info: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Requests simulated."""
        return len(self.arrival)

    def iteration_frame(self):
        """The per-iteration records as a pandas DataFrame."""
        import pandas as pd

        df = pd.DataFrame(self.iterations, columns=list(ITER_COLUMNS))
        for c in ITER_COLUMNS:
            if c not in ("start_s", "dur_s"):
                df[c] = df[c].astype(int)
        return df


Pricer = Callable[[list, int, int], float]


def _run_replica(w: Workload, pricer: Pricer, cfg: SchedulerConfig, replica: int, rows: list,
                 progress: Callable[[int], None] | None) -> Scheduler:
    sch = Scheduler(w, cfg)
    arrival = w.arrival.tolist()
    n = w.n
    now = 0.0
    nxt = 0
    append = rows.append
    tick = 0
    last_done = 0
    while sch.done < n:
        while nxt < n and arrival[nxt] <= now:
            sch.arrive(nxt)
            nxt += 1
        if sch.idle:
            now = arrival[nxt]
            continue
        b = sch.schedule(now)
        if b.empty:  # pragma: no cover - the scheduler always makes progress (see Scheduler.schedule)
            raise ServeError("the scheduler could not run any request: this is a bug, please report it")
        dt = pricer(b.prefill, b.decode, b.decode_kv)
        pt = 0
        for m, _ in b.prefill:
            pt += m
        append((replica, now, dt, pt, len(b.prefill), b.decode, sch.used_blocks, len(sch.waiting),
                len(sch.running), b.preempted))
        now += dt
        sch.complete(b, now)
        tick += 1
        if progress is not None and tick % 512 == 0:
            progress(sch.done - last_done)
            last_done = sch.done
    if progress is not None:
        progress(sch.done - last_done)
    return sch


def simulate(workload: Workload, pricer: Pricer, config: SchedulerConfig, replicas: int = 1,
             progress: Callable[[int], None] | None = None) -> SimResult:
    """Serve the workload on `replicas` identical replicas; progress(k) is told k more requests finished."""
    if not isinstance(replicas, int) or replicas < 1:
        raise ServeError(f"--replicas must be a whole number >= 1, got {replicas!r}")
    config.check(workload)
    parts = workload.split(replicas)
    rows: list = []
    first, finish, pre, gaps = [], [], [], []
    arr, pl, ol = [], [], []
    for r, w in enumerate(parts):
        sch = _run_replica(w, pricer, config, r, rows, progress)
        first.append(sch.first)
        finish.append(sch.finish)
        pre.append(sch.preemptions)
        gaps.extend(sch.gaps)
        arr.append(w.arrival)
        pl.append(w.prompt)
        ol.append(w.output)
    it = np.array(rows, dtype=float) if rows else np.zeros((0, len(ITER_COLUMNS)))
    return SimResult(arrival=np.concatenate(arr), prompt=np.concatenate(pl), output=np.concatenate(ol),
                     first_token=np.concatenate([np.asarray(f, float) for f in first]),
                     finish=np.concatenate([np.asarray(f, float) for f in finish]),
                     preemptions=np.concatenate([np.asarray(p, int) for p in pre]), iterations=it,
                     gaps=np.asarray(gaps, float), kv_blocks=config.kv_blocks, block_size=config.block_size,
                     replicas=replicas, source=workload.source)
