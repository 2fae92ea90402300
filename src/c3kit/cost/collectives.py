"""Collective times by algorithm and topology: latency term + bandwidth term (alpha-beta)."""

from __future__ import annotations

from c3kit.hw.model import GPU
from c3kit.workload.ops import Collective

# nccl-tests bus-bandwidth factors: busbw = algbw * factor(n)
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}


def busbw_factor(kind: str, n: int) -> float:
    """The nccl-tests factor that turns algbw (S / t) into busbw for a collective on n ranks."""
    return BUSBW_FACTOR[kind](n)


def ring_time(c: Collective, gpu: GPU) -> float:
    """Ring algorithm on the scale-up fabric (or the NIC when span is 'inter')."""
    n = c.ranks
    if n == 1 or c.bytes == 0:
        return 0.0
    bw, lat = (gpu.scaleup.peer_bw(), gpu.scaleup.latency) if c.span == "intra" else (
        gpu.scaleout_bw, gpu.scaleout_latency)
    steps = {"all_reduce": 2 * (n - 1), "send_recv": 1}.get(c.kind, n - 1)
    return steps * lat + c.bytes * busbw_factor(c.kind, n) / bw


def collective_time(c: Collective, gpu: GPU) -> float:
    """Time of a collective with the default algorithm for its topology."""
    return ring_time(c, gpu)
