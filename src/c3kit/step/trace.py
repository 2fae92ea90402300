"""One layer's forward and backward on a timeline, exported as a Perfetto / Chrome trace.

The layer's nodes are laid out in graph order with the step projection's own times and overlap
decisions: compute ops one after the other on the compute track; every collective on its group's
track (tp, ep, dp, pp) from the moment its inputs are ready, for its whole duration; a compute op that
needs a collective waits only for the collective's *exposed* time under the overlap policy (what the
projection charged to the critical path), so hidden communication shows as overlap. Collectives whose
schedule moves data with copy engines also appear on the DMA-engines track. The export is the
simulator's (c3kit.sim.timeline.Timeline.to_perfetto): one thread per track plus a "resources" process.

`step_trace` lays out a whole training step the same way: one process per pipeline stage with tracks
for compute, each communication group (tp, ep, dp, pp, cp) and the DMA engines; every micro-batch's
forward and backward through the stage's layers (each layer instance as `layer_timeline` lays it out),
the micro-batch ops (embedding, head, loss), the activations sent between stages on the pp tracks, in
the non-interleaved 1F1B order (stage s runs pp - 1 - s warm-up forwards), then the once-per-step
gradient collectives and the optimizer. `write_trace` writes it (what `c3kit analyze --trace` gives).
"""

from __future__ import annotations

from pathlib import Path

from c3kit.errors import C3kitError
from c3kit.sim.timeline import Interval, Timeline
from c3kit.step.plan import evaluate, make_plan
from c3kit.step.project import node_times, step_timer
from c3kit.step.tpcomm import bind_policy

TRACKS = ("compute", "tp", "ep", "dp", "pp", "cp")


def layer_timeline(graph, hw, *, policy=None, cost_model=None, timer=None) -> Timeline:
    """The timeline of one layer instance (one micro-batch): forward, then backward."""
    from c3kit.overlap.schedules import SCHEDULES
    from c3kit.step.policy import DEFAULT_POLICY

    policy = policy or DEFAULT_POLICY
    plan = make_plan(graph)
    t = node_times(graph, hw, timer or step_timer(cost_model))
    policy = bind_policy(policy, graph, hw, getattr(cost_model, "power", None))
    tl = evaluate(plan, t, policy)
    nodes = list(graph.nodes)
    index = {nd.id: i for i, nd in enumerate(nodes)}
    intervals: list[Interval] = []
    end: dict[int, float] = {}
    exposed: dict[int, float] = {}
    free = 0.0  # the compute track
    for ph in ("fwd", "bwd"):
        for i, nd in enumerate(nodes):
            if nd.scope != "layer" or nd.phase != ph:
                continue
            dur = float(t[i])
            if plan.is_comm[i]:
                sched = policy.schedule_of(i) if hasattr(policy, "schedule_of") else getattr(policy, "name", "")
                spec = SCHEDULES.get(sched)
                uses = ("links", "dma") if spec is not None and spec.engine == "dma" else ("links", "sms")
                start = max((end[index[d]] for d in nd.deps if d in index and index[d] in end), default=0.0)
                intervals.append(Interval(f"{nd.op.name} [{sched}]", nd.stream, "comm", "comm", start, start,
                                          start + dur, start + dur, dur, uses))
                runs = plan.multiplicity[i]
                exposed[i] = float(tl.exposed[i, 0]) / runs if runs else 0.0
                end[i] = start + dur
                continue
            # the critical path as the projection has it: compute back to back, plus the exposed part of
            # each collective it needs (charged once, to its first consumer)
            for d in nd.deps:
                j = index.get(d)
                if j is not None and j in exposed:
                    free += exposed.pop(j)
            intervals.append(Interval(nd.op.name, "compute", "comp", "compute", free, free, free + dur,
                                      free + dur, dur, ("sms",)))
            end[i] = free = free + dur
        free += sum(exposed.values())  # the next layer instance's first op waits for what is left
        exposed.clear()
    used = [s for s in TRACKS if any(iv.stream == s for iv in intervals)]
    return Timeline(tuple(intervals), tuple((s, 0) for s in used))


MAX_EVENTS = 400_000  # a trace Perfetto still opens quickly; larger steps are refused with advice


