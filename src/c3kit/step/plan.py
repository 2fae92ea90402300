"""The overlap plan of a step graph: which pairs may overlap, computed once from the graph's topology.

A plan depends only on the graph's structure (node ids, streams, scopes, dependencies), never on
times, so one plan serves every scenario with the same structure: `evaluate` takes a matrix of node
times (nodes x scenarios) and returns the step's timeline, vectorized over scenarios.

The timeline model ("ops overlap where dependencies allow", two kinds of streams):
- One layer's timeline is computed once per phase (fwd, bwd) and repeated layers_per_stage times.
- Blocking comm (streams tp, ep, pp inside a layer): a collective that a later compute op of the
  layer needs. It is paired with the compute ops of the layer that neither feed it nor need it
  (e.g. the weight-gradient GEMM next to the input-gradient all-reduce): an *independent* pair.
  Without such ops it is paired with its producer as a *dependent* pair (exposed by default).
- DP-stream comm of a layer (gradient all-reduce / reduce-scatter, FSDP all-gathers) overlaps the
  critical path of the neighbouring layers: layer l's gradient collective hides behind the backward
  of layers < l, an FSDP all-gather of layer l+1 is prefetched behind layer l. Over L layers:
  span = pre + C + (L - 1) * pair(C, D) + post, with D = pre + post per layer.
- A layer's gradient collective that runs once per step (layer node with count 1 < micro-batches)
  overlaps the last micro-batch's backward the same way; a layer's forward collective that runs once
  per step (FSDP parameters gathered once and kept unsharded, Parallelism.fsdp_sync "step") is
  prefetched behind the first micro-batch's forward: that forward's span becomes
  pre + D1 + C + (L - 1) * pair(C, D + D1) + post (D1: the once-per-step gathers of one layer).
- Expert-parallel all-to-alls with Parallelism.moe_a2a_overlap (Megatron-Core overlap_moe_expert_parallel_comm:
  the forward of one micro-batch and the backward of another run merged, layer by layer): a layer's
  EP-stream collectives of one phase are paired with the other phase's layer compute that no other
  collective of that phase hides behind (independent pairs). The pipeline's warm-up and cool-down chunks,
  which have no partner pass, are priced the same way (a small optimism: 2 (pp - 1) + (vpp - 1) pp of
  m vpp chunks).
- Parallelism.dp_overlap False (Megatron-LM of 2021-22, DeepSpeed's pipeline engine: gradients reduced after the
  backward) makes the once-per-step gradient collectives serial after the last backward: tail = L x D_step.
- Parallelism.pp_p2p_overlap (Megatron-Core overlap_p2p_comm): the pipeline sends and receives run behind compute,
  priced hidden (plan.hidden); without it they are exposed like the other micro-batch comm.
- Micro-batch and step scope nodes (embedding, head, loss, pipeline send/recv, the embedding
  gradient all-reduce, the optimizer) are serial: their comm is exposed.
- Pipeline: step = m * T_micro + bubble + tail, T_micro being the fullest rank's micro-batch time.
  With every rank holding the same layers the bubble is (pp - 1) / vpp micro-batch times
  ((pp - 1) / (m + pp - 1) of the step without interleaving). With uneven ranks (layers that do not
  divide, Parallelism.pp_split) it is the other ranks' micro-batch times summed, over vpp
  (pipeline_bubble): the fill and drain pass once through one chunk of every other rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from c3kit.errors import C3kitError

COMM_STREAMS = ("tp", "dp", "ep", "pp", "cp")
BLOCKING_STREAMS = ("tp", "ep", "pp", "cp")
PHASES = ("fwd", "bwd", "opt")


class StepError(C3kitError):
    """A step graph the projection cannot interpret (unknown stream, scope or phase, bad dependency)."""


@dataclass(frozen=True)
class Blocking:
    """A blocking collective: node index, the compute it may hide behind, and whether that pair is dependent."""

    node: int
    partners: tuple[int, ...]  # compute node indices paired with it (summed)
    dependent: bool


@dataclass(frozen=True)
class Segment:
    """One serial segment: compute nodes summed, blocking comm each paired by the policy."""

    compute: tuple[int, ...]
    blocking: tuple[Blocking, ...]


@dataclass(frozen=True)
class Plan:
    """Structure of one step graph, independent of op times."""

    n: int
    ids: tuple[str, ...]
    layers: int  # layers per pipeline stage (all virtual chunks together)
    micro_batches: int
    pp: int
    vpp: int
    layer: dict  # phase -> Segment (per layer, per micro-batch)
    dp_pre: dict  # phase -> indices of layer dp nodes that compute needs (prefetch)
    dp_post: dict  # phase -> indices of layer dp nodes that need compute (gradients)
    dp_last: tuple[int, ...]  # layer dp nodes run once per step, overlapping the last micro-batch's backward
    micro: dict  # phase -> Segment (per micro-batch, outside the layers)
    step: Segment  # once per step, serial (optimizer, unhidden step-level comm)
    multiplicity: np.ndarray  # runs of each node per step (count x layers for layer nodes)
    inst: np.ndarray  # runs of each node per timeline instance (per layer per micro-batch, per step)
    per_micro: np.ndarray  # runs per micro-batch (0 for once-per-step nodes)
    const: np.ndarray  # runs per step of once-per-step nodes (0 otherwise)
    in_layer: np.ndarray  # bool: a layer node (repeated layers_per_stage times)
    is_comm: np.ndarray  # bool per node
    others: float = -1.0  # the other ranks' layers in units of this (fullest) rank's; -1: pp - 1 (even ranks)
    dp_first: tuple[int, ...] = ()  # layer dp nodes run once per step, prefetched in the first micro-batch's forward
    dp_after_bwd: bool = False  # dp_last collectives run after the last backward, serial (Parallelism.dp_overlap False)
    hidden: tuple[int, ...] = ()  # comm nodes wholly behind compute (pipeline p2p with Parallelism.pp_p2p_overlap)


def _is_comm_stream(stream: str) -> bool:
    if stream == "compute":
        return False
    if stream in COMM_STREAMS:
        return True
    raise StepError(f"node stream {stream!r}: use compute or one of {', '.join(COMM_STREAMS)}")


def _closure(nodes, index, subset: list[int]) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """Ancestors and descendants of each node inside `subset` (dependencies outside are ignored)."""
    inside = set(subset)
    anc: dict[int, set[int]] = {}
    order = list(subset)  # nodes are listed in topological order by contract; verify deps point back
    for i in order:
        a: set[int] = set()
        for d in nodes[i].deps:
            if d not in index:
                raise StepError(f"node {nodes[i].id!r} depends on unknown node {d!r}")
            j = index[d]
            if j in inside:
                if j not in anc:
                    raise StepError(f"node {nodes[i].id!r} depends on {d!r}, which comes later: "
                                    "graph nodes must be in topological order")
                a.add(j)
                a |= anc[j]
        anc[i] = a
    desc: dict[int, set[int]] = {i: set() for i in order}
    for i, a in anc.items():
        for j in a:
            desc[j].add(i)
    return anc, desc


def _segment(nodes, index, subset: list[int], allow_hiding: bool) -> Segment:
    """Classify a serial group: compute nodes, and each blocking comm with its overlap partners."""
    compute = [i for i in subset if not _is_comm_stream(nodes[i].stream)]
    comms = [i for i in subset if _is_comm_stream(nodes[i].stream)]
    anc, desc = _closure(nodes, index, subset)
    used: set[int] = set()
    blocking = []
    for c in comms:
        free = [i for i in compute if i not in anc[c] and i not in desc[c] and i not in used] if allow_hiding else []
        if free:
            used.update(free)
            blocking.append(Blocking(c, tuple(free), dependent=False))
        else:
            producers = [i for i in compute if i in anc[c]]
            partner = (max(producers),) if producers else ()
            blocking.append(Blocking(c, partner, dependent=True))
    return Segment(tuple(compute), tuple(blocking))


def make_plan(graph) -> Plan:
    """Derive the overlap plan of a StepGraph from its nodes' streams, scopes, phases and dependencies."""
    nodes = list(graph.nodes)
    index = {nd.id: i for i, nd in enumerate(nodes)}
    if len(index) != len(nodes):
        raise StepError("step graph has duplicate node ids")
    L = int(graph.layers_per_stage)
    m = int(graph.micro_batches)
    par = graph.par
    pp = int(getattr(par, "pp", 1))
    vpp = int(getattr(par, "vpp", 1))
    if L <= 0 or m <= 0:
        raise StepError(f"step graph needs layers_per_stage and micro_batches >= 1, got {L} and {m}")
    mult = np.zeros(len(nodes))
    inst = np.zeros(len(nodes))
    per_micro = np.zeros(len(nodes))  # count = per_micro x micro-batches ...
    const = np.zeros(len(nodes))  # ... or count = const (once-per-step nodes)
    groups: dict[tuple[str, str], list[int]] = {}
    after_bwd = not getattr(par, "dp_overlap", True)  # gradients reduced once, after the last backward
    for i, nd in enumerate(nodes):
        if nd.phase not in PHASES:
            raise StepError(f"node {nd.id!r}: phase {nd.phase!r}: use one of {', '.join(PHASES)}")
        if nd.count < 0:
            raise StepError(f"node {nd.id!r}: count must be >= 0, got {nd.count}")
        _is_comm_stream(nd.stream)
        if nd.scope not in ("layer", "micro", "step"):
            raise StepError(f"node {nd.id!r}: scope {nd.scope!r}: use layer, micro or step")
        mult[i] = nd.count * (L if nd.scope == "layer" else 1)
        key = nd.scope
        if nd.scope == "step":
            inst[i] = const[i] = nd.count
        elif nd.stream == "dp" and nd.scope == "layer" and (nd.count < m or (after_bwd and nd.phase == "bwd")):
            # a layer's collective that runs once per step: a gradient reduction in the last micro-batch's backward,
            # a parameter gather in the first micro-batch's forward
            key = "last" if nd.phase != "fwd" else "first"
            inst[i] = const[i] = nd.count
        else:
            inst[i] = per_micro[i] = nd.count / m  # per micro-batch (layer nodes carry count = micro-batches)
        groups.setdefault((key, nd.phase), []).append(i)

    layer, dp_pre, dp_post, micro = {}, {}, {}, {}
    hidden: list[int] = []
    if getattr(par, "pp_p2p_overlap", False):
        for ph in ("fwd", "bwd"):
            sub = groups.get(("micro", ph), [])
            hidden += [i for i in sub if nodes[i].stream == "pp"]
            groups[("micro", ph)] = [i for i in sub if nodes[i].stream != "pp"]
    dp_step: list[int] = []
    step_nodes: list[int] = []
    for ph in ("fwd", "bwd"):
        sub = groups.get(("layer", ph), [])
        dp = [i for i in sub if nodes[i].stream == "dp"]
        rest = [i for i in sub if nodes[i].stream != "dp"]
        layer[ph] = _segment(nodes, index, rest, allow_hiding=True)
        anc, desc = _closure(nodes, index, sub)
        comp = set(layer[ph].compute)
        dp_pre[ph] = tuple(i for i in dp if desc[i] & comp)
        dp_post[ph] = tuple(i for i in dp if not (desc[i] & comp))
        micro[ph] = _segment(nodes, index, groups.get(("micro", ph), []), allow_hiding=False)
        step_nodes += groups.get(("step", ph), [])
    if getattr(par, "moe_a2a_overlap", False):
        layer = _cross_phase_ep(nodes, layer)
    dp_step += groups.get(("last", "bwd"), [])
    dp_first = tuple(groups.get(("first", "fwd"), []))
    if dp_first:
        _, desc = _closure(nodes, index, sorted(groups.get(("layer", "fwd"), []) + list(dp_first)))
        comp = set(layer["fwd"].compute)
        if any(not (desc[i] & comp) for i in dp_first):
            raise StepError("a forward data-parallel collective that runs less than every micro-batch must feed the "
                            "layer's forward compute (a parameter gather)")
    if groups.get(("layer", "opt")) or groups.get(("micro", "opt")) or groups.get(("last", "opt")):
        raise StepError("optimizer nodes must have scope 'step'")
    step_nodes += groups.get(("step", "opt"), [])
    step_nodes.sort()
    step = _segment(nodes, index, step_nodes, allow_hiding=False)
    return Plan(others=_other_layers(graph, L, pp),
        n=len(nodes), ids=tuple(nd.id for nd in nodes), layers=L, micro_batches=m, pp=pp, vpp=vpp,
        layer=layer, dp_pre=dp_pre, dp_post=dp_post, dp_last=tuple(dp_step), dp_first=dp_first, micro=micro,
        step=step, dp_after_bwd=after_bwd, hidden=tuple(sorted(hidden)),
        multiplicity=mult, inst=inst, per_micro=per_micro, const=const,
        in_layer=np.array([nd.scope == "layer" for nd in nodes], dtype=bool), is_comm=np.array([_is_comm_stream(nd.stream) for nd in nodes], dtype=bool),
    )


