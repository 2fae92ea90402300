"""An event-driven fluid simulator of one GPU: tasks on prioritized streams share SMs, HBM bandwidth,
DMA engines and scale-up links through the contention model documented in docs/sim.md.

All GPUs of a collective are assumed symmetric, so one GPU's timeline stands for all of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import NamedTuple

from c3kit.errors import SimError
from c3kit.hw.model import GPU
from c3kit.sim.params import ContentionParams
from c3kit.sim.timeline import Interval, Segment, Timeline

INF = math.inf


@dataclass(frozen=True)
class Resources:
    """One GPU's shared resources as the simulator sees them (SI units)."""

    sms: int
    hbm_bw: float  # B/s usable by all ops together (peak x hbm_efficiency)
    dma_engines: int
    link_bw: float  # B/s per direction, all of this GPU's scale-up links together
    links: int = 1  # scale-up links sharing link_bw equally (a mesh: one per peer; a switch: one port)

    def __post_init__(self) -> None:
        if self.sms < 1 or self.hbm_bw <= 0 or self.link_bw <= 0 or self.dma_engines < 0 or self.links < 1:
            raise SimError("resources need >= 1 SM, positive HBM and link bandwidth, >= 0 DMA engines, >= 1 link")

    @classmethod
    def from_gpu(cls, gpu: GPU, params: ContentionParams | None = None) -> "Resources":
        """The resources of a catalog GPU under a contention model."""
        p = params or ContentionParams()
        links = 1 if gpu.scaleup.topology == "switch" else gpu.scaleup.links_per_gpu
        return cls(sms=gpu.sms, hbm_bw=gpu.hbm_bw * p.hbm_efficiency, dma_engines=gpu.dma.engines,
                   link_bw=gpu.scaleup.bw * p.link_efficiency, links=links)


@dataclass(frozen=True)
class Stream:
    """An in-order queue of tasks; a larger priority wins SMs first (and HBM among tasks of one kind)."""

    name: str
    priority: int = 0


class Task(NamedTuple):
    """One op on one stream (immutable; checked when simulated).

    kind "compute": work = s it takes alone on the whole GPU; sms = most SMs it may use (0: all);
    hbm = B/s of HBM it draws at full speed; phi = share of its time that scales with SMs (1 for
    compute-bound, ~0 for memory-bound); tiles = output tiles (wave quantization; 0: linear in SMs);
    curve = ((sms, speed), ...) by falling sms: measured or cost-model speeds with that many SMs, which
    replace the phi/tiles rule when given (a GEMM granted g SMs runs at the speed of the largest level <= g).
    kind "comm": work = bytes this GPU sends; sms = SMs it occupies (0: a DMA transfer, or free);
    engines = DMA engines it holds; bw = B/s its own SMs/engines can drive; links = bit mask of the
    GPU's links it sends over (bit l = link l; 0 = all), each link_bw / links, shared equally by the
    transfers on it; hbm = HBM bytes per byte sent.
    pre / post: latency before the work (launch) and after it (completion sync), using no resources.
    category: "comp" or "comm" for reporting ("" = by kind; a reduction kernel is compute-kind, comm-category).
    """

    name: str
    stream: str
    work: float
    kind: str = "compute"
    category: str = ""
    deps: tuple[str, ...] = ()
    pre: float = 0.0
    post: float = 0.0
    sms: float = 0.0
    engines: int = 0
    bw: float = INF
    links: int = 0
    hbm: float = 0.0
    phi: float = 1.0
    tiles: int = 0
    curve: tuple = ()

    @property
    def cat(self) -> str:
        """The reporting category ('comp' or 'comm')."""
        return self.category or ("comp" if self.kind == "compute" else "comm")


