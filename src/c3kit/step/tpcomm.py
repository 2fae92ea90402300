"""Transformer Engine's userbuffers TP overlap in the step: each sequence-parallel collective-GEMM pair of a layer
priced by the overlap engine's schedule of the method TE runs it with (Parallelism.tp_comm_overlap).

TE names a layer's GEMMs qkv, proj, fc1 and fc2 (the layer description's roles) and overlaps, per GEMM name
(workload.parallel.TP_COMM_OVERLAP_METHODS):
  <g>_fprop   forward all-gather -> qkv / fc1, forward proj / fc2 -> reduce-scatter (recomputed forwards too)
  <g>_dgrad   backward all-gather of the output gradient -> proj / fc2 input-gradient GEMM (ring_exchange), or
              the re-gather of a qkv / fc1 input beside that layer's input-gradient GEMM (bulk)
  <g>_wgrad   the reduce-scatter of a qkv / fc1 input gradient beside that layer's weight-gradient GEMM (bulk)
Each method is one of the engine's schedules (SCHEDULE_OF); the pair's exposed communication is then the engine
modes' (step.policy.BoundEngineOverlap: m - saved x min(g, m)), never above the collective alone: the userbuffers
configs are tuned per model, TP size, micro-batch and sequence length (their file and variable names say so), so a
method slower than its plain collective is taken as not chosen. Every other pair keeps the policy it had.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

# (TE method, set_sm_margin) -> the overlap engine's schedule that runs the same decomposition:
# - ring_exchange: TE's point-to-point ring (CommOverlapP2P) with use_ce, TE's default: tp steps, each a copy-engine
#   transfer to a neighbour beside the GEMM of a chunk, partial reduce-scatter chunks summed at the end by a kernel.
#   The engine's chunked copy-engine ring; its "ring-dma" is PyTorch's async TP (barriers, two streams), its
#   "ring-dma-prio" the plain ring (a copy engine takes no SMs, so the priority changes nothing). set_sm_margin
#   with ring_exchange's num_sm 1 withholds one SM of 132: not priced.
# - pipeline: the GEMM split in chunks, each chunk's reduce-scatter to every peer by an SM kernel while the next
#   chunk computes (CommOverlapBase::split_overlap_rs): the engine's ficco schedules on SM kernels; set_sm_margin
#   runs the GEMM chunks on the SMs the kernel leaves (-part); without it the comm stream's priority is the higher
#   (TE v1.8: _stream_comm from PyTorch's high-priority pool; v2.x: comm_priority the greatest) (-prio).
# - bulk: a whole collective by an SM kernel on a high-priority stream beside an independent GEMM (bulk_overlap):
#   bulk-sm-prio, or bulk-sm-part with set_sm_margin.
SCHEDULE_OF = {("ring_exchange", False): "ring-dma-prio", ("ring_exchange", True): "ring-dma-prio",
               ("pipeline", False): "ficco-sm-prio", ("pipeline", True): "ficco-sm-part",
               ("bulk", False): "bulk-sm-prio", ("bulk", True): "bulk-sm-part"}


def te_gemm_name(graph, pair) -> str:
    """The TE GEMM name of a tensor-parallel pair (qkv_fprop, fc2_dgrad, fc1_wgrad, ...)."""
    nodes = graph.nodes
    comm, gemm = nodes[pair.comm], nodes[pair.gemm]
    if not gemm.grad:  # a forward GEMM, or one recomputed in the backward (role re_<name>): the module's forward
        return f"{gemm.role.removeprefix('re_')}_fprop"
    return f"{gemm.role}_{'wgrad' if comm.role == 'tp_rs' else 'dgrad'}"


def _wgrad_of(graph, pair) -> int | None:
    """The weight-gradient GEMM node of the pair's layer GEMM (same role and phase), None when there is none."""
    from c3kit.workload.ops import Gemm

    nodes = graph.nodes
    g = nodes[pair.gemm]
    for j, nd in enumerate(nodes):
        if (nd.scope == g.scope and nd.phase == g.phase and nd.role == g.role and nd.grad == "wgrad"
                and isinstance(nd.op, Gemm)):
            return j
    return None


def _bulk_problem(graph, comm: int, gemm: int):
    """The bulk OverlapProblem of a collective beside an independent GEMM (None where the engine cannot take it)."""
    from c3kit.errors import C3kitError
    from c3kit.overlap.problem import OverlapProblem

    g, c = graph.nodes[gemm].op, graph.nodes[comm].op
    if c.ranks < 2 or c.ranks > graph.gpus_per_node or c.span != "intra":
        return None
    try:
        return OverlapProblem("bulk", int(g.m * getattr(g, "batch", 1)), int(g.n), int(g.k), graph.dtype, int(c.ranks),
                              collective=c.kind, comm_bytes=float(c.bytes))
    except C3kitError:
        return None


