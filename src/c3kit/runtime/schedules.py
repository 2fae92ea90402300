"""Schedule and comm-backend names of the runtime, and how "auto" resolves to a concrete schedule.

serial: the whole collective, then the whole GEMM (the unoverlapped reference of every op).
ring:   shard-level overlap; one peer's shard per step (P2P ring), GEMM on the shard in hand while
        the next one moves.
ficco:  finer grain (FiCCO); each shard is split into `splits` pieces (default: the group size) and
        each step moves piece j of every peer's shard over all links at once, GEMM on the step in hand.
auto:   asks c3kit.overlap.select when that exists; else the fallback rule in `fallback_schedule`.
"""

from __future__ import annotations

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


def resolve_schedule(schedule: str, op: str, m: int, n: int, k: int, world: int, elem_bytes: int,
                     backend: str = "nccl") -> str:
    """A concrete schedule name for `schedule` (which may be "auto") and an op of global sizes m, n, k."""
    if schedule not in SCHEDULES:
        raise RuntimeSetupError(f"unknown schedule {schedule!r}: use one of {', '.join(SCHEDULES)}")
    if schedule != "auto":
        return schedule
    try:
        from c3kit.overlap import select  # the overlap engine's heuristic, when it has landed
    except ImportError:
        select = None
    if select is not None:
        try:
            picked = select(op=op, m=m, n=n, k=k, world=world, elem_bytes=elem_bytes, backend=backend)
        except TypeError:
            picked = None
        name = getattr(picked, "schedule", picked)
        name = getattr(name, "name", name)
        if isinstance(name, str):
            name = {"shard": "ring", "shard-p2p": "ring", "p2p": "ring", "finer": "ficco",
                    "fine": "ficco", "bulk": "serial"}.get(name.lower(), name.lower())
            if name in CONCRETE:
                return name
    return fallback_schedule(op, m, n, k, world, elem_bytes)


def check_backend(comm: str) -> str:
    """Validate a comm backend name."""
    if comm not in BACKENDS:
        raise RuntimeSetupError(f"unknown comm backend {comm!r}: use one of {', '.join(BACKENDS)}")
    return comm
