"""Where each op class's parameters come from on a GPU: its own measurements, a documented transfer
from another GPU (cost/data/transfers.toml), a projection of a measured GPU, published op-level
microbenchmarks (cost/published.py, cost/data/published_ops), or its datasheet.

Every report that prices ops on a GPU can say, per op class, `basis(gpu)[op_class]`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache

# GEMM classes (cost/gemmclass.py) and the kind of row each is fitted to, in the ops-gemm file unless
# GEMM_CLASS_FAMILY names another op family
GEMM_CLASSES = {"gemm_small_m": "small_m", "gemm_grouped": "grouped_mm", "gemm_fp8": "fp8_tensorwise",
                "fp8_cast": "fp8_cast"}
GEMM_CLASS_FAMILY = {"gemm_fp8": "fp8_mm"}
# all-reduces are class collective; all-to-alls, all-gathers and reduce-scatters have classes of their own, whose
# published level may differ from the all-reduce's (cost/published.FIT_KINDS)
COLLECTIVE_CLASSES = ("collective", "collective_a2a", "collective_ag", "collective_rs")
OP_CLASSES = ("gemm", "attention", "memory", "floor", "collective", *GEMM_CLASSES, *COLLECTIVE_CLASSES[1:])


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

    if op_class in GEMM_CLASSES:
        return GEMM_CLASSES[op_class] in _ops_gemm_kinds(gpu_name, GEMM_CLASS_FAMILY.get(op_class, "gemm"))
    if op_class == "gemm" or op_class in COLLECTIVE_CLASSES:
        path = calibration_path(gpu_name, "gemm" if op_class == "gemm" else "comm")
    else:
        path = op_calibration_path(gpu_name, op_class)
    return path.is_file()


@lru_cache(maxsize=64)
def _ops_gemm_kinds(gpu_name: str, family: str = "gemm") -> frozenset:
    """The row kinds of a GPU's shipped ops file of a GEMM family (empty when it has none)."""
    import json

    from c3kit.cost.calib_store import op_calibration_path

    p = op_calibration_path(gpu_name, family)
    if not p.is_file():
        return frozenset()
    doc = json.loads(p.read_text())
    i = list(doc["columns"]).index("kind")
    return frozenset(r[i] for r in doc["rows"])


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
    """op class -> "measured" | "transferred from X" | "projected from X" | "published microbenchmark" |
    "datasheet" on this GPU (published rows price a class only where no measurement or transfer does)."""
    from c3kit.cost.published import PUBLISHED, published_classes

    base = catalog_name(gpu_name)
    published = published_classes(base)
    out = {}
    for c in OP_CLASSES:
        src = source_gpu(gpu_name, c)
        if src is None and c in published:
            out[c] = PUBLISHED + ("" if base == gpu_name else f", projected to {gpu_name}")
        elif src is None:
            out[c] = "datasheet"
        elif src != base:
            out[c] = f"transferred from {src}" + ("" if base == gpu_name else f", projected to {gpu_name}")
        elif base != gpu_name:
            out[c] = f"projected from {src}"
        else:
            out[c] = "measured"
    return out


DATASHEET = "catalog datasheet (c3kit.hw) x the cost model's assumed efficiencies (cost/model.py)"


def basis_sources(gpu_name: str) -> dict[str, str]:
    """op class -> where its parameters come from on this GPU, for the label basis() gives: the calibration
    file(s) measured, the transfer's reason, the published rows' sources with their retrieval date, or the
    datasheet."""
    from c3kit.cost.calib_store import calibration_path, op_calibration_path, published_ops_dir, shipped_name, \
        transfers_path
    from c3kit.cost.published import published_ops

    base = catalog_name(gpu_name)
    labels = basis(gpu_name)
    ops = published_ops(base)
    out = {}
    for c, label in labels.items():
        src = source_gpu(gpu_name, c)
        if src is not None:
            if c in GEMM_CLASSES or c == "gemm":
                path = (op_calibration_path(src, GEMM_CLASS_FAMILY.get(c, "gemm")) if c in GEMM_CLASSES
                        else calibration_path(src, "gemm"))
            elif c in COLLECTIVE_CLASSES:
                path = calibration_path(src, "comm")
            else:
                path = op_calibration_path(src, c)
            where = shipped_name(path)
            out[c] = where if src == base else f"{where} by {shipped_name(transfers_path())}: {transfers()[base].reason}"
        elif label.startswith("published"):
            file = shipped_name(published_ops_dir() / ops.origin)
            out[c] = f"{'; '.join(ops.sources(c))} ({file})"
        else:
            out[c] = DATASHEET
    return out