def te_pairs(graph, methods: dict) -> dict:
    """{collective node: (TE GEMM name, schedule, Pair, OverlapProblem or None)} of the layer's tensor-parallel pairs
    whose GEMM name has a method in `methods` ({TE GEMM name: (method, set_sm_margin)})."""
    from c3kit.step.pairs import Pair, find_pairs, problem_of

    out = {}
    for i, pr in find_pairs(graph).items():
        nd = graph.nodes[i]
        if nd.stream != "tp" or nd.scope != "layer":
            continue
        name = te_gemm_name(graph, pr)
        if name not in methods:
            continue
        method, margin = methods[name]
        if method == "bulk":
            partner = _wgrad_of(graph, pr) if name.endswith("_wgrad") else pr.gemm
            if partner is None:
                continue
            pr = Pair(i, partner, "bulk")
            prob = _bulk_problem(graph, i, partner)
        else:
            prob = problem_of(pr, graph)
        out[i] = (name, SCHEDULE_OF[(method, margin)], pr, prob)
    return out


class TPCommOverlap:
    """`inner` (any overlap policy) with the layer's tensor-parallel pairs run by Transformer Engine's userbuffers
    methods `overlap` (workload.parallel.TP_COMM_OVERLAPS), each priced by its engine schedule (SCHEDULE_OF)."""

    def __init__(self, inner, overlap: str, power: str = "burst"):
        from c3kit.workload.parallel import TP_COMM_OVERLAP_METHODS, check_tp_comm_overlap

        self.inner = inner
        self.methods = TP_COMM_OVERLAP_METHODS[check_tp_comm_overlap(overlap)]
        self.power = power
        self.name = getattr(inner, "name", type(inner).__name__)

    def pair_time(self, compute_s, comm_s, dependent: bool):
        """Unbound use (no graph): the inner policy's rule."""
        return self.inner.pair_time(compute_s, comm_s, dependent)

    def bind(self, graph, gpu) -> "BoundTPCommOverlap":
        """The policy for one graph on one GPU: the TE pairs' engine prices, the inner policy bound for the rest."""
        from c3kit.step.policy import BoundEngineOverlap, price_pair

        inner = self.inner.bind(graph, gpu) if hasattr(self.inner, "bind") else self.inner
        pairs, saved, sched = {}, {}, {}
        for i, (_, schedule, pr, prob) in te_pairs(graph, self.methods).items():
            price = price_pair(prob, gpu, schedule, self.power) if prob is not None else None
            if price is None:  # sizes the schedule cannot split: the inner policy prices the pair
                continue
            pairs[i] = pr
            saved[i] = np.array([max(price.saved, 0.0)])  # never above the collective alone (module doc)
            sched[i] = [price.schedule]
        rule = getattr(inner, "base", inner)  # the rule of the pairs neither prices (BoundEngineOverlap's base)
        parent = SimpleNamespace(name=self.name, mode="tp_comm_overlap", base=rule)
        return BoundTPCommOverlap(inner, BoundEngineOverlap(parent, pairs, saved, sched))


class BoundTPCommOverlap:
    """TPCommOverlap bound to one graph: the TE pairs by their engine price, every other pair by the inner policy."""

    def __init__(self, inner, te):
        self.inner = inner
        self.te = te
        self.name = te.name

    def pair_time(self, compute_s, comm_s, dependent: bool):
        """Layer-level and data-parallel pairs: the inner policy's rule."""
        return self.inner.pair_time(compute_s, comm_s, dependent)

    def layer_pair_time(self, phase: str, compute_s, comm_s):
        """A layer's compute beside its neighbours' data-parallel collectives: as the inner policy prices it."""
        f = getattr(self.inner, "layer_pair_time", None)
        return f(phase, compute_s, comm_s) if f is not None else self.inner.pair_time(compute_s, comm_s, False)

    def blocking_exposure(self, node: int, partner, t, dependent: bool) -> np.ndarray:
        """Exposed seconds of a blocking collective (per instance): its TE schedule's, else the inner policy's."""
        f = getattr(self.inner, "blocking_exposure", None)
        if node not in self.te.pairs and f is not None:
            return f(node, partner, t, dependent)
        return self.te.blocking_exposure(node, partner, t, dependent)

    def schedule_of(self, node: int, scenario: int = 0) -> str:
        """The TE pair's engine schedule, else what the inner policy says."""
        f = getattr(self.inner, "schedule_of", None)
        if node not in self.te.pairs and f is not None:
            return f(node, scenario)
        return self.te.schedule_of(node, scenario)


def with_tp_comm_overlap(policy, graph, power: str | None = None):
    """The policy of a graph: wrapped in TPCommOverlap when its layout runs TE's userbuffers overlap (GEMM clocks:
    `power`, else the policy's, else burst, as the engine modes)."""
    overlap = getattr(graph.par, "tp_comm_overlap", "none")
    if overlap == "none":
        return policy
    return TPCommOverlap(policy, overlap, power or getattr(policy, "power", None) or "burst")


def bind_policy(policy, graph, hw, power: str | None = None):
    """The policy bound to a graph on a GPU (with_tp_comm_overlap, then its bind where it has one)."""
    policy = with_tp_comm_overlap(policy, graph, power)
    return policy.bind(graph, hw) if hasattr(policy, "bind") else policy
