"""Collective times by algorithm and topology: latency term + bandwidth term (alpha-beta), nccl-tests conventions.

S = c.bytes is the nccl-tests array size (see workload.ops.Collective), n = c.ranks, a = per-step
latency, B = the bandwidth one GPU drives into the algorithm:

- ring:   all-reduce 2(n-1) a + 2(n-1)/n S/B; all-gather, reduce-scatter (n-1) a + (n-1)/n S/B;
          all-to-all (pairwise exchange) (n-1) (a + S/n / B_peer); send/recv a + S/B_peer.
- tree:   all-reduce only, NCCL's double binary tree: 2 ceil(log2 n) a + 2 S/B (the two trees each
          carry half the data; every rank receives and sends about S in each phase).
- direct: every peer at once over its own link (full mesh) or the switch: all-gather, reduce-scatter,
          all-to-all a + (n-1)/n S/B; all-reduce the better of one-shot (a + (n-1) S/B, every rank
          reads all buffers) and two-shot (direct reduce-scatter + direct all-gather).
          Valid on a switch, on a mesh with a link to every peer, or on a ring of <= 3 GPUs.
- hierarchical (span "inter", g GPUs per node, N = n/g nodes): all-reduce = intra reduce-scatter of S
          + inter all-reduce of S/g over N ranks (g rails in parallel, one NIC each) + intra
          all-gather of S; all-gather = inter all-gather of S/g then intra all-gather of S;
          reduce-scatter the reverse.

Bandwidth B: on a switch the GPU's whole scale-up bw to any peer set; on a full mesh the links to
the group's peers, min(n-1, links) x link bw (multi-ring / direct use them all); on a ring topology
both directions of the GPU's two links. Across nodes a flat algorithm is limited by the NICs of the
GPUs in a node: min(B_intra, g x NIC bw), with the NIC latency per step.

g (GPUs of the group per node) is the Collective's `per_node` when it has one (> 0), else 1: a group
that crosses nodes is most often strided (DP or PP over TP-sized nodes), one GPU per node, and 1 is
the conservative choice (NIC-bound) when nothing else is known.
`eff` scales every bandwidth (achieved / peak link bandwidth; 1.0 is the ideal model); `su_eff`, where
given, scales the scale-up fabric's instead (cost/published.comm_eff: the published nccl-tests level of a
GPU), and `eff` then the NICs' only.

Every collective call also pays L = the catalog's `scaleup.launch` once, whatever the algorithm (the
library's base latency: kernel launch, channel set-up, completion; NCCL's and RCCL's own tuning models
carry it as baseLat: 6.6 us for NCCL ring LL, 12 us for RCCL), on top of a = `scaleup.latency` per step
(0.6 us NCCL / 0.8 us RCCL per ring LL step on NVLink / xGMI). The catalog [sources] cite both.
"""

from __future__ import annotations

import math

from c3kit.errors import CostError
from c3kit.hw.model import GPU
from c3kit.workload.ops import Collective

ALGOS = ("ring", "tree", "direct", "hierarchical")

# nccl-tests bus-bandwidth factors: busbw = algbw * factor(n)
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}

_INF = float("inf")


def busbw_factor(kind: str, n: int) -> float:
    """The nccl-tests factor that turns algbw (S / t) into busbw for a collective on n ranks."""
    try:
        return BUSBW_FACTOR[kind](n)
    except KeyError:
        raise CostError(f"no busbw factor for {kind!r}: use one of {', '.join(BUSBW_FACTOR)}") from None


def algbw(c: Collective, t: float) -> float:
    """nccl-tests algorithm bandwidth S / t (B/s) of collective c that took t seconds."""
    if t <= 0:
        raise CostError(f"algbw needs a positive time, got {t!r}")
    return c.bytes / t


def busbw(c: Collective, t: float) -> float:
    """nccl-tests bus bandwidth algbw x factor(kind, ranks) (B/s): comparable to link bandwidth."""
    return algbw(c, t) * busbw_factor(c.kind, c.ranks)


# ------------------------------------------------------------------------------------------- fabric views

def intra_bw(gpu: GPU, n: int) -> float:
    """Bandwidth (B/s, per direction) one GPU drives into a collective among n GPUs of its node."""
    su = gpu.scaleup
    if su.topology == "mesh":
        return su.bw / su.links_per_gpu * min(max(n - 1, 1), su.links_per_gpu)
    return su.bw


def intra_peer_bw(gpu: GPU) -> float:
    """Bandwidth (B/s) of a single point-to-point transfer to one peer inside the node."""
    return gpu.scaleup.peer_bw()


def direct_valid(gpu: GPU, n: int) -> bool:
    """True when every GPU of an n-GPU group inside a node reaches every other without a hop."""
    su = gpu.scaleup
    if su.topology == "switch":
        return True
    if su.topology == "mesh":
        return su.links_per_gpu >= n - 1
    return n <= 3


