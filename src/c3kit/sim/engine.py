"""An event-driven fluid simulator of one GPU: tasks on prioritized streams share SMs, HBM bandwidth,
DMA engines and scale-up links through the contention model documented in docs/sim.md.

All GPUs of a collective are assumed symmetric, so one GPU's timeline stands for all of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    links: int = 1  # scale-up links (a mesh has one per peer)

    def __post_init__(self) -> None:
        if self.sms < 1 or self.hbm_bw <= 0 or self.link_bw <= 0 or self.dma_engines < 0 or self.links < 1:
            raise SimError("resources need >= 1 SM, positive HBM and link bandwidth, >= 0 DMA engines, >= 1 link")

    @classmethod
    def from_gpu(cls, gpu: GPU, params: ContentionParams | None = None) -> "Resources":
        """The resources of a catalog GPU under a contention model."""
        p = params or ContentionParams()
        return cls(sms=gpu.sms, hbm_bw=gpu.hbm_bw * p.hbm_efficiency, dma_engines=gpu.dma.engines,
                   link_bw=gpu.scaleup.bw, links=gpu.scaleup.links_per_gpu)


@dataclass(frozen=True)
class Stream:
    """An in-order queue of tasks; a larger priority wins SMs and HBM bandwidth first."""

    name: str
    priority: int = 0


@dataclass(frozen=True)
class Task:
    """One op on one stream.

    kind "compute": work = s it takes alone on the whole GPU; sms = most SMs it may use (0: all);
    hbm = B/s of HBM it draws at full speed; phi = share of its time that scales with SMs (1 for
    compute-bound, ~0 for memory-bound); tiles = output tiles (wave quantization; 0: linear in SMs).
    kind "comm": work = bytes this GPU sends; sms = SMs it occupies (0: a DMA transfer, or free);
    engines = DMA engines it holds; bw = B/s its own SMs/engines can drive; link_frac = share of the
    GPU's scale-up bandwidth it can reach (links used / links); hbm = HBM bytes per byte sent.
    pre / post: latency before the work (launch) and after it (completion sync), using no resources.
    category: "comp" or "comm" for reporting (a reduction kernel is compute-kind, comm-category).
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
    link_frac: float = 1.0
    hbm: float = 0.0
    phi: float = 1.0
    tiles: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("compute", "comm"):
            raise SimError(f"task {self.name}: kind must be 'compute' or 'comm', got {self.kind!r}")
        if not self.category:
            object.__setattr__(self, "category", "comp" if self.kind == "compute" else "comm")
        if (self.work < 0 or self.pre < 0 or self.post < 0 or self.sms < 0 or self.engines < 0 or self.bw <= 0
                or not 0 < self.link_frac <= 1 or self.hbm < 0 or not 0 <= self.phi <= 1 or self.tiles < 0):
            raise SimError(f"task {self.name}: negative or out-of-range field")
        if not isinstance(self.deps, tuple):
            object.__setattr__(self, "deps", tuple(self.deps))


def alone_time(task: Task, res: Resources) -> float:
    """Seconds a task takes with the GPU to itself (latencies included)."""
    return task.pre + task.post + _work_time_alone(task, res)


def _work_time_alone(task: Task, res: Resources) -> float:
    if task.work == 0:
        return 0.0
    if task.kind == "compute":
        r = _compute_sm_rate(task.sms or res.sms, res.sms, task.phi, task.tiles)
        if task.hbm > 0:
            r = min(r, res.hbm_bw / task.hbm)
        return task.work / r
    rate = min(task.link_frac * res.link_bw, task.bw)
    if task.hbm > 0:
        rate = min(rate, res.hbm_bw / task.hbm)
    return task.work / rate


