"""The simulator's output: op intervals per stream, resource use over time, totals, Perfetto export."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple


class Interval(NamedTuple):
    """One task on the timeline: started at `start`, moved work in [work_start, work_end], done at `end`."""

    name: str
    stream: str
    category: str  # "comp" or "comm"
    kind: str  # "compute" or "comm"
    start: float
    work_start: float
    work_end: float
    end: float
    alone: float  # s the task takes alone on the GPU (latencies included)
    uses: tuple[str, ...] = ()  # resources held while moving work: "sms", "dma", "links" (HBM: all)

    @property
    def duration(self) -> float:
        """end - start (latencies included)."""
        return self.end - self.start


class Segment(NamedTuple):
    """A stretch of time with constant resource use (recorded only when simulate(record=True))."""

    start: float
    end: float
    sms: float  # SMs in use
    hbm: float  # B/s of HBM in use
    engines: int  # DMA engines held
    link: float  # B/s of scale-up bandwidth in use


def _union_length(spans: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(spans):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


@dataclass(frozen=True)
class Timeline:
    """Intervals of every task, the streams with their priorities, and (optionally) resource segments."""

    intervals: tuple[Interval, ...]
    streams: tuple[tuple[str, int], ...]  # (name, priority) in first-use order
    segments: tuple[Segment, ...] = ()
    resources: tuple[tuple[str, float], ...] = ()  # (resource, capacity) for the trace's counters

    @property
    def makespan(self) -> float:
        """Time from 0 to the end of the last task."""
        return max((i.end for i in self.intervals), default=0.0)

    def by_stream(self, stream: str) -> tuple[Interval, ...]:
        """Intervals of one stream in start order."""
        return tuple(sorted((i for i in self.intervals if i.stream == stream), key=lambda i: i.start))

    def get(self, name: str) -> Interval:
        """The interval of a task by name."""
        for i in self.intervals:
            if i.name == name:
                return i
        raise KeyError(name)

    def by_resource(self, resource: str) -> tuple[Interval, ...]:
        """Intervals of the tasks that hold a resource ("sms", "dma" or "links") while they move work."""
        return tuple(sorted((i for i in self.intervals if resource in i.uses), key=lambda i: i.work_start))

    def busy(self, category: str) -> float:
        """Seconds during which at least one task of a category ('comp' or 'comm') moved work."""
        return _union_length([(i.work_start, i.work_end) for i in self.intervals if i.category == category])

    def time_in(self, category: str) -> float:
        """Sum of work-phase durations of a category's tasks (what contention stretches)."""
        return sum(i.work_end - i.work_start for i in self.intervals if i.category == category)

    def alone_in(self, category: str) -> float:
        """Sum of the alone times of a category's tasks."""
        return sum(i.alone for i in self.intervals if i.category == category)

    def utilization(self) -> dict[str, float]:
        """Time-averaged use of each resource as a fraction of its capacity (needs recorded segments)."""
        span = self.makespan
        caps = dict(self.resources)
        out: dict[str, float] = {}
        if not self.segments or span <= 0:
            return out
        for res in ("sms", "hbm", "engines", "link"):
            cap = caps.get(res, 0.0)
            if cap > 0:
                out[res] = sum((s.end - s.start) * getattr(s, res) for s in self.segments) / (span * cap)
        return out

    def totals(self) -> dict[str, float]:
        """Makespan, busy time per category, exposed communication, and per-stream busy time."""
        comp_busy = self.busy("comp")
        out = {"makespan": self.makespan, "comp_busy": comp_busy, "comm_busy": self.busy("comm"),
               "exposed_comm": max(0.0, self.makespan - comp_busy)}
        for name, _ in self.streams:
            out[f"stream:{name}"] = sum(i.duration for i in self.intervals if i.stream == name)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data: intervals, streams and totals."""
        return {"streams": [{"name": n, "priority": p} for n, p in self.streams],
                "intervals": [i._asdict() for i in self.intervals], "totals": self.totals()}

    def to_perfetto(self, process: str = "c3kit sim") -> dict[str, Any]:
        """Chrome/Perfetto trace-event JSON: one thread per stream, complete events (us), resource counters."""
        events: list[dict[str, Any]] = [
            {"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": {"name": process}}]
        tids = {name: k + 1 for k, (name, _) in enumerate(self.streams)}
        for name, prio in self.streams:
            events.append({"ph": "M", "pid": 1, "tid": tids[name], "name": "thread_name",
                           "args": {"name": f"{name} (priority {prio})"}})
            events.append({"ph": "M", "pid": 1, "tid": tids[name], "name": "thread_sort_index",
                           "args": {"sort_index": tids[name]}})
        for iv in sorted(self.intervals, key=lambda i: i.start):
            events.append({"ph": "X", "pid": 1, "tid": tids[iv.stream], "name": iv.name, "cat": iv.category,
                           "ts": iv.start * 1e6, "dur": max(0.0, iv.end - iv.start) * 1e6,
                           "args": {"work_start_us": iv.work_start * 1e6, "work_end_us": iv.work_end * 1e6,
                                    "alone_us": iv.alone * 1e6, "kind": iv.kind}})
        # a second process shows which tasks hold each resource (work phases only)
        events.append({"ph": "M", "pid": 2, "tid": 0, "name": "process_name", "args": {"name": "resources"}})
        for k, (res, label) in enumerate((("sms", "SMs"), ("dma", "DMA engines"), ("links", "scale-up links"))):
            held = self.by_resource(res)
            if not held:
                continue
            events.append({"ph": "M", "pid": 2, "tid": k + 1, "name": "thread_name", "args": {"name": label}})
            for iv in held:
                events.append({"ph": "X", "pid": 2, "tid": k + 1, "name": iv.name, "cat": iv.category,
                               "ts": iv.work_start * 1e6, "dur": max(0.0, iv.work_end - iv.work_start) * 1e6})
        caps = dict(self.resources)
        for seg in self.segments:
            args = {"sms": seg.sms, "engines": seg.engines}
            if caps.get("hbm"):
                args["hbm_pct"] = 100.0 * seg.hbm / caps["hbm"]
            if caps.get("link"):
                args["link_pct"] = 100.0 * seg.link / caps["link"]
            events.append({"ph": "C", "pid": 1, "name": "resources", "ts": seg.start * 1e6, "args": args})
        if self.segments:
            events.append({"ph": "C", "pid": 1, "name": "resources", "ts": self.makespan * 1e6,
                           "args": {"sms": 0, "engines": 0, "hbm_pct": 0.0, "link_pct": 0.0}})
        return {"traceEvents": events, "displayTimeUnit": "ns"}

    def perfetto_json(self, process: str = "c3kit sim") -> str:
        """to_perfetto() as a JSON string."""
        return json.dumps(self.to_perfetto(process))