def _cross_phase_ep(nodes, layer: dict) -> dict:
    """Layer segments whose EP-stream collectives hide behind the other phase's free layer compute (moe_a2a_overlap):
    the compute no collective of the other phase pairs with, dealt round-robin (in op order) among this phase's EP
    collectives, so no compute hides two collectives."""
    out = {}
    for ph, other in (("fwd", "bwd"), ("bwd", "fwd")):
        seg = layer[ph]
        taken = {i for b in layer[other].blocking if nodes[b.node].stream != "ep" for i in b.partners}
        free = [i for i in layer[other].compute if i not in taken]
        ep = [k for k, b in enumerate(seg.blocking) if nodes[b.node].stream == "ep"]
        blocking = list(seg.blocking)
        for j, k in enumerate(ep):
            share = tuple(free[j::len(ep)])
            if share:
                blocking[k] = Blocking(seg.blocking[k].node, share, dependent=False)
        out[ph] = Segment(seg.compute, tuple(blocking))
    return out


def _other_layers(graph, L: int, pp: int) -> float:
    """The other pipeline ranks' layers over this rank's (L): sum(rank layers) / L - 1 (pp - 1 when even)."""
    par, model = graph.par, graph.model
    try:
        ranks = par.rank_layers(int(model.layers))
    except (AttributeError, TypeError, C3kitError):
        return -1.0
    if len(ranks) != pp or max(ranks) != L:  # a hand-built graph whose stage is not the model's fullest rank
        return -1.0
    return (sum(ranks) - L) / L


