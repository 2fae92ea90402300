"""Where each op class's parameters come from on a GPU: its own measurements, a documented transfer
from another GPU (cost/data/transfers.toml), a projection of a measured GPU, or its datasheet.

Every report that prices ops on a GPU can say, per op class, `basis(gpu)[op_class]`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache

OP_CLASSES = ("gemm", "attention", "memory", "floor", "collective",
              "gemm_small_m", "gemm_grouped", "gemm_fp8", "fp8_cast")  # the last four: cost/gemmclass.py


@dataclass(frozen=True)
class Transfer:
    """A GPU priced with another GPU's measurements for some op classes, and why."""

    gpu: str
    source: str
    classes: tuple[str, ...]
    reason: str


@lru_cache(maxsize=1)
def transfers() -> dict[str, Transfer]:
    """The shipped calibration transfers by GPU name."""
    from c3kit.cost.calib_store import transfers_path

    text = transfers_path().read_text(encoding="utf-8")
    doc = tomllib.loads(text)
    return {name: Transfer(name, t["from"], tuple(t["classes"]), t["reason"])
            for name, t in doc.get("transfer", {}).items()}


def catalog_name(gpu_name: str) -> str:
    """The catalog GPU under a projection ('H200-SXM+2g(historical)' -> 'H200-SXM')."""
    from c3kit.hw.future import base_name

    return base_name(gpu_name)


@lru_cache(maxsize=256)
def _measured(gpu_name: str, op_class: str) -> bool:
    from c3kit.cost.calib_store import calibration_path, op_calibration_path

    from c3kit.cost.gemmclass import GEMM_CLASSES, has_kind

    if op_class in GEMM_CLASSES:
        return has_kind(gpu_name, op_class)
    if op_class in ("gemm", "collective"):
        path = calibration_path(gpu_name, "gemm" if op_class == "gemm" else "comm")
    else:
        path = op_calibration_path(gpu_name, op_class)
    return path.is_file()


def source_gpu(gpu_name: str, op_class: str) -> str | None:
    """The catalog GPU whose measurements price this op class on gpu_name (None: datasheet)."""
    base = catalog_name(gpu_name)
    if _measured(base, op_class):
        return base
    t = transfers().get(base)
    if t is not None and op_class in t.classes and _measured(t.source, op_class):
        return t.source
    return None


def basis(gpu_name: str) -> dict[str, str]:
    """op class -> "measured" | "transferred from X" | "projected from X" | "datasheet" on this GPU."""
    base = catalog_name(gpu_name)
    out = {}
    for c in OP_CLASSES:
        src = source_gpu(gpu_name, c)
        if src is None:
            out[c] = "datasheet"
        elif src != base:
            out[c] = f"transferred from {src}" + ("" if base == gpu_name else f", projected to {gpu_name}")
        elif base != gpu_name:
            out[c] = f"projected from {src}"
        else:
            out[c] = "measured"
    return out