def per_node(c: Collective, gpu: GPU) -> int:
    """GPUs of the group inside one node (the op's `per_node` if set; else inferred, see module doc)."""
    g = int(getattr(c, "per_node", 0) or 0)
    if g > 0 and c.span == "inter":
        if g > gpu.gpus_per_node:
            raise CostError(f"collective {c.name}: {g} ranks per node but {gpu.name} nodes hold {gpu.gpus_per_node}")
        if c.ranks % g:
            raise CostError(f"collective {c.name}: {c.ranks} ranks do not split into nodes of {g}")
        return g
    if c.span == "intra":
        return c.ranks
    return 1


# -------------------------------------------------------------------------------------------- primitives

def ring_formula(kind: str, n, s, a, bw, peer):
    """Ring time from ranks n, bytes s, per-step latency a, ring bandwidth bw and peer bandwidth peer.

    Plain arithmetic, so it takes floats or numpy arrays alike (the vectorized sweep in step.fast uses it).
    """
    if kind == "all_reduce":
        return 2 * (n - 1) * a + 2.0 * (n - 1) / n * s / bw
    if kind in ("all_gather", "reduce_scatter"):
        return (n - 1) * a + (n - 1) / n * s / bw
    if kind == "all_to_all":
        return (n - 1) * (a + s / n / peer)
    return a + s / peer  # send_recv


def _tree(kind: str, n: int, s: float, a: float, bw: float) -> float:
    if kind != "all_reduce":
        return _INF
    return 2 * math.ceil(math.log2(n)) * a + 2.0 * s / bw


def _direct(kind: str, n: int, s: float, a: float, bw: float, peer: float) -> float:
    if kind == "all_reduce":
        return min(a + (n - 1) * s / bw, 2 * a + 2.0 * (n - 1) / n * s / bw)
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return a + (n - 1) / n * s / bw
    return a + s / peer


def _intra(c: Collective, gpu: GPU, algo: str, eff: float, su_eff: float) -> float:
    n, s, a, eff = c.ranks, c.bytes, gpu.scaleup.latency, su_eff
    bw, peer = intra_bw(gpu, n) * eff, intra_peer_bw(gpu) * eff
    if algo == "ring":
        return ring_formula(c.kind, n, s, a, bw, peer)
    if algo == "tree":
        if gpu.scaleup.topology == "ring" and n > 3:
            return _INF
        return _tree(c.kind, n, s, a, bw)
    if algo == "direct":
        return _direct(c.kind, n, s, a, bw, peer) if direct_valid(gpu, n) else _INF
    return _INF  # hierarchical needs more than one node


def _inter(c: Collective, gpu: GPU, algo: str, eff: float, su_eff: float) -> float:
    n, s = c.ranks, c.bytes
    g = per_node(c, gpu)
    nodes = n // g
    a_in, a_out = gpu.scaleup.latency, max(gpu.scaleout_latency, gpu.scaleup.latency)
    nic = gpu.scaleout_bw * eff
    b_in = intra_bw(gpu, g) * su_eff
    flat = min(b_in, g * nic) if g > 1 else nic
    if c.kind == "send_recv":
        return a_out + s / nic
    if algo == "ring":
        return ring_formula(c.kind, n, s, a_out, flat, nic)
    if algo == "tree":
        return _tree(c.kind, n, s, a_out, flat)
    if algo == "direct":
        if c.kind == "all_to_all":
            # each GPU sends (n-g)/n S through its NIC while (g-1)/n S moves inside the node
            t_in = (g - 1) / n * s / b_in if g > 1 else 0.0
            return a_out + max((n - g) / n * s / nic, t_in)
        return _INF
    # hierarchical
    if g == 1 or nodes == 1 or c.kind == "all_to_all":
        return _INF
    peer_in = intra_peer_bw(gpu) * su_eff
    sub = _best_intra if direct_valid(gpu, g) else _ring_intra
    if c.kind == "all_reduce":
        return (sub("reduce_scatter", g, s, a_in, b_in, peer_in)
                + min(ring_formula("all_reduce", nodes, s / g, a_out, nic, nic), _tree("all_reduce", nodes, s / g, a_out, nic))
                + sub("all_gather", g, s, a_in, b_in, peer_in))
    # all_gather / reduce_scatter: inter part on S/g over N ranks, intra part on S over g ranks
    return ring_formula(c.kind, nodes, s / g, a_out, nic, nic) + sub(c.kind, g, s, a_in, b_in, peer_in)


def _ring_intra(kind, n, s, a, bw, peer) -> float:
    return ring_formula(kind, n, s, a, bw, peer)


def _best_intra(kind, n, s, a, bw, peer) -> float:
    return min(ring_formula(kind, n, s, a, bw, peer), _direct(kind, n, s, a, bw, peer))