def pipeline_bubble(t_layers, t_other, rank_layers, vpp: int = 1):
    """Bubble seconds of a 1F1B pipeline whose ranks hold rank_layers layers (interleaved: vpp chunks each).

    A rank's micro-batch time is T_r = t_layers x L_r / L_max + t_other (t_layers: the fullest rank's
    layers, t_other: its per-micro-batch ops outside the layers). The fullest rank runs m micro-batches
    back to back; the fill and drain pass once through one chunk (1 / vpp) of every other rank:
    bubble = sum over r != fullest of T_r / vpp (flow-shop makespan, each rank's chunks taken equal).
    Even ranks give (pp - 1) / vpp micro-batch times (Narayanan et al. 2021, Sec. 2.2.2).
    """
    L = max(rank_layers)
    others = sum(rank_layers) / L - 1.0
    return (others * t_layers + (len(rank_layers) - 1) * t_other) / vpp


def bubble_micro_batches(pp, vpp):
    """Idle time of a 1F1B pipeline in micro-batch times: (pp - 1) / vpp.

    With vpp model chunks per GPU (interleaved 1F1B) the fill and drain shrink vpp-fold, so the bubble
    is (pp - 1) / (vpp m) of the m micro-batches' ideal time (Narayanan et al. 2021, Sec. 2.2.2).
    """
    return (pp - 1) / vpp