def _waves(tiles: int, sms: float) -> int:
    return -(-tiles // max(1, int(sms + 1e-9)))


def _compute_sm_rate(granted: float, total: int, phi: float, tiles: int) -> float:
    """Speed (fraction of full-GPU speed) of a compute task granted `granted` of `total` SMs."""
    if granted >= total:
        return 1.0
    if granted <= 0:
        return 0.0
    ratio = _waves(tiles, granted) / _waves(tiles, total) if tiles else total / granted
    slow = phi * ratio
    return 1.0 if slow <= 1.0 else 1.0 / slow


def simulate(tasks: list[Task] | tuple[Task, ...], resources: Resources, streams: tuple[Stream, ...] | list[Stream] = (),
             params: ContentionParams | None = None, record: bool = False) -> Timeline:
    """Run tasks to completion; a task starts when its deps are done, it heads its stream, and engines are free."""
    p = params or ContentionParams()
    n = len(tasks)
    S = resources.sms
    H = resources.hbm_bw
    L = resources.link_bw
    share = p.noprio_comm_sm_share
    a_g = p.gemm_interference
    a_c = p.comm_interference
    prio_of = {s.name: s.priority for s in streams}
    index: dict[str, int] = {}
    for i, t in enumerate(tasks):
        if t.name in index:
            raise SimError(f"two tasks are named {t.name!r}")
        index[t.name] = i
        if t.engines > resources.dma_engines:
            raise SimError(f"task {t.name} needs {t.engines} DMA engines; the GPU has {resources.dma_engines}")
    order: list[str] = []
    queues: dict[str, list[int]] = {}
    for i, t in enumerate(tasks):
        if t.stream not in queues:
            queues[t.stream] = []
            order.append(t.stream)
        queues[t.stream].append(i)
    dependents: list[list[int]] = [[] for _ in range(n)]
    deps_left = [0] * n
    for i, t in enumerate(tasks):
        for d in t.deps:
            j = index.get(d)
            if j is None:
                raise SimError(f"task {t.name} depends on unknown task {d!r}")
            dependents[j].append(i)
            deps_left[i] += 1

    is_comm = [t.kind == "comm" for t in tasks]
    prio = [prio_of.get(t.stream, 0) for t in tasks]
    work = [float(t.work) for t in tasks]
    rem = list(work)
    req = [float(t.sms) for t in tasks]
    # a compute task never occupies more SMs than it has output tiles (one tile per SM at a time)
    cap = [float(min(t.sms if 0 < t.sms < S else S, t.tiles if t.tiles else S)) for t in tasks]
    eng = [t.engines for t in tasks]
    hbm = [t.hbm for t in tasks]
    phi = [t.phi for t in tasks]
    tiles = [t.tiles for t in tasks]
    comm_link = [t.link_frac * L for t in tasks]
    comm_bw = [t.bw for t in tasks]
    start = [0.0] * n
    wstart = [0.0] * n
    wend = [0.0] * n
    end = [0.0] * n
    state = [0] * n  # 0 waiting, 1 pre, 2 work, 3 post, 4 done
    heads = {s: 0 for s in order}
    busy = {s: False for s in order}
    free_eng = resources.dma_engines
    active: list[int] = []
    lat: list[tuple[float, int]] = []
    segments: list[Segment] = []
    t_now = 0.0
    done = 0

    def complete(i: int) -> None:
        nonlocal done
        state[i] = 4
        end[i] = t_now
        done += 1
        s = tasks[i].stream
        busy[s] = False
        heads[s] += 1
        for d in dependents[i]:
            deps_left[d] -= 1

    def enter_work(i: int) -> None:
        state[i] = 2
        wstart[i] = t_now
        active.append(i)

    while True:
        # start every task that can start now (loop: zero-latency completions may free more)
        progressed = True
        while progressed:
            progressed = False
            for s in order:
                if busy[s]:
                    continue
                q = queues[s]
                h = heads[s]
                if h >= len(q):
                    continue
                i = q[h]
                if deps_left[i] or eng[i] > free_eng:
                    continue
                busy[s] = True
                free_eng -= eng[i]
                start[i] = t_now
                progressed = True
                if tasks[i].pre > 0:
                    state[i] = 1
                    lat.append((t_now + tasks[i].pre, i))
                elif work[i] > 0:
                    enter_work(i)
                else:
                    wstart[i] = wend[i] = t_now
                    free_eng += eng[i]
                    if tasks[i].post > 0:
                        state[i] = 3
                        lat.append((t_now + tasks[i].post, i))
                    else:
                        complete(i)
        if done == n:
            break
        if not active and not lat:
            stuck = [tasks[i].name for i in range(n) if state[i] == 0]
            raise SimError(f"tasks can never start (dependency cycle or stream order conflict): {', '.join(stuck[:5])}")

        rate = _rates(active, is_comm, prio, req, cap, hbm, phi, tiles, comm_link, comm_bw, S, H, L, share, a_g, a_c,
                      segments if record else None)
        dt = INF
        for k, i in enumerate(active):
            r = rate[k]
            if r > 0:
                d = rem[i] / r
                if d < dt:
                    dt = d
        for te, _ in lat:
            if te - t_now < dt:
                dt = te - t_now
        if dt == INF:
            raise SimError("simulation stalled: running tasks get no resources (check SM, engine and link settings)")
        if dt < 0:
            dt = 0.0
        t_new = t_now + dt
        if record and segments and segments[-1].start == -1.0:
            s0 = segments.pop()
            segments.append(Segment(t_now, t_new, s0.sms, s0.hbm, resources.dma_engines - free_eng, s0.link))
        t_now = t_new
        still: list[int] = []
        for k, i in enumerate(active):
            rem[i] -= rate[k] * dt
            if rem[i] <= 1e-9 * work[i]:
                rem[i] = 0.0
                wend[i] = t_now
                free_eng += eng[i]
                if tasks[i].post > 0:
                    state[i] = 3
                    lat.append((t_now + tasks[i].post, i))
                else:
                    complete(i)
            else:
                still.append(i)
        active[:] = still
        if lat:
            eps = 1e-15 + 1e-12 * t_now
            keep: list[tuple[float, int]] = []
            for te, i in lat:
                if te <= t_now + eps:
                    if state[i] == 1:
                        if work[i] > 0:
                            enter_work(i)
                        else:
                            wstart[i] = wend[i] = t_now
                            free_eng += eng[i]
                            if tasks[i].post > 0:
                                state[i] = 3
                                keep.append((t_now + tasks[i].post, i))
                            else:
                                complete(i)
                    else:
                        complete(i)
                else:
                    keep.append((te, i))
            lat[:] = keep

    intervals = tuple(Interval(t.name, t.stream, t.category, t.kind, start[i], wstart[i], wend[i], end[i],
                               alone_time(t, resources)) for i, t in enumerate(tasks))
    stream_prios = tuple((s, prio_of.get(s, 0)) for s in order)
    res = (("sms", float(S)), ("hbm", H), ("engines", float(resources.dma_engines)), ("link", L))
    return Timeline(intervals, stream_prios, tuple(segments), res)


def _rates(active, is_comm, prio, req, cap, hbm, phi, tiles, comm_link, comm_bw, S, H, L, share, a_g, a_c, segments):
    """Rates of the running tasks (compute: fraction of full speed; comm: B/s) under the contention model."""
    na = len(active)
    rate = [0.0] * na
    # 1. SMs: comm kernels take their k SMs (all of them only with a higher priority than every running
    #    compute task), compute tasks share the rest by priority class, in proportion to their caps.
    #    A comm kernel without that priority gets `share` of its k SMs, or more where the compute tasks
    #    cannot use them (SM partition, or fewer output tiles than SMs).
    gp = None
    comp_cap = 0.0
    for i in active:
        if not is_comm[i]:
            comp_cap += cap[i]
            if gp is None or prio[i] > gp:
                gp = prio[i]
    sm_left = float(S)
    idle = S - comp_cap if comp_cap < S else 0.0
    granted = [0.0] * na
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
    # 2. speeds before HBM: compute from SMs (wave quantization), comm from its SMs/engines and links
    link_tot = 0.0
    for k, i in enumerate(active):
        if is_comm[i]:
            w = comm_bw[i]
            if req[i] > 0:
                w *= granted[k] / req[i]
            if w > comm_link[i]:
                w = comm_link[i]
            rate[k] = w
            link_tot += w
        else:
            rate[k] = _compute_sm_rate(granted[k], S, phi[i], tiles[i])
    if link_tot > L:
        f = L / link_tot
        for k, i in enumerate(active):
            if is_comm[i]:
                rate[k] *= f
    # 3. HBM: demands met by priority class; an oversubscribed class is scaled down proportionally
    dem = [rate[k] * hbm[i] for k, i in enumerate(active)]
    tot = sum(dem)
    if tot > H:
        left = H
        for c in sorted({prio[i] for i in active}, reverse=True):
            ctot = sum(dem[k] for k, i in enumerate(active) if prio[i] == c)
            f = 1.0 if ctot <= left else (left / ctot if ctot > 0 else 1.0)
            for k, i in enumerate(active):
                if prio[i] == c:
                    rate[k] *= f
                    dem[k] *= f
            left = max(0.0, left - ctot * f)
    # 4. interference beyond bandwidth shares (caches, memory-controller queues)
    if a_g or a_c:
        u_comm = sum(dem[k] for k, i in enumerate(active) if is_comm[i]) / H
        u_comp = sum(dem[k] for k, i in enumerate(active) if not is_comm[i]) / H
        for k, i in enumerate(active):
            if is_comm[i]:
                if u_comp:
                    rate[k] /= 1.0 + a_c * u_comp
            elif u_comm:
                rate[k] /= 1.0 + a_g * u_comm
    if segments is not None:
        sms_used = sum(granted)
        link_used = sum(rate[k] for k, i in enumerate(active) if is_comm[i])
        hbm_used = sum(rate[k] * hbm[i] for k, i in enumerate(active))
        segments.append(Segment(-1.0, -1.0, sms_used, hbm_used, 0, link_used))
    return rate
