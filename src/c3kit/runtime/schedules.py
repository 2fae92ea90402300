"""Schedule and comm-backend names of the runtime, and how "auto" resolves to a concrete schedule.

serial: the whole collective, then the whole GEMM (the unoverlapped reference of every op).
ring:   shard-level overlap; one peer's shard per step (P2P ring), GEMM on the shard in hand while
        the next one moves.
ficco:  finer grain (FiCCO); each shard is split into `splits` pieces (default: the group size) and
        each step moves piece j of every peer's shard over all links at once, GEMM on the step in hand.
auto:   asks the overlap heuristic (c3kit.overlap.select) when that exists; else `fallback_schedule`:
        serial below 1 MB moved per rank, ficco when every piece keeps >= 512 rows, else ring.
"""

from __future__ import annotations

from functools import lru_cache

from c3kit.errors import RuntimeSetupError

SCHEDULES = ("serial", "ring", "ficco", "auto")
CONCRETE = ("serial", "ring", "ficco")
BACKENDS = ("nccl", "copy-engine", "gloo")

# Fallback rule (used when the overlap heuristic is not importable): below this many bytes moved per
# rank the launch and synchronisation costs of extra steps exceed what overlap can hide.
SMALL_COMM_BYTES = 1 << 20
# FiCCO pays a further split of every shard; only worth it when each piece still fills the GPU.
FICCO_MIN_ROWS_PER_PIECE = 512


def fallback_schedule(op: str, m: int, n: int, k: int, world: int, elem_bytes: int) -> str:
    """Schedule picked when c3kit.overlap.select is missing: serial if tiny, ficco if pieces stay big, else ring."""
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


@lru_cache(maxsize=4096)
def heuristic_schedule(op: str, m: int, n: int, k: int, world: int, elem_bytes: int, gpu: str = "H200-SXM",
                       experts: int = 0) -> str | None:
    """The overlap engine's pick (c3kit.overlap.select) mapped to a runtime schedule; None if unavailable."""
    try:
        from c3kit.overlap import OverlapProblem, select
    except ImportError:
        return None
    try:
        prob = OverlapProblem(_PATTERN.get(op, "ag_gemm"), m, n, k, dtype=_DTYPE.get(elem_bytes, "bf16"), gpus=world,
                              experts=experts or (world if op == "moe" else 0))
        picked = select(prob, gpu)
    except Exception:  # noqa: BLE001 - the heuristic cannot price this case: the fallback rule decides
        return None
    name = picked[0] if isinstance(picked, tuple) else picked
    name = str(getattr(name, "name", name)).lower()
    family = name.split("-")[0]
    # The runtime has no fused (track-and-trigger) kernels: the nearest runtime schedule is ring.
    return {"serial": "serial", "bulk": "serial", "ring": "ring", "ficco": "ficco", "fused": "ring"}.get(family)


def resolve_schedule(schedule: str, op: str, m: int, n: int, k: int, world: int, elem_bytes: int,
                     backend: str = "nccl", gpu: str = "H200-SXM", experts: int = 0) -> str:
    """A concrete schedule for `schedule` (maybe "auto") and an op of global sizes m, n, k over `world` ranks.

    "auto" asks c3kit.overlap.select for the GPU named `gpu` (the H200-SXM when running on the CPU) and
    uses `fallback_schedule` when the heuristic is missing or cannot price the case.
    """
    check_schedule(schedule)
    if schedule != "auto":
        return schedule
    if world <= 1:
        return "serial"
    picked = heuristic_schedule(op, m, n, k, world, elem_bytes, gpu, experts)
    return picked or fallback_schedule(op, m, n, k, world, elem_bytes)


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