def warmup_chunks(pp: int, vpp: int, micro_batches: int, rank: int = 0) -> int:
    """Forward chunks a pipeline rank runs before its first backward (Megatron-LM's 1F1B schedules).

    Non-interleaved: min(pp - rank - 1, m); interleaved: (pp - rank - 1) x 2 + (vpp - 1) x pp, at most
    m x vpp. The rank then holds warmup + 1 chunks of activations at its peak.
    """
    if vpp == 1:
        return min(pp - rank - 1, micro_batches)
    return min((pp - rank - 1) * 2 + (vpp - 1) * pp, micro_batches * vpp)


@dataclass(frozen=True)
class Timeline:
    """Result of evaluating a plan: arrays over scenarios (shape (N,)) or per node (shape (n, N))."""

    step_time: np.ndarray
    bubble: np.ndarray
    exposed: np.ndarray  # (n, N) exposed comm seconds per step, per node
    compute: np.ndarray  # (n, N) compute seconds per step, per node
    comm: np.ndarray  # (n, N) comm seconds per step, per node


def _seg_time(seg: Segment, t: np.ndarray, policy, exposed_each: np.ndarray) -> np.ndarray:
    """Critical-path time of one segment instance; writes each blocking comm's exposure (per instance)."""
    total = t[list(seg.compute)].sum(axis=0) if seg.compute else np.zeros(t.shape[1])
    engine = getattr(policy, "blocking_exposure", None)  # a policy that prices each pair itself (step.policy)
    for b in seg.blocking:
        partner = t[list(b.partners)].sum(axis=0) if b.partners else np.zeros(t.shape[1])
        if engine is not None:
            x = engine(b.node, partner, t, b.dependent)
        else:
            x = np.clip(policy.pair_time(partner, t[b.node], b.dependent) - partner, 0.0, t[b.node])
        exposed_each[b.node] = x
        total = total + x
    return total


