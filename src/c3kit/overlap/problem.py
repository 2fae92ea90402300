"""One compute/communication pair to overlap: its pattern and sizes, as seen by one GPU of the group."""

from __future__ import annotations

from dataclasses import dataclass

from c3kit.errors import HardwareError, OverlapError
from c3kit.hw.model import DTYPE_BYTES, dtype_bytes

PATTERNS = {
    "ag_gemm": "all-gather A (rows sharded over the GPUs) -> GEMM C[m,n] = A[m,k] B[k,n]",
    "gemm_rs": "GEMM C[m,n] = A[m,k] B[k,n] (partial sums, K sharded) -> reduce-scatter C over rows",
    "gemm_ar": "GEMM C[m,n] = A[m,k] B[k,n] (partial sums) -> all-reduce C",
    "moe": "all-to-all dispatch of m token rows [m,k] -> grouped GEMM over the local experts -> all-to-all combine [m,n]",
    "bulk": "an independent GEMM [m,n,k] || a collective of comm_bytes (no dependency)",
}
ALIASES = {"ag-gemm": "ag_gemm", "allgather-gemm": "ag_gemm", "all_gather_gemm": "ag_gemm",
           "gemm-rs": "gemm_rs", "gemm_reduce_scatter": "gemm_rs", "gemm-ar": "gemm_ar",
           "gemm_all_reduce": "gemm_ar", "a2a_gemm_a2a": "moe", "independent": "bulk"}
BULK_COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")


@dataclass(frozen=True)
class OverlapProblem:
    """A dependent (or independent) GEMM + collective on `gpus` GPUs of one node; sizes per GPU.

    ag_gemm: m = gathered rows (m/gpus per GPU before the gather), n, k = this GPU's GEMM.
    gemm_rs / gemm_ar: the GEMM m x n x k on each GPU produces partial sums C[m, n]; RS leaves m/gpus rows.
    moe: m = token rows this GPU routes (after top-k), k = model dim in, n = dim out, experts in total
         (experts / gpus local); balanced routing; one grouped GEMM stands for the expert FFN.
    bulk: a GEMM m x n x k and an unrelated collective `collective` of comm_bytes (default m*n*dtype).
    """

    pattern: str
    m: int
    n: int
    k: int
    dtype: str = "bf16"
    gpus: int = 8
    experts: int = 0
    collective: str = "all_reduce"
    comm_bytes: float = 0.0

    def __post_init__(self) -> None:
        pat = ALIASES.get(self.pattern.lower().replace(" ", ""), self.pattern.lower())
        if pat not in PATTERNS:
            raise OverlapError(f"unknown pattern {self.pattern!r}: use one of {', '.join(PATTERNS)}")
        object.__setattr__(self, "pattern", pat)
        for name in ("m", "n", "k", "gpus"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise OverlapError(f"{name} must be a positive integer, got {v!r}")
        if self.gpus < 2:
            raise OverlapError("gpus must be at least 2: one GPU has nothing to communicate")
        try:
            dtype_bytes(self.dtype)
        except HardwareError:
            raise OverlapError(f"unknown dtype {self.dtype!r}: use one of {', '.join(DTYPE_BYTES)}") from None
        if pat in ("ag_gemm", "gemm_rs", "gemm_ar") and self.m % self.gpus:
            raise OverlapError(f"m = {self.m} does not divide by gpus = {self.gpus}: the rows are sharded over the GPUs; "
                               f"pad m to a multiple of {self.gpus}")
        if pat == "moe":
            if self.experts <= 0:
                raise OverlapError("the moe pattern needs --experts (total experts, a multiple of gpus)")
            if self.experts % self.gpus:
                raise OverlapError(f"experts = {self.experts} does not divide by gpus = {self.gpus}")
            if self.m % self.gpus:
                raise OverlapError(f"m = {self.m} token rows do not divide by gpus = {self.gpus}")
        if pat == "bulk":
            if self.collective not in BULK_COLLECTIVES:
                raise OverlapError(f"unknown collective {self.collective!r}: use one of {', '.join(BULK_COLLECTIVES)}")
            if self.comm_bytes < 0:
                raise OverlapError("comm_bytes must be non-negative")
            if self.comm_bytes == 0:
                object.__setattr__(self, "comm_bytes", float(self.m * self.n * dtype_bytes(self.dtype)))

    @property
    def elem_bytes(self) -> int:
        """Bytes per element of the dtype."""
        return dtype_bytes(self.dtype)

    @property
    def flops(self) -> float:
        """FLOPs of this GPU's GEMM (all local experts for moe)."""
        return 2.0 * self.m * self.n * self.k

    def collective_bytes(self) -> float:
        """S of nccl-tests for the pattern's collective (the dispatch all-to-all for moe)."""
        b = self.elem_bytes
        if self.pattern == "ag_gemm":
            return float(self.m * self.k * b)
        if self.pattern in ("gemm_rs", "gemm_ar"):
            return float(self.m * self.n * b)
        if self.pattern == "moe":
            return float(self.m * self.k * b)
        return float(self.comm_bytes)

    def label(self) -> str:
        """A short human-readable description."""
        extra = f" E={self.experts}" if self.pattern == "moe" else (
            f" {self.collective} {self.comm_bytes:.3g} B" if self.pattern == "bulk" else "")
        return f"{self.pattern} m={self.m} n={self.n} k={self.k} {self.dtype} x{self.gpus}{extra}"

    def to_dict(self) -> dict:
        """Plain data."""
        return {"pattern": self.pattern, "m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype, "gpus": self.gpus,
                "experts": self.experts, "collective": self.collective, "comm_bytes": self.comm_bytes}
