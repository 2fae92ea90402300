"""Where the ranks of a parallel group sit: how many of them share a node (ranks are numbered tp fastest,
then dp, then pp)."""

from __future__ import annotations

from dataclasses import replace

from c3kit.workload.ops import Collective


def dp_per_node(tp: int, gpus_per_node: int) -> int:
    """GPUs of one data-parallel group inside a node: ranks are tp fastest, so gpus_per_node / tp (or 1)."""
    return gpus_per_node // tp if tp <= gpus_per_node and gpus_per_node % tp == 0 else 1


def placement(stream: str, ranks: int, tp: int, gpus_per_node: int) -> int:
    """Ranks per node of a cross-node group: TP/EP groups are contiguous, a DP group strides over TP."""
    g = dp_per_node(tp, gpus_per_node) if stream == "dp" else (gpus_per_node if ranks % gpus_per_node == 0 else 1)
    return g if ranks % g == 0 else 1


def placed(nd, graph):
    """The node's op with the placement (per_node) of a cross-node group filled in when the graph left it 0.

    Ranks are numbered tp fastest, then dp, then pp: a TP group spanning nodes fills whole nodes, a
    DP group with TP 8 on 8-GPU nodes has one rank per node (its traffic goes through one NIC per
    GPU), with TP 2 four ranks per node.
    """
    op = nd.op
    if not isinstance(op, Collective) or op.span != "inter" or getattr(op, "per_node", 0):
        return op
    return replace(op, per_node=placement(nd.stream, op.ranks, graph.par.tp, graph.gpus_per_node))