def evaluate(plan: Plan, op_t: np.ndarray, policy, layers=None, micro_batches=None, pp=None, vpp=None,
             others=None) -> Timeline:
    """Step timeline from op times op_t (n x N: seconds of one run of each node's op, N scenarios).

    layers, micro_batches, pp, vpp and others (the other pipeline ranks' layers over this rank's;
    pp - 1 when every rank holds the same) default to the plan's; arrays of length N give one value
    per scenario (the vectorized sweep evaluates many scenarios of one graph structure at once).
    """
    op_t = np.asarray(op_t, dtype=float)
    if op_t.ndim == 1:
        op_t = op_t[:, None]
    if op_t.shape[0] != plan.n:
        raise StepError(f"time matrix has {op_t.shape[0]} rows for a plan of {plan.n} nodes")
    N = op_t.shape[1]
    L = plan.layers if layers is None else np.asarray(layers, dtype=float)
    m = plan.micro_batches if micro_batches is None else np.asarray(micro_batches, dtype=float)
    pp = plan.pp if pp is None else np.asarray(pp, dtype=float)
    vpp = plan.vpp if vpp is None else np.asarray(vpp, dtype=float)
    if others is None:
        others = pp - 1.0 if plan.others < 0 else plan.others
    others = np.asarray(others, dtype=float)
    t = op_t * plan.inst[:, None]
    zeros = np.zeros(N)
    x_each = np.zeros_like(t)  # exposed comm per instance (blocking comm)
    dp_exposed = np.zeros_like(t)  # exposed comm per step (dp-stream comm), filled below

    def dp_sum(idx):
        return t[list(idx)].sum(axis=0) if idx else zeros

    layer_pair = getattr(policy, "layer_pair_time", None)  # a policy that prices the DP-layer pair per phase

    def dp_pair(ph, c, d):
        return layer_pair(ph, c, d) if layer_pair is not None else policy.pair_time(c, d, False)

    spans = {}
    for ph in ("fwd", "bwd"):
        c = _seg_time(plan.layer[ph], t, policy, x_each)
        pre, post = dp_sum(plan.dp_pre[ph]), dp_sum(plan.dp_post[ph])
        d = pre + post
        span = pre + c + (L - 1) * dp_pair(ph, c, d) + post
        spans[ph] = (c, d, pre, post, span)
    micro_f = _seg_time(plan.micro["fwd"], t, policy, x_each)
    micro_b = _seg_time(plan.micro["bwd"], t, policy, x_each)
    t_micro = spans["fwd"][4] + spans["bwd"][4] + micro_f + micro_b

    # the last micro-batch's backward also carries the once-per-step gradient collectives
    c_b, d_b, pre_b, post_b, span_b = spans["bwd"]
    d_step = dp_sum(plan.dp_last)
    if plan.dp_last and plan.dp_after_bwd:
        tail = L * d_step  # every layer's gradient reduction after the last backward
    elif plan.dp_last:
        per_layer = d_b + d_step
        span_last = pre_b + c_b + (L - 1) * dp_pair("bwd", c_b, per_layer) + post_b + d_step
        tail = span_last - span_b
    else:
        tail = zeros
    # the first micro-batch's forward also carries the once-per-step parameter gathers (prefetched like the
    # per-micro-batch ones: the first layer's gather exposed, each next one behind the layer before)
    c_f, d_f, pre_f, post_f, span_f = spans["fwd"]
    d_first = dp_sum(plan.dp_first)
    if plan.dp_first:
        span_first = pre_f + d_first + c_f + (L - 1) * dp_pair("fwd", c_f, d_f + d_first) + post_f
        head = span_first - span_f
    else:
        head = zeros
    step_serial = _seg_time(plan.step, t, policy, x_each)
    # pipeline_bubble over arrays: the layers' share scales with the other ranks' layers
    bubble = (others * (spans["fwd"][4] + spans["bwd"][4]) + (pp - 1.0) * (micro_f + micro_b)) / vpp
    step_time = m * t_micro + bubble + head + tail + step_serial

    # attribute dp-stream exposure to its nodes in proportion to their comm time
    for ph in ("fwd", "bwd"):
        c, d, pre, post, span = spans[ph]
        exp = np.maximum(span - L * c, 0.0) * m
        idx = list(plan.dp_pre[ph] + plan.dp_post[ph])
        if idx:
            share = np.divide(t[idx], d, out=np.zeros_like(t[idx]), where=d > 0)
            dp_exposed[idx] = share * exp
    if plan.dp_last:
        idx = list(plan.dp_last)
        share = np.divide(t[idx], d_step, out=np.zeros_like(t[idx]), where=d_step > 0)
        dp_exposed[idx] = share * np.maximum(tail, 0.0)
    if plan.dp_first:
        idx = list(plan.dp_first)
        share = np.divide(t[idx], d_first, out=np.zeros_like(t[idx]), where=d_first > 0)
        dp_exposed[idx] = share * np.maximum(head, 0.0)

    lay = np.where(plan.in_layer[:, None], L, 1.0)
    mult = (plan.per_micro[:, None] * m + plan.const[:, None]) * lay  # runs per step
    per_step = np.where((plan.per_micro > 0)[:, None], m * lay, 1.0)  # timeline instances per step
    total = op_t * mult
    exposed = x_each * per_step
    dp_rows = ([i for ph in ("fwd", "bwd") for i in plan.dp_pre[ph] + plan.dp_post[ph]] + list(plan.dp_last)
               + list(plan.dp_first))
    exposed[dp_rows] = dp_exposed[dp_rows]
    comm = np.where(plan.is_comm[:, None], total, 0.0)
    compute = np.where(plan.is_comm[:, None], 0.0, total)
    return Timeline(step_time=step_time, bubble=bubble, exposed=exposed, compute=compute, comm=comm)
