"""One layer's forward and backward on a timeline, exported as a Perfetto / Chrome trace.

The layer's nodes are laid out in graph order with the step projection's own times and overlap
decisions: compute ops one after the other on the compute track; every collective on its group's
track (tp, ep, dp, pp) from the moment its inputs are ready, for its whole duration; a compute op that
needs a collective waits only for the collective's *exposed* time under the overlap policy (what the
projection charged to the critical path), so hidden communication shows as overlap. Collectives whose
schedule moves data with copy engines also appear on the DMA-engines track. The export is the
simulator's (c3kit.sim.timeline.Timeline.to_perfetto): one thread per track plus a "resources" process.
"""

from __future__ import annotations

from pathlib import Path

from c3kit.errors import C3kitError
from c3kit.sim.timeline import Interval, Timeline
from c3kit.step.plan import evaluate, make_plan
from c3kit.step.project import node_times, step_timer

TRACKS = ("compute", "tp", "ep", "dp", "pp", "cp")


def layer_timeline(graph, hw, *, policy=None, cost_model=None, timer=None) -> Timeline:
    """The timeline of one layer instance (one micro-batch): forward, then backward."""
    from c3kit.overlap.schedules import SCHEDULES
    from c3kit.step.policy import DEFAULT_POLICY

    policy = policy or DEFAULT_POLICY
    plan = make_plan(graph)
    t = node_times(graph, hw, timer or step_timer(cost_model))
    if hasattr(policy, "bind"):
        policy = policy.bind(graph, hw)
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


def write_trace(path, graph, hw, *, policy=None, cost_model=None) -> Path:
    """Write the layer's Perfetto / Chrome trace JSON to path (a C3kitError when it cannot be written)."""
    tl = layer_timeline(graph, hw, policy=policy, cost_model=cost_model)
    name = getattr(policy, "name", "simple")
    p = Path(path)
    try:
        p.write_text(tl.perfetto_json(f"c3kit {graph.model.name} {graph.phase} layer on {hw.name} "
                                      f"(overlap {name})"))
    except OSError as e:
        raise C3kitError(f"cannot write trace {p}: {e.strerror}") from None
    return p
