"""Collective-GEMM pairs of a step graph: which GEMM each blocking collective could overlap with.

Read from the graph's structure only (roles, dependencies, op kinds), never from shapes of its own:
  tp_ag (SP all-gather)            -> the GEMM that consumes it           pattern ag_gemm
  tp_rs (SP reduce-scatter)        -> the GEMM that produces its input    pattern gemm_rs
  tp_ar (TP all-reduce)            -> the GEMM that produces its input    pattern gemm_ar
  ep_dispatch / ep_combine (EP)    -> the expert GEMM beside it           pattern moe
The overlap problem of a pair takes its sizes from the graph's own ops (the GEMM's M, N, K; the
collective's ranks), so the layer description stays the one source of shapes. Data-parallel
collectives (DP gradients, FSDP gathers) overlap whole layers, not one GEMM: the plan pairs them.
"""

from __future__ import annotations

from dataclasses import dataclass

from c3kit.workload.ops import Collective, Gemm

PATTERN_OF_ROLE = {"tp_ag": "ag_gemm", "tp_rs": "gemm_rs", "tp_ar": "gemm_ar", "ep_dispatch": "moe",
                   "ep_combine": "moe"}
CONSUMED = ("tp_ag", "ep_dispatch")  # the GEMM comes after the collective; otherwise before it


@dataclass(frozen=True)
class Pair:
    """A blocking collective (node index) and the GEMM node (index) it can be overlapped with."""

    comm: int
    gemm: int
    pattern: str


def find_pairs(graph) -> dict[int, Pair]:
    """Pairs by collective node index (collectives without a GEMM partner are left out)."""
    nodes = list(graph.nodes)
    index = {nd.id: i for i, nd in enumerate(nodes)}
    consumers: dict[int, list[int]] = {}
    for i, nd in enumerate(nodes):
        for d in nd.deps:
            if d in index:
                consumers.setdefault(index[d], []).append(i)
    out: dict[int, Pair] = {}
    for i, nd in enumerate(nodes):
        role = nd.role
        if role not in PATTERN_OF_ROLE or not isinstance(nd.op, Collective):
            continue
        after = [j for j in consumers.get(i, []) if isinstance(nodes[j].op, Gemm)]
        before = [index[d] for d in nd.deps if d in index and isinstance(nodes[index[d]].op, Gemm)]
        if nd.stream == "ep":
            # the backward mirrors the forward (combine's gradient feeds the experts, dispatch's follows them):
            # the partner is the expert GEMM on whichever side it is
            cands = [j for j in after + before if nodes[j].role.endswith("experts")]
        elif role in CONSUMED:
            # the backward consumes a gathered activation with its input-gradient GEMM first
            cands = sorted(after, key=lambda j: nodes[j].grad != "dgrad")
        else:
            cands = before
        if cands:
            out[i] = Pair(i, cands[0], PATTERN_OF_ROLE[role])
    return out


def problem_of(pair: Pair, graph, gemm_dims=None, ranks=None):
    """The OverlapProblem of a pair (None when the engine cannot take it: sizes that do not divide,
    one rank, a group larger than a node). gemm_dims / ranks override the graph's (m, n, k) / ranks
    (the vectorized sweep passes one scenario's values)."""
    from c3kit.errors import C3kitError
    from c3kit.overlap.problem import OverlapProblem

    nodes = graph.nodes
    g = nodes[pair.gemm].op
    c = nodes[pair.comm].op
    m, n, k = gemm_dims if gemm_dims is not None else (g.m, g.n, g.k)
    r = int(ranks if ranks is not None else c.ranks)
    if r < 2 or r > graph.gpus_per_node or c.span != "intra":
        return None
    try:
        if pair.pattern == "moe":
            experts = int(graph.model.n_experts)
            # rows this GPU routes (the grouped GEMM's rows over its local experts), model dim in and out
            rows = int(m) * int(getattr(g, "batch", 1))
            hidden = int(graph.model.hidden)
            return OverlapProblem("moe", rows - rows % r or r, hidden, hidden, graph.dtype, r, experts=experts)
        return OverlapProblem(pair.pattern, int(m), int(n), int(k), graph.dtype, r)
    except C3kitError:
        return None
