"""Schedule and comm-backend names of the runtime, and how "auto" resolves to a concrete schedule.

serial: the whole collective, then the whole GEMM (the unoverlapped reference of every op).
ring:   shard-level overlap; one peer's shard per step (P2P ring), GEMM on the shard in hand while
        the next one moves.
ficco:  finer grain (FiCCO); each shard is split into `splits` pieces (default: the group size) and
        each step moves piece j of every peer's shard over all links at once, GEMM on the step in hand.
auto:   asks the overlap selector (c3kit.overlap.select) to choose among the schedules the runtime
        realizes on the comm backend (REALIZED); choose_auto also says what the selector would have
        picked over all schedules when the runtime cannot realize it. Only ops the engine cannot price
        (sizes that do not divide) use `fallback_schedule`: serial below 1 MB moved per rank, ficco
        when every piece keeps >= 512 rows, else ring.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from c3kit.errors import RuntimeSetupError

SCHEDULES = ("serial", "ring", "ficco", "auto")
CONCRETE = ("serial", "ring", "ficco")
BACKENDS = ("nccl", "copy-engine", "gloo")

# Fallback rule (ops the overlap engine cannot price): below this many bytes moved per
# rank the launch and synchronisation costs of extra steps exceed what overlap can hide.
SMALL_COMM_BYTES = 1 << 20
# FiCCO pays a further split of every shard; only worth it when each piece still fills the GPU.
FICCO_MIN_ROWS_PER_PIECE = 512


def fallback_schedule(op: str, m: int, n: int, k: int, world: int, elem_bytes: int) -> str:
    """Schedule for an op the overlap engine cannot price: serial if tiny, ficco if pieces stay big, else ring."""
    if world <= 1:
        return "serial"
    comm_bytes = {"all_gather_matmul": m * k, "matmul_reduce_scatter": m * n, "moe": m * k}.get(op, m * k)
    comm_bytes *= elem_bytes
    if comm_bytes < SMALL_COMM_BYTES:
        return "serial"
    rows_per_piece = m // (world * world)
    return "ficco" if rows_per_piece >= FICCO_MIN_ROWS_PER_PIECE else "ring"


_PATTERN = {"all_gather_matmul": "ag_gemm", "matmul_reduce_scatter": "gemm_rs", "moe": "moe"}
_DTYPE = {1: "fp8", 2: "bf16", 4: "fp32"}

# What this runtime realizes, as c3kit.overlap schedule names, per comm backend: the selector is asked
# to choose among exactly these (no name mapping after the fact). nccl / gloo move data with SM kernels,
# copy-engine with DMA engines; priority streams, SM partitions and fused kernels are not implemented.
REALIZED = {
    "nccl": {"serial": "serial", "ring-sm": "ring", "ficco-sm": "ficco"},
    "gloo": {"serial": "serial", "ring-sm": "ring", "ficco-sm": "ficco"},
    "copy-engine": {"serial": "serial", "ring-dma": "ring", "ficco-dma": "ficco"},
}


@dataclass(frozen=True)
class AutoChoice:
    """What "auto" resolved to: the runtime schedule, the selector's pick among what the runtime realizes,
    the selector's pick among every schedule, and a note on what the runtime could not realize."""

    schedule: str  # serial, ring or ficco
    engine_schedule: str  # the c3kit.overlap name the runtime runs ("" when the engine could not price it)
    engine_best: str  # the selector's pick over all realizable schedules
    note: str


@lru_cache(maxsize=4096)
def choose_auto(op: str, m: int, n: int, k: int, world: int, elem_bytes: int, backend: str = "nccl",
                gpu: str = "H200-SXM", experts: int = 0) -> AutoChoice:
    """Ask c3kit.overlap.select (the same selector as `c3kit analyze --overlap auto`) for an op of global sizes
    m, n, k over `world` ranks, among the schedules this runtime realizes on `backend`."""
    from c3kit.errors import OverlapError
    from c3kit.overlap import OverlapProblem, select

    check_backend(backend)
    if world <= 1:
        return AutoChoice("serial", "serial", "serial", "one rank: nothing to overlap")
    realized = REALIZED[backend]
    try:
        prob = OverlapProblem(_PATTERN.get(op, "ag_gemm"), m, n, k, dtype=_DTYPE.get(elem_bytes, "bf16"), gpus=world,
                              experts=experts or (world if op == "moe" else 0))
        pick, _ = select(prob, gpu, candidates=tuple(realized))
        best, _ = select(prob, gpu)
    except OverlapError as e:
        rule = fallback_schedule(op, m, n, k, world, elem_bytes)
        return AutoChoice(rule, "", "", f"the overlap engine cannot price this op ({e}); size rule: {rule}")
    note = "" if best == pick else (f"the selector's pick over all schedules is {best}, which this runtime does not "
                                    f"realize on {backend}; ran {pick}, its pick among {', '.join(realized)}")
    return AutoChoice(realized[pick], pick, best, note)


def resolve_schedule(schedule: str, op: str, m: int, n: int, k: int, world: int, elem_bytes: int,
                     backend: str = "nccl", gpu: str = "H200-SXM", experts: int = 0) -> str:
    """A concrete schedule for `schedule` (maybe "auto") and an op of global sizes m, n, k over `world` ranks.

    "auto" asks c3kit.overlap.select (choose_auto) for the GPU named `gpu` (the H200-SXM when running on
    the CPU), among the schedules the runtime realizes on `backend`.
    """
    check_schedule(schedule)
    if schedule != "auto":
        return schedule
    return choose_auto(op, m, n, k, world, elem_bytes, backend, gpu, experts).schedule


def check_schedule(schedule: str) -> str:
    """Validate a schedule name (serial, ring, ficco or auto)."""
    if schedule not in SCHEDULES:
        raise RuntimeSetupError(f"unknown schedule {schedule!r}: use one of {', '.join(SCHEDULES)}")
    return schedule


def check_backend(comm: str) -> str:
    """Validate a comm backend name."""
    if comm not in BACKENDS:
        raise RuntimeSetupError(f"unknown comm backend {comm!r}: use one of {', '.join(BACKENDS)}")
    return comm