def _check(cols) -> None:
    """Reject out-of-range task fields (columns of the task table, one min/max per field)."""
    (names, _, works, kinds, cats, deps, pres, posts, smss, engs, bws, lfs, hbms, phis, tiless, _) = cols
    bad_kind = set(kinds) - {"compute", "comm"}
    if bad_kind:
        raise SimError(f"task kind must be 'compute' or 'comm', got {sorted(bad_kind)}")
    if set(cats) - {"", "comp", "comm"}:
        raise SimError(f"task category must be 'comp' or 'comm', got {sorted(set(cats) - {'', 'comp', 'comm'})}")
    if (min(works) < 0 or min(pres) < 0 or min(posts) < 0 or min(smss) < 0 or min(engs) < 0 or min(bws) <= 0
            or min(lfs) < 0 or min(hbms) < 0 or min(phis) < 0 or max(phis) > 1 or min(tiless) < 0):
        for t in zip(*cols):
            tk = Task(*t)
            if (tk.work < 0 or tk.pre < 0 or tk.post < 0 or tk.sms < 0 or tk.engines < 0 or tk.bw <= 0
                    or tk.links < 0 or tk.hbm < 0 or not 0 <= tk.phi <= 1 or tk.tiles < 0):
                raise SimError(f"task {tk.name}: negative or out-of-range field")
    for d in deps:
        if not isinstance(d, tuple):
            raise SimError("task deps must be a tuple of task names")


_USES = {(False, False, False): ("sms",), (False, False, True): ("sms",), (False, True, False): ("sms", "dma"),
         (False, True, True): ("sms", "dma"), (True, False, False): ("links",), (True, False, True): ("sms", "links"),
         (True, True, False): ("dma", "links"), (True, True, True): ("sms", "dma", "links")}


def alone_time(task: Task, res: Resources) -> float:
    """Seconds a task takes with the GPU to itself (latencies included)."""
    S = res.sms
    cap = float(min(task.sms if 0 < task.sms < S else S, task.tiles if task.tiles else S))
    nl = bin(task.links & ((1 << res.links) - 1)).count("1") if task.links else res.links
    return task.pre + task.post + _alone_work(task.kind == "comm", task.work, cap, S, task.phi, task.tiles,
                                              task.hbm, res.hbm_bw, nl * res.link_bw / res.links, task.bw, task.curve)


def _alone_work(is_comm: bool, work: float, cap: float, S: int, phi: float, tiles: int, hbm: float, H: float,
                link: float, bw: float, curve: tuple = ()) -> float:
    if work == 0:
        return 0.0
    if is_comm:
        r = bw if bw < link else link
    else:
        r = _compute_sm_rate(cap, S, phi, tiles, curve)
    if hbm > 0 and r * hbm > H:
        r = H / hbm
    return work / r