def _lay_out(nodes, sel, t, plan, policy, exposed_of, free: float, label: str = ""):
    """Intervals of the nodes `sel` (graph order) from `free` on, as layer_timeline places them: compute back
    to back, a collective on its group's track from its inputs on, and a compute op delayed by the exposed
    part of each collective it needs. Returns (intervals, end of the critical path)."""
    from c3kit.overlap.schedules import SCHEDULES

    index = {nd.id: i for i, nd in enumerate(nodes)}
    out: list[Interval] = []
    end: dict[int, float] = {}
    pending: dict[int, float] = {}
    for i in sel:
        nd = nodes[i]
        dur = float(t[i])
        name = f"{label}{nd.op.name}"
        if plan.is_comm[i]:
            sched = policy.schedule_of(i) if hasattr(policy, "schedule_of") else getattr(policy, "name", "")
            spec = SCHEDULES.get(sched)
            uses = ("links", "dma") if spec is not None and spec.engine == "dma" else ("links", "sms")
            start = max((end[index[d]] for d in nd.deps if d in index and index[d] in end), default=free)
            out.append(Interval(f"{name} [{sched}]", nd.stream, "comm", "comm", start, start, start + dur, start + dur,
                                dur, uses))
            pending[i] = exposed_of(i)
            end[i] = start + dur
            continue
        for d in nd.deps:
            j = index.get(d)
            if j is not None and j in pending:
                free += pending.pop(j)
        out.append(Interval(name, "compute", "comp", "compute", free, free, free + dur, free + dur, dur, ("sms",)))
        end[i] = free = free + dur
    return out, free + sum(pending.values())


def step_trace(graph, hw, *, policy=None, cost_model=None, timer=None) -> dict:
    """Chrome / Perfetto trace-event JSON of a whole step: one process per pipeline stage (see the module doc)."""
    from c3kit.step.policy import DEFAULT_POLICY

    policy = policy or DEFAULT_POLICY
    plan = make_plan(graph)
    t = node_times(graph, hw, timer or step_timer(cost_model))
    policy = bind_policy(policy, graph, hw, getattr(cost_model, "power", None))
    tl = evaluate(plan, t, policy)
    nodes = list(graph.nodes)
    m, pp, L = int(graph.micro_batches), int(graph.par.pp), int(graph.layers_per_stage)
    if int(getattr(graph.par, "vpp", 1)) > 1:
        raise C3kitError("the whole-step trace lays out non-interleaved 1F1B only; use --vpp 1 (or a layer trace)")

    def exposed_of(i: int) -> float:
        runs = plan.multiplicity[i]
        return float(tl.exposed[i, 0]) / runs if runs else 0.0

    def pick(scope: str, ph: str, last: bool) -> list[int]:
        # a layer node that runs once per step (count 1 < micro-batches: the gradient reduction) runs with the
        # last micro-batch only; pipeline sends are drawn between the stages instead
        return [i for i, nd in enumerate(nodes) if nd.scope == scope and nd.phase == ph and nd.stream != "pp"
                and (scope != "layer" or nd.count >= m or last)]

    per_layer = sum(1 for nd in nodes if nd.scope == "layer")
    if pp * m * 2 * (L * per_layer + len(nodes)) > MAX_EVENTS:
        raise C3kitError(f"a whole-step trace of {pp} stages x {m} micro-batches x {L} layers is too large for a "
                         "trace viewer; trace fewer micro-batches (--batch) or layers")
    send = {ph: sum(float(t[i]) for i, nd in enumerate(nodes) if nd.stream == "pp" and nd.phase == ph)
            for ph in ("fwd", "bwd")}

    def block(ph: str, mb: int, start: float) -> tuple[list[Interval], float]:
        out: list[Interval] = []
        free = start
        layers = range(L) if ph == "fwd" else range(L - 1, -1, -1)
        for lay in layers:
            # once-per-step layer nodes: a gradient reduction in the last micro-batch, a parameter gather in the first
            ivs, free = _lay_out(nodes, pick("layer", ph, mb == (m - 1 if ph == "bwd" else 0)), t, plan, policy,
                                 exposed_of, free, f"mb{mb} {ph} L{lay} ")
            out += ivs
        ivs, free = _lay_out(nodes, pick("micro", ph, True), t, plan, policy, exposed_of, free, f"mb{mb} {ph} ")
        return out + ivs, free

    # 1F1B: stage s runs min(pp - 1 - s, m) warm-up forwards, then one forward and one backward in turn
    orders = []
    for s in range(pp):
        w = min(pp - 1 - s, m)
        seq = [("fwd", i) for i in range(w)]
        for i in range(m - w):
            seq += [("fwd", w + i), ("bwd", i)]
        seq += [("bwd", i) for i in range(m - w, m)]
        orders.append(seq)
    done: dict[tuple, float] = {}
    stage_free = [0.0] * pp
    pos = [0] * pp
    events: list[list[Interval]] = [[] for _ in range(pp)]
    while any(pos[s] < len(orders[s]) for s in range(pp)):
        progressed = False
        for s in range(pp):
            if pos[s] >= len(orders[s]):
                continue
            ph, i = orders[s][pos[s]]
            src = (s - 1, "fwd", i) if ph == "fwd" else (s + 1, "bwd", i)
            need = 0.0
            if (ph == "fwd" and s > 0) or (ph == "bwd" and s < pp - 1):
                if src not in done:
                    continue
                need = done[src] + send[ph]
            start = max(stage_free[s], need)
            if need > 0:  # the activation (gradient) arriving from the neighbour stage, on its pp track
                n0 = s - 1 if ph == "fwd" else s + 1
                events[n0].append(Interval(f"mb{i} send {ph} -> stage {s}", "pp", "comm", "comm", done[src], done[src],
                                           need, need, send[ph], ("links",)))
            ivs, end_t = block(ph, i, start)
            events[s] += ivs
            done[(s, ph, i)] = stage_free[s] = end_t
            pos[s] += 1
            progressed = True
        if not progressed:  # cannot happen for 1F1B; guards against an endless loop
            raise C3kitError("pipeline schedule deadlocked while laying out the trace")
    for s in range(pp):
        ivs, stage_free[s] = _lay_out(nodes, pick("step", "bwd", True) + pick("step", "opt", True), t, plan, policy,
                                      exposed_of, stage_free[s])
        events[s] += ivs
    return _chrome(events, f"c3kit {graph.model.name} step on {hw.name} (overlap {getattr(policy, 'name', 'simple')})")