def collective_estimate(c: Collective, gpu: GPU, algo: str = "auto", eff: float = 1.0,
                        su_eff: float | None = None) -> tuple[float, str]:
    """(seconds, algorithm used) for collective c on gpu; algo 'auto' picks the fastest valid one; su_eff (default
    eff) scales the scale-up bandwidth, eff the NICs'."""
    su_eff = eff if su_eff is None else su_eff
    if not (eff > 0 and su_eff > 0):
        raise CostError(f"collective bandwidth efficiency must be positive, got {eff!r} / {su_eff!r}")
    if c.ranks == 1 or c.bytes == 0:
        return 0.0, "none"
    fn = _intra if c.span == "intra" else _inter
    if c.span == "intra" and c.ranks > gpu.gpus_per_node:
        raise CostError(f"collective {c.name}: {c.ranks} ranks do not fit in one {gpu.name} node of "
                        f"{gpu.gpus_per_node} GPUs; mark it span='inter'")
    base = gpu.scaleup.launch
    if algo == "auto":
        best, name = _INF, ""
        for a in ALGOS:
            t = fn(c, gpu, a, eff, su_eff)
            if t < best:
                best, name = t, a
        return best + base, name
    if algo not in ALGOS:
        raise CostError(f"unknown collective algorithm {algo!r}: use auto or one of {', '.join(ALGOS)}")
    t = fn(c, gpu, algo, eff, su_eff)
    if t == _INF:
        raise CostError(f"algorithm {algo!r} cannot run {c.kind} over {c.ranks} ranks ({c.span}) on "
                        f"{gpu.name} ({gpu.scaleup.topology}); try algo='auto'")
    return t + base, algo


def collective_time(c: Collective, gpu: GPU, algo: str = "auto", eff: float = 1.0,
                    su_eff: float | None = None) -> float:
    """Seconds of collective c on gpu with the given algorithm ('auto': fastest valid)."""
    return collective_estimate(c, gpu, algo, eff, su_eff)[0]


def ring_time(c: Collective, gpu: GPU) -> float:
    """Ring algorithm on the scale-up fabric (or the NICs when span is 'inter')."""
    return collective_estimate(c, gpu, "ring")[0]


def valid_algos(c: Collective, gpu: GPU) -> list[str]:
    """Algorithms that can run collective c on gpu."""
    fn = _intra if c.span == "intra" else _inter
    return [a for a in ALGOS if fn(c, gpu, a, 1.0, 1.0) < _INF]


# ------------------------------------------------------------------------------------- measured tables
# A GPU with a published table of measured collective times (cost/data/collectives/<gpu>.csv, source in
# the file's header) is priced from it where the table covers the collective (kind and rank count):
# log-log interpolation in S between measured sizes, the smallest size's time below it (a latency floor),
# the largest size's bandwidth above it. Everything else keeps the alpha-beta model above.

def _table_file(gpu_name: str):
    from importlib import resources
    from pathlib import Path

    from c3kit.hw.catalog import get_gpu

    try:
        name = get_gpu(gpu_name).name
    except Exception:  # an uncatalogued GPU has no table
        return None
    p = Path(str(resources.files("c3kit.cost").joinpath("data", "collectives", f"{name.lower()}.csv")))
    return p if p.is_file() else None


_TABLES: dict[str, dict] = {}


def measured_table(gpu_name: str) -> dict:
    """{(kind, ranks): (sizes ascending, times)} of a GPU's measured collective table ({} when none)."""
    hit = _TABLES.get(gpu_name)
    if hit is not None:
        return hit
    out: dict = {}
    p = _table_file(gpu_name)
    if p is not None:
        import csv

        rows: dict = {}
        with open(p, newline="") as f:
            for r in csv.DictReader(line for line in f if not line.startswith("#")):
                rows.setdefault((r["kind"], int(r["ranks"])), []).append((float(r["bytes"]), float(r["time_s"])))
        for key, pts in rows.items():
            pts.sort()
            out[key] = (tuple(s for s, _ in pts), tuple(t for _, t in pts))
    _TABLES[gpu_name] = out
    return out


def measured_time(kind: str, ranks: int, nbytes: float, gpu_name: str) -> float | None:
    """Seconds of one collective of S = nbytes on `ranks` GPUs of one node from the GPU's measured table, or None."""
    tab = measured_table(gpu_name).get((kind, int(ranks)))
    if tab is None or nbytes <= 0:
        return None
    sizes, times = tab
    if nbytes <= sizes[0]:
        return times[0]
    if nbytes >= sizes[-1]:
        return times[-1] * nbytes / sizes[-1]
    import bisect

    i = bisect.bisect_right(sizes, nbytes)
    s0, s1, t0, t1 = sizes[i - 1], sizes[i], times[i - 1], times[i]
    w = math.log(nbytes / s0) / math.log(s1 / s0)
    return math.exp(math.log(t0) + w * math.log(t1 / t0))