def _waves(tiles: int, sms: float) -> int:
    return -(-tiles // max(1, int(sms + 1e-9)))


def _compute_sm_rate(granted: float, total: int, phi: float, tiles: int, curve: tuple = ()) -> float:
    """Speed (fraction of full-GPU speed) of a compute task granted `granted` of `total` SMs."""
    if granted >= total:
        return 1.0
    if granted <= 0:
        return 0.0
    if curve:
        if tiles and granted >= tiles:  # it cannot use more SMs than it has tiles: not SM-limited
            return curve[0][1]
        for lv, r in curve:
            if granted >= lv - 1e-9:
                return r
        lv, r = curve[-1]
        return r * granted / lv
    if tiles and granted >= tiles:
        return 1.0
    ratio = _waves(tiles, granted) / _waves(tiles, total) if tiles else total / granted
    slow = phi * ratio
    return 1.0 if slow <= 1.0 else 1.0 / slow


def simulate(tasks: list[Task] | tuple[Task, ...], resources: Resources, streams: tuple[Stream, ...] | list[Stream] = (),
             params: ContentionParams | None = None, record: bool = False) -> Timeline:
    """Run tasks to completion; a task starts when its deps are done, it heads its stream, and engines are free."""
    if not tasks:
        return Timeline((), (), (), ())
    run = _run(tasks, resources, streams, params, record)
    return _timeline(run.cols, resources, run.order, run.prio_of, run.start, run.wstart, run.wend, run.end,
                     run.is_comm, run.work, run.cap, run.comm_link, run.segments)


def makespan(tasks: list[Task] | tuple[Task, ...], resources: Resources,
             streams: tuple[Stream, ...] | list[Stream] = (), params: ContentionParams | None = None) -> float:
    """simulate(...).makespan without building the timeline (the same run, the same end times)."""
    if not tasks:
        return 0.0
    return max(_run(tasks, resources, streams, params, False).end)


class _Run(NamedTuple):
    """What one run of the event loop leaves: the task table, stream order and every task's times."""

    cols: tuple
    order: list
    prio_of: dict
    start: list
    wstart: list
    wend: list
    end: list
    is_comm: list
    work: list
    cap: list
    comm_link: list
    segments: tuple


def _run(tasks, resources: Resources, streams, params: ContentionParams | None, record: bool) -> _Run:
    """The event loop of simulate over a non-empty task list: start times, work windows and end times."""
    return _EventLoop(tasks, resources, streams, params or ContentionParams(), record).run()


class _EventLoop:
    """One run of simulate's event loop: the task table, every task's state and times, and what is held."""

    __slots__ = ("resources", "record", "prio_of", "cols", "pre", "post", "names", "eng", "order", "dependents",
                 "deps_left", "n", "is_comm", "work", "rem", "tol", "cap", "comm_link", "rate_args", "sig",
                 "rate_memo", "start", "wstart", "wend", "end", "state", "free_eng", "active", "lat", "segments",
                 "t_now", "done", "qlist", "head", "sbusy", "stream_ix", "dirty", "can_start", "rate")

    def __init__(self, tasks, resources: Resources, streams, p: ContentionParams, record: bool) -> None:
        """Check and index the tasks; every task waits at t = 0."""
        self.resources = resources
        self.record = record
        self.prio_of = prio_of = {s.name: s.priority for s in streams}
        self.cols = cols = tuple(zip(*tasks))
        _check(cols)
        (names, stream_of, works, kinds, _, depss, self.pre, self.post, smss, eng, comm_bw, lfs, hbm, phi, tiles,
         curves) = cols
        self.names, self.eng = names, eng
        self.order, queues, self.dependents, self.deps_left = _task_graph(names, stream_of, depss, eng, resources)
        self.n = n = len(names)
        self.is_comm = is_comm = [kd == "comm" for kd in kinds]
        prio = [prio_of.get(st, 0) for st in stream_of]
        self.work = work = [float(w) for w in works]
        self.rem = list(work)
        self.tol = [1e-9 * w for w in work]
        cap, masks, per_link, comm_link = _task_limits(smss, tiles, lfs, resources)
        self.cap, self.comm_link = cap, comm_link
        self.rate_args = (is_comm, prio, smss, cap, hbm, phi, tiles, curves, comm_link, comm_bw, masks, per_link,
                          resources.sms, resources.hbm_bw, p.noprio_comm_sm_share, p.gemm_interference,
                          p.gemm_mem_interference, p.comm_interference)
        # tasks that the contention model cannot tell apart share a signature, so the rates of an active
        # set recur across the steps of a pipeline and are computed once
        sig_ids: dict[tuple, int] = {}
        self.sig = [sig_ids.setdefault(key, len(sig_ids)) for key in
                    zip(is_comm, prio, smss, cap, hbm, phi, tiles, curves, comm_link, comm_bw, masks)]
        self.rate_memo: dict[tuple, list[float]] = {}
        self.start = [0.0] * n
        self.wstart = [0.0] * n
        self.wend = [0.0] * n
        self.end = [0.0] * n
        self.state = [0] * n  # 0 waiting, 1 pre, 2 work, 3 post, 4 done
        self.free_eng = resources.dma_engines
        self.active: list[int] = []
        self.lat: list[tuple[float, int]] = []
        self.segments: list[Segment] = []
        self.t_now = 0.0
        self.done = 0
        self.qlist = [queues[s] for s in self.order]
        self.head = [0] * len(self.order)
        self.sbusy = [False] * len(self.order)
        sidx = {s: j for j, s in enumerate(self.order)}
        self.stream_ix = [sidx[x] for x in stream_of]
        self.dirty = True  # the active set changed: rates must be recomputed
        self.can_start = True  # something completed or freed engines: try to start tasks
        self.rate: list[float] = []

    def run(self) -> _Run:
        """Start, advance and end tasks until all are done; the run's task table and times."""
        n, active, lat, record = self.n, self.active, self.lat, self.record
        start_ready, update_rates, next_step, advance, end_latencies = (
            self.start_ready, self.update_rates, self.next_step, self.advance, self.end_latencies)
        while True:
            while self.can_start:  # start every task that can start now (zero-time tasks may unblock more)
                self.can_start = False
                start_ready()
            if self.done == n:
                break
            if not active and not lat:
                stuck = [self.names[i] for i in range(n) if self.state[i] == 0]
                raise SimError(f"tasks can never start (dependency cycle or stream order conflict): "
                               f"{', '.join(stuck[:5])}")
            if record or self.dirty:
                update_rates()
            advance(next_step())
            if lat:
                end_latencies()
        return _Run(self.cols, self.order, self.prio_of, self.start, self.wstart, self.wend, self.end, self.is_comm,
                    self.work, self.cap, self.comm_link, tuple(self.segments))

    def start_ready(self) -> None:
        """One pass over the streams: start each stream's head task whose deps are done and engines are free."""
        deps_left, eng, pre, work, state = self.deps_left, self.eng, self.pre, self.work, self.state
        sbusy, qlist, head = self.sbusy, self.qlist, self.head
        for j in range(len(qlist)):
            if sbusy[j]:
                continue
            q = qlist[j]
            h = head[j]
            if h >= len(q):
                continue
            i = q[h]
            if deps_left[i] or eng[i] > self.free_eng:
                continue
            sbusy[j] = True
            self.free_eng -= eng[i]
            t_now = self.t_now
            self.start[i] = t_now
            if pre[i] > 0:
                state[i] = 1
                heappush(self.lat, (t_now + pre[i], i))
                continue
            self.wstart[i] = t_now
            if work[i] > 0:
                state[i] = 2
                self.active.append(i)
                self.dirty = True
                continue
            self.work_done(i)

    def update_rates(self) -> None:
        """The rates of the running tasks: recomputed (and recorded) every step when recording, else memoized."""
        if self.record:
            self.rate = _rates(self.active, *self.rate_args, self.segments)
        elif self.dirty:
            key = tuple([self.sig[i] for i in self.active])
            rate = self.rate_memo.get(key)
            if rate is None:
                rate = self.rate_memo[key] = _rates(self.active, *self.rate_args, None)
            self.rate = rate
            self.dirty = False

    def next_step(self) -> float:
        """Seconds to the next event: a running task's work ends or a latency runs out."""
        t_now, rem, lat = self.t_now, self.rem, self.lat
        dt = INF
        for i, r in zip(self.active, self.rate):
            if r > 0.0:
                d = rem[i] / r
                if d < dt:
                    dt = d
        if lat:
            lat_next = lat[0][0]
            if lat_next - t_now < dt:
                dt = lat_next - t_now
        if dt == INF:
            raise SimError("simulation stalled: running tasks get no resources (check SM, engine and link settings)")
        if dt < 0:
            dt = 0.0
        return dt

    def advance(self, dt: float) -> None:
        """Move time by dt: every running task does rate x dt of work; those left with none end their work."""
        t_now = self.t_now
        t_new = t_now + dt
        segments = self.segments
        if self.record and segments and segments[-1].start == -1.0:
            s0 = segments.pop()
            segments.append(Segment(t_now, t_new, s0.sms, s0.hbm, self.resources.dma_engines - self.free_eng,
                                    s0.link))
        self.t_now = t_new
        rem, tol, active = self.rem, self.tol, self.active
        finished = None
        for i, r in zip(active, self.rate):
            x = rem[i] - r * dt
            if x <= tol[i]:
                rem[i] = 0.0
                if finished is None:
                    finished = [i]
                else:
                    finished.append(i)
            else:
                rem[i] = x
        if finished is not None:
            active[:] = [i for i in active if rem[i] > 0.0]
            self.dirty = True
            for i in finished:
                self.work_done(i)

    def end_latencies(self) -> None:
        """End the launch latencies (work begins) and completion syncs (task done) that run out now."""
        t_now, lat, state = self.t_now, self.lat, self.state
        eps = t_now + 1e-15 + 1e-12 * t_now
        while lat and lat[0][0] <= eps:
            i = heappop(lat)[1]
            if state[i] == 1:  # launch latency over
                self.wstart[i] = t_now
                if self.work[i] > 0:
                    state[i] = 2
                    self.active.append(i)
                    self.dirty = True
                else:
                    self.work_done(i)
            else:  # completion sync over
                self.finish(i)

    def work_done(self, i: int) -> None:
        """Task i's work ended: free its engines, then its completion sync (post) or done."""
        t_now = self.t_now
        self.wend[i] = t_now
        if self.eng[i]:
            self.free_eng += self.eng[i]
            self.can_start = True
        if self.post[i] > 0:
            self.state[i] = 3
            heappush(self.lat, (t_now + self.post[i], i))
        else:
            self.finish(i)

    def finish(self, i: int) -> None:
        """Task i is done: its stream moves on and its dependents lose one dependency."""
        self.state[i] = 4
        self.end[i] = self.t_now
        self.done += 1
        j = self.stream_ix[i]
        self.sbusy[j] = False
        self.head[j] += 1
        deps_left = self.deps_left
        for d in self.dependents[i]:
            deps_left[d] -= 1
        self.can_start = True


def _task_graph(names, stream_of, depss, eng, resources: Resources):
    """Check the tasks (unique names, known deps, DMA engines) and index them: (stream order, per-stream
    queues of task indices, dependents of each task, dependency count of each task)."""
    n = len(names)
    index = {nm: i for i, nm in enumerate(names)}
    if len(index) != n:
        dup = next(nm for nm in names if names.count(nm) > 1)
        raise SimError(f"two tasks are named {dup!r}")
    if max(eng) > resources.dma_engines:
        i = max(range(n), key=lambda j: eng[j])
        raise SimError(f"task {names[i]} needs {eng[i]} DMA engines; the GPU has {resources.dma_engines}")
    order: list[str] = []
    queues: dict[str, list[int]] = {}
    for i, st in enumerate(stream_of):
        q = queues.get(st)
        if q is None:
            queues[st] = q = []
            order.append(st)
        q.append(i)
    dependents: list[list[int]] = [[] for _ in range(n)]
    deps_left = [0] * n
    for i, ds in enumerate(depss):
        for d in ds:
            j = index.get(d)
            if j is None:
                raise SimError(f"task {names[i]} depends on unknown task {d!r}")
            dependents[j].append(i)
            deps_left[i] += 1
    return order, queues, dependents, deps_left


def _task_limits(smss, tiles, lfs, resources: Resources):
    """(SM cap per task, link mask per task, bandwidth per link, link bandwidth per task)."""
    S = resources.sms
    # a compute task never occupies more SMs than it has output tiles (one tile per SM at a time)
    cap = [float(c if 0 < c < S else S) for c in smss]
    cap = [c if not tl or c <= tl else float(tl) for c, tl in zip(cap, tiles)]
    all_links = (1 << resources.links) - 1
    masks = [(m & all_links) or all_links for m in lfs]
    per_link = resources.link_bw / resources.links
    comm_link = [bin(m).count("1") * per_link for m in masks]
    return cap, masks, per_link, comm_link


def _timeline(cols, resources: Resources, order, prio_of, start, wstart, wend, end, is_comm, work, cap, comm_link,
              segments) -> Timeline:
    """The Timeline of a finished run: one Interval per task (with its time alone), streams, segments."""
    (names, stream_of, _, kinds, cats, _, pre, post, smss, eng, comm_bw, _, hbm, phi, tiles, curves) = cols
    S, H = resources.sms, resources.hbm_bw
    n = len(names)
    alone = [pre[i] + post[i] + _alone_work(is_comm[i], work[i], cap[i], S, phi[i], tiles[i], hbm[i], H,
                                             comm_link[i], comm_bw[i], curves[i]) for i in range(n)]
    cat = [c or ("comm" if ic else "comp") for c, ic in zip(cats, is_comm)]
    uses = [_USES[(ic, e > 0, r > 0)] for ic, e, r in zip(is_comm, eng, smss)]
    intervals = tuple(map(Interval, names, stream_of, cat, kinds, start, wstart, wend, end, alone, uses))
    stream_prios = tuple((s, prio_of.get(s, 0)) for s in order)
    res = (("sms", float(S)), ("hbm", H), ("engines", float(resources.dma_engines)), ("link", resources.link_bw))
    return Timeline(intervals, stream_prios, segments, res)


def _rates(active, is_comm, prio, req, cap, hbm, phi, tiles, curves, comm_link, comm_bw, masks, per_link, S, H,
           share, a_g, a_gm, a_c, segments):
    """Rates of the running tasks (compute: fraction of full speed; comm: B/s) under the contention model."""
    if len(active) == 1 and segments is None:  # alone: no sharing to work out
        return [_alone_rate(active[0], is_comm, cap, hbm, phi, tiles, curves, comm_link, comm_bw, S, H)]
    granted, ncomp = _grant_sms(active, is_comm, prio, req, cap, S, share)
    rate = _speeds(active, is_comm, req, phi, tiles, curves, comm_link, comm_bw, masks, per_link, S, granted,
                   len(active) - ncomp)
    # 3. HBM: compute tasks are served first (by priority class, in proportion within a class); comm
    #    transfers share what is left the same way. Serving compute first keeps the model monotone: a
    #    faster link never takes bandwidth from a GEMM (stream priorities steer the SM scheduler, not
    #    HBM). What concurrent copies cost a GEMM is the interference term of step 4.
    pre = rate[:] if (a_g or a_gm or a_c) else rate
    _hbm_alloc(active, is_comm, prio, hbm, rate, H)
    if a_g or a_gm or a_c:
        _interfere(active, is_comm, hbm, phi, granted, pre, rate, S, H, a_g, a_gm, a_c)
        _hbm_alloc(active, is_comm, prio, hbm, rate, H)
    if segments is not None:
        segments.append(_use(active, is_comm, hbm, granted, rate))
    return rate


def _alone_rate(i, is_comm, cap, hbm, phi, tiles, curves, comm_link, comm_bw, S, H) -> float:
    """The rate of task i running alone: its own SM, link and HBM limits."""
    if is_comm[i]:
        r = comm_bw[i]
        if r > comm_link[i]:
            r = comm_link[i]
    else:
        r = 1.0 if cap[i] >= S else _compute_sm_rate(cap[i], S, phi[i], tiles[i], curves[i])
    if hbm[i] and r * hbm[i] > H:
        r = H / hbm[i]
    return r


def _grant_sms(active, is_comm, prio, req, cap, S, share) -> tuple[list[float], int]:
    """Step 1, SMs granted to each running task (and how many are compute tasks).

    Comm kernels take their k SMs (all of them only with a higher priority than every running compute
    task), compute tasks share the rest by priority class, in proportion to their caps. A comm kernel
    without that priority gets `share` of its k SMs, or more where the compute tasks cannot use them (SM
    partition, or fewer output tiles than SMs).
    """
    gp = None
    comp_cap = 0.0
    for i in active:
        if not is_comm[i]:
            comp_cap += cap[i]
            if gp is None or prio[i] > gp:
                gp = prio[i]
    sm_left = float(S)
    idle = S - comp_cap if comp_cap < S else 0.0
    granted = [0.0] * len(active)
    ncomp = 0
    for k, i in enumerate(active):
        if is_comm[i]:
            if req[i] > 0:
                if gp is None or prio[i] > gp:
                    g = req[i]
                else:
                    g = req[i] * share
                    if idle > g:
                        g = idle if idle < req[i] else req[i]
                    idle -= g
                if g > sm_left:
                    g = sm_left
                granted[k] = g
                sm_left -= g
        else:
            ncomp += 1
    if ncomp == 1:
        for k, i in enumerate(active):
            if not is_comm[i]:
                granted[k] = min(cap[i], sm_left)
    elif ncomp > 1:
        classes = sorted({prio[i] for i in active if not is_comm[i]}, reverse=True)
        for c in classes:
            tot = sum(cap[i] for i in active if not is_comm[i] and prio[i] == c)
            f = 1.0 if tot <= sm_left else sm_left / tot
            used = 0.0
            for k, i in enumerate(active):
                if not is_comm[i] and prio[i] == c:
                    granted[k] = cap[i] * f
                    used += granted[k]
            sm_left -= used
    return granted, ncomp


def _link_sharing(active, is_comm, masks, ncomm) -> tuple[dict[int, int] | None, int]:
    """How the running transfers share links: (transfers per link bit, or None when no per-link count is
    needed; how many transfers split every link when all use the same links, else 1)."""
    shared = None
    same = 1  # all transfers on the same links: each gets 1/ncomm of them
    if ncomm > 1:
        first = None
        acc = 0
        overlap = False
        identical = True
        for i in active:
            if is_comm[i]:
                m = masks[i]
                if first is None:
                    first = m
                elif m != first:
                    identical = False
                if acc & m:
                    overlap = True
                acc |= m
        if identical:
            same = ncomm
        elif overlap:
            count: dict[int, int] = {}
            for i in active:
                if is_comm[i]:
                    m = masks[i]
                    while m:
                        b = m & -m
                        count[b] = count.get(b, 0) + 1
                        m ^= b
            shared = count
    return shared, same


def _speeds(active, is_comm, req, phi, tiles, curves, comm_link, comm_bw, masks, per_link, S, granted,
            ncomm) -> list[float]:
    """Step 2, speeds before HBM: compute from its granted SMs (wave quantization), comm from its SMs/engines
    and its links, each link split equally among the transfers that use it."""
    rate = [0.0] * len(active)
    shared, same = _link_sharing(active, is_comm, masks, ncomm)
    for k, i in enumerate(active):
        if is_comm[i]:
            w = comm_bw[i]
            if req[i] > 0:
                w *= granted[k] / req[i]
            if shared is None:
                lk = comm_link[i] / same
            else:
                lk = 0.0
                m = masks[i]
                while m:
                    b = m & -m
                    lk += per_link / shared[b]
                    m ^= b
            rate[k] = w if w < lk else lk
        else:
            rate[k] = _compute_sm_rate(granted[k], S, phi[i], tiles[i], curves[i])
    return rate


def _interfere(active, is_comm, hbm, phi, granted, pre, rate, S, H, a_g, a_gm, a_c) -> None:
    """Step 4, interference beyond bandwidth shares, in place: a GEMM slows with the HBM traffic of the copies
    (u_comm, its memory-bound share much more than its compute-bound share); a transfer slows with the share
    of SMs running compute (L2 and memory-pipeline pressure). The caller then shares HBM again, so what a
    slowed GEMM no longer draws goes to the copies."""
    u_comm = 0.0
    busy = 0.0
    for k, i in enumerate(active):
        if is_comm[i]:
            u_comm += rate[k] * hbm[i]
        else:
            busy += granted[k]
    u_comm /= H
    busy /= S
    for k, i in enumerate(active):
        if is_comm[i]:
            rate[k] = pre[k] / (1.0 + a_c * busy)
        elif u_comm:
            rate[k] /= 1.0 + (a_g * phi[i] + a_gm * (1.0 - phi[i])) * u_comm


def _use(active, is_comm, hbm, granted, rate) -> Segment:
    """The resources the running tasks use at these rates (a segment whose times and engines the loop fills)."""
    sms_used = sum(granted)
    link_used = sum(rate[k] for k, i in enumerate(active) if is_comm[i])
    hbm_used = sum(rate[k] * hbm[i] for k, i in enumerate(active))
    return Segment(-1.0, -1.0, sms_used, hbm_used, 0, link_used)


def compute_rates(tasks: tuple[Task, ...], sms: int, hbm_bw: float, prios: tuple[int, ...] = ()) -> list[float]:
    """Speeds (fraction of full-GPU speed) of compute tasks running together, as simulate shares SMs and HBM among
    them. The heuristic selector prices a pair of kernels on two streams with this, so that it and the simulator
    agree (two GEMMs that fill the GPU run about one after the other, as device call 29 measured)."""
    if not tasks or any(x.kind != "compute" for x in tasks):
        raise SimError("compute_rates takes one or more compute tasks")
    n = len(tasks)
    cap = [float(x.sms if 0 < x.sms < sms else sms) for x in tasks]
    cap = [c if not x.tiles or c <= x.tiles else float(x.tiles) for c, x in zip(cap, tasks)]
    zeros = [0] * n
    return _rates(list(range(n)), [False] * n, list(prios or zeros), [x.sms for x in tasks], cap,
                  [x.hbm for x in tasks], [x.phi for x in tasks], [x.tiles for x in tasks], [x.curve for x in tasks],
                  zeros, [INF] * n, zeros, 1.0, sms, hbm_bw, 1.0, 0.0, 0.0, 0.0, None)


def _hbm_alloc(active, is_comm, prio, hbm, rate, H) -> None:
    """Scale rates so HBM demand fits: compute classes first, then comm, by priority, proportional within."""
    tot = 0.0
    for k, i in enumerate(active):
        tot += rate[k] * hbm[i]
    if tot <= H:
        return
    left = H
    for c in sorted({(not is_comm[i], prio[i]) for i in active}, reverse=True):
        ctot = 0.0
        for k, i in enumerate(active):
            if (not is_comm[i], prio[i]) == c:
                ctot += rate[k] * hbm[i]
        f = 1.0 if ctot <= left else (left / ctot if ctot > 0 else 1.0)
        if f < 1.0:
            for k, i in enumerate(active):
                if (not is_comm[i], prio[i]) == c:
                    rate[k] *= f
        left = max(0.0, left - ctot * f)
