"""Timing helpers: device events on CUDA, a host clock on the CPU; warm-up first, median of repeats."""

from __future__ import annotations

import statistics
import time as _time
from typing import Callable, Sequence

from c3kit.runtime._torch import require_torch


def sync(device) -> None:
    """Wait for all work on device (no-op on the CPU)."""
    torch = require_torch()
    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


def elapsed(fn: Callable[[], object], device) -> float:
    """Seconds that one call fn() takes: CUDA events around it on a CUDA device, the host clock elsewhere."""
    torch = require_torch()
    if getattr(device, "type", str(device)) == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3
    t0 = _time.perf_counter()
    fn()
    return _time.perf_counter() - t0


def median_time(fn: Callable[[], object], device, iters: int, warmup: int = 1,
                before: Callable[[], object] | None = None) -> float:
    """Median seconds of fn() over `iters` single timings, after `warmup` calls; before() runs untimed ahead of each."""
    for _ in range(warmup):
        fn()
    sync(device)
    samples = []
    for _ in range(iters):
        if before is not None:
            before()
        samples.append(elapsed(fn, device))
    return statistics.median(samples)


def slowest_rank(seconds: float, device) -> float:
    """The largest of every rank's `seconds` (a max all-reduce over the default group)."""
    torch = require_torch()
    x = torch.tensor([seconds], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(x, op=torch.distributed.ReduceOp.MAX)
    return float(x.item())


def capture_graph(fns: Sequence[Callable[[], object]], device, warm: Sequence[Callable[[], object]] | None = None,
                  replays: int = 1):
    """A CUDA graph of the calls fns (in order): warm (default: fns) run first on a side stream, outside the
    capture, so that handles and workspaces exist before it; replayed `replays` times before it is returned."""
    torch = require_torch()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for f in (fns if warm is None else warm):
            f()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for f in fns:
            f()
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize(device)
    return graph


def time_graph(fn: Callable[[int], None], device, calls: int, repeats: int = 5) -> float:
    """Median seconds of one call fn(i), from replays of a CUDA graph of `calls` calls (no launch gaps)."""
    graph = capture_graph([lambda i=i: fn(i) for i in range(calls)], device, warm=[lambda: fn(0)])
    return statistics.median(elapsed(graph.replay, device) / calls for _ in range(repeats))


def time_loop(fn: Callable[[int], None], device, target_s: float = 0.02, repeats: int = 5,
              max_iters: int = 1000, graph_below_s: float = 0.0) -> float:
    """Median seconds of one call fn(i) (i rotates input sets), timed over loops of about target_s each.

    On CUDA, calls estimated shorter than graph_below_s are timed as CUDA-graph replays instead, so
    that host launch gaps do not count (falls back to the plain loop if capture fails).
    """
    torch = require_torch()
    cuda = getattr(device, "type", str(device)) == "cuda"
    fn(0)
    sync(device)
    t0 = _time.perf_counter()
    fn(1)
    sync(device)
    est = max(_time.perf_counter() - t0, 1e-6)
    iters = int(min(max_iters, max(1, target_s / est)))
    if cuda and est < graph_below_s:
        try:
            return time_graph(fn, device, calls=max(8, min(iters, 200)), repeats=repeats)
        except Exception:  # noqa: BLE001 - capture not possible here: time the plain loop
            torch.cuda.synchronize(device)

    def loop():
        for i in range(iters):
            fn(i)

    return statistics.median(elapsed(loop, device) / iters for _ in range(repeats))


def enqueue_clock_probe(cycles: int = 50_000):
    """Enqueue a clock probe on the current stream (spins of `cycles` and 2 x `cycles` ticks between events); read it with probe_clock_hz."""
    torch = require_torch()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    ev[0].record()
    torch.cuda._sleep(cycles)
    ev[1].record()
    ev[2].record()
    torch.cuda._sleep(2 * cycles)
    ev[3].record()
    return ev, cycles


def probe_clock_hz(probe) -> float:
    """SM clock (Hz) of an enqueued probe, waiting for it; the difference of its two spins cancels the
    launch and event overhead that both pay."""
    ev, cycles = probe
    ev[3].synchronize()
    dt = (ev[2].elapsed_time(ev[3]) - ev[0].elapsed_time(ev[1])) * 1e-3
    return cycles / dt if dt > 0 else float("nan")


def sm_clock_hz(device, cycles: int = 50_000) -> float:
    """The SM clock now, from a clock probe behind a leading spin (NaN off CUDA)."""
    torch = require_torch()
    if getattr(device, "type", str(device)) != "cuda":
        return float("nan")
    # the leading spin keeps the GPU busy while the host enqueues the probe: from an idle queue its
    # first interval would otherwise include launch latency
    torch.cuda._sleep(cycles)
    return probe_clock_hz(enqueue_clock_probe(cycles))


class Budget:
    """A family's wall-clock budget: loops stop taking new cases once it is spent (the file keeps what ran)."""

    deadline = float("inf")

    @classmethod
    def spent(cls) -> bool:
        """True once the running family's budget is used up."""
        return _time.perf_counter() > cls.deadline


def graph_time(fn: Callable[[], object], device, calls: int, repeats: int = 5) -> float:
    """Median seconds of one fn() from replays of a CUDA graph of `calls` calls (no launch gaps)."""
    g = capture_graph([fn] * calls, device, warm=[fn, fn], replays=2)
    return statistics.median(elapsed(g.replay, device) / calls for _ in range(repeats))


def eager_time(fn: Callable[[], object], device, target_s: float = 0.01, repeats: int = 5) -> float:
    """Median seconds of one fn() from loops of about target_s launched eagerly (host gaps included)."""
    fn()
    sync(device)
    t0 = _time.perf_counter()
    fn()
    sync(device)
    est = max(_time.perf_counter() - t0, 1e-6)
    iters = int(min(2000, max(2, target_s / est)))

    def loop():
        for _ in range(iters):
            fn()

    loop()
    sync(device)
    return statistics.median(elapsed(loop, device) / iters for _ in range(repeats))


def timed(fn, device, cuda: bool, graph: bool = True) -> float:
    """Graph-replay time on CUDA (falls back to eager when capture fails), host-clock loop on the CPU."""
    if cuda and graph:
        try:
            t = eager_time(fn, device, target_s=0.003, repeats=1)
            calls = int(max(3, min(100, 0.01 / max(t, 1e-7))))
            return graph_time(fn, device, calls)
        except Exception:  # noqa: BLE001 - not capturable (CPU sync inside): time it eagerly
            require_torch().cuda.synchronize(device)
    return eager_time(fn, device)