STEP_TRACKS = ("compute", "tp", "ep", "dp", "pp", "cp", "DMA engines")


def _chrome(per_stage: list[list[Interval]], title: str) -> dict:
    """Trace-event JSON: one process per stage, one thread per track (only tracks with events), complete events."""
    ev: list[dict] = []
    for s, ivs in enumerate(per_stage):
        pid = s + 1
        ev.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_name", "args": {"name": f"stage {s}"}})
        ev.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}})
        rows = [(iv.stream, iv) for iv in ivs] + [("DMA engines", iv) for iv in ivs if "dma" in iv.uses]
        used = [k for k in STEP_TRACKS if any(track == k for track, _ in rows)]
        tid = {k: n + 1 for n, k in enumerate(used)}
        for k in used:
            ev.append({"ph": "M", "pid": pid, "tid": tid[k], "name": "thread_name", "args": {"name": k}})
            ev.append({"ph": "M", "pid": pid, "tid": tid[k], "name": "thread_sort_index", "args": {"sort_index": tid[k]}})
        for track, iv in sorted(rows, key=lambda r: r[1].start):
            ev.append({"ph": "X", "pid": pid, "tid": tid[track], "name": iv.name, "cat": iv.category,
                       "ts": iv.start * 1e6, "dur": max(0.0, iv.end - iv.start) * 1e6})
    return {"traceEvents": ev, "displayTimeUnit": "ns", "otherData": {"title": title}}


def write_trace(path, graph, hw, *, policy=None, cost_model=None) -> Path:
    """Write the whole step's Perfetto / Chrome trace JSON to path (a C3kitError when it cannot be written)."""
    import json

    doc = step_trace(graph, hw, policy=policy, cost_model=cost_model)
    p = Path(path)
    try:
        p.write_text(json.dumps(doc))
    except OSError as e:
        raise C3kitError(f"cannot write trace {p}: {e.strerror}") from None
    return p
