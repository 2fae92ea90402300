"""The calibration store: the one module that knows where calibration files live and how they are named.

Layout: <root>/<stem>-<kind>[-<variant>].json (op-level files: <root>/<stem>-ops-<family>.json), stem = calib_stem(GPU name) ('H200-SXM' -> 'h200-sxm').
The shipped files are in calib_dir() (the package's cost/data/calib folder); `c3kit bench` writes to
OUT_DIR (c3kit-out/calib) unless told otherwise. A variant is a companion of a calibration file:
'steady' (steady-state GEMM timings), 'split', 'sentinel', 'holdout', 'odd', 'workload' (other
GEMM sets of one run), 'fit' (the stored curve fit of a gemm table), 'multi' (c3 measured over ranks);
kind 'ops' has one variant per op family of runtime/bench/ops.py ('memory', 'attention', 'floor', ...).

Format (docs/CONVENTIONS.md):
    {"meta": {"machine", "gpu", "driver", "torch", "cuda", "date", "command", "script"},
     "kind": "gemm" | "c3" | "comm" | "overlap" | "contention" | "dma",
     "columns": [...], "rows": [[...], ...]}
Everyone else reads and writes calibration files through these functions.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

from c3kit.errors import CostError

OUT_DIR = Path("c3kit-out") / "calib"

KINDS = ("gemm", "c3", "comm", "overlap", "contention", "dma", "ops")
META_KEYS = ("machine", "gpu", "driver", "torch", "cuda", "date", "command", "script")
REQUIRED_COLUMNS = {"gemm": ("m", "n", "k", "dtype", "time_s")}


def calib_dir() -> Path:
    """The shipped calibration folder, src/c3kit/cost/data/calib."""
    return Path(str(resources.files("c3kit.cost"))) / "data" / "calib"


def calib_stem(gpu_name: str) -> str:
    """File-name form of a GPU name: lower case, runs of other characters as '-' ('H200-SXM' -> 'h200-sxm')."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


def calibration_path(gpu_name: str, kind: str, root: str | Path | None = None, variant: str = "") -> Path:
    """Where the calibration file of a GPU and kind (and variant) lives (root defaults to the shipped folder)."""
    _check_kind(kind)
    return Path(root or calib_dir()) / f"{calib_stem(gpu_name)}-{kind}{'-' + variant if variant else ''}.json"


# the op-level families the cost model fits (cost/opclass.py, cost/gemmclass.py)
OP_FAMILIES = ("memory", "eager_ops", "optimizer", "attention", "attn_backends", "decode_attention", "floor", "gemm",
               "decode_kernels", "moe_train", "optimizer_mix", "act_chunked", "moe_grad", "gemm_under_comm",
               "attn_graph", "attn_graph_cudnn", "attn_graph_efficient", "memory_graph", "fp8_mm")


def op_calibration_path(gpu_name: str, family: str, root: str | Path | None = None) -> Path:
    """Where the op-level calibration file of a GPU and op family lives ('<stem>-ops-<family>.json')."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", family):
        raise CostError(f"op family {family!r} is not a lower-case name (e.g. {', '.join(OP_FAMILIES)})")
    return Path(root or calib_dir()) / f"{calib_stem(gpu_name)}-ops-{family}.json"


def op_rows(path: str | Path) -> list[dict]:
    """The rows of an op-level calibration file (kind 'ops-<family>') as dicts keyed by its columns."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
        return [dict(zip(doc["columns"], r)) for r in doc["rows"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CostError(f"{path.name}: not a readable op calibration file ({e})") from None


def measured_run_path(gpu_name: str, what: str, root: str | Path) -> Path:
    """Where a GPU's measured whole-run checks (e.g. 'serve-loop', 'train-step') live under root; checks, not fits."""
    if not re.fullmatch(r"[a-z][a-z0-9-]*", what):
        raise CostError(f"measured run {what!r} is not a lower-case name (e.g. serve-loop, train-step)")
    return Path(root) / f"{calib_stem(gpu_name)}-{what}.json"


def serve_loop_path(gpu_name: str, root: str | Path) -> Path:
    """Where a GPU's measured serving-loop iterations live under root."""
    return measured_run_path(gpu_name, "serve-loop", root)


def transfers_path() -> Path:
    """The shipped calibration transfers file (cost/data/transfers.toml: which GPU borrows whose measurements)."""
    return Path(str(resources.files("c3kit.cost"))) / "data" / "transfers.toml"


def published_ops_dir() -> Path:
    """The shipped published op-level rows (cost/data/published_ops: one TOML file per catalog GPU, each row
    with its source and the file with its retrieval date; read by cost/published.py)."""
    return Path(str(resources.files("c3kit.cost"))) / "data" / "published_ops"


def shipped_name(path: str | Path) -> str:
    """A shipped data file's path from the package's cost folder ('cost/data/calib/h200-sxm-gemm.json'), for
    reports that cite it."""
    root = Path(str(resources.files("c3kit.cost"))).parent
    return Path(path).resolve().relative_to(root.resolve()).as_posix()


def variant_path(path: str | Path, variant: str, kind: str | None = None) -> Path:
    """A companion file beside a calibration file: '<stem>-gemm.json' -> '<stem>-gemm-<variant>.json'.

    With kind, the companion is of that kind instead: variant_path('<stem>-comm.json', '', 'dma') ->
    '<stem>-dma.json'; variant_path('<stem>-comm.json', 'multi', 'c3') -> '<stem>-c3-multi.json'.
    """
    p = Path(path)
    stem = p.name.removesuffix(".json")
    if kind is not None:
        _check_kind(kind)
        base = re.sub(r"-(" + "|".join(KINDS) + r")$", "", stem)
        stem = f"{base}-{kind}"
    return p.with_name(f"{stem}{'-' + variant if variant else ''}.json")


def out_path(stem: str, kind: str) -> Path:
    """The default file `c3kit bench` writes for a device stem and kind (OUT_DIR/<stem>-<kind>.json)."""
    return calibration_path(stem, kind, OUT_DIR)


def find_calibration(gpu_name: str, kind: str, root: str | Path | None = None, variant: str = "") -> Path | None:
    """The existing calibration file of a GPU (its catalog name first when gpu_name is an alias), or None."""
    _check_kind(kind)
    names = [gpu_name]
    try:
        from c3kit.hw.catalog import get_gpu

        canonical = get_gpu(gpu_name).name
        if canonical != gpu_name:
            names.insert(0, canonical)
    except Exception:  # an uncatalogued name is still a valid file stem
        pass
    for nm in names:
        p = calibration_path(nm, kind, root, variant)
        if p.is_file():
            return p
    return None


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise CostError(f"unknown calibration kind {kind!r}: use one of {', '.join(KINDS)}")


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v


def validate_calibration(doc: Mapping, origin: str = "<calibration>") -> None:
    """Check a calibration document's shape (keys, kind, columns, row widths, gemm values); raise CostError."""
    for key in ("meta", "kind", "columns", "rows"):
        if key not in doc:
            raise CostError(f"{origin}: calibration document lacks {key!r}")
    _check_kind(doc["kind"])
    cols = list(doc["columns"])
    if len(set(cols)) != len(cols):
        raise CostError(f"{origin}: duplicate column names in {cols}")
    need = [c for c in REQUIRED_COLUMNS.get(doc["kind"], ()) if c not in cols]
    if need:
        raise CostError(f"{origin}: a {doc['kind']} table needs columns {', '.join(need)} (has {cols})")
    bad = [i for i, r in enumerate(doc["rows"]) if len(r) != len(cols)]
    if bad:
        raise CostError(f"{origin}: rows {bad[:5]} do not have {len(cols)} values")
    if doc["kind"] == "gemm":
        ix = {c: cols.index(c) for c in ("m", "n", "k", "time_s")}
        for i, r in enumerate(doc["rows"]):
            try:
                vals = [float(r[ix[c]]) for c in ("m", "n", "k", "time_s")]
            except (TypeError, ValueError):
                raise CostError(f"{origin}: row {i} has a non-numeric m, n, k or time_s: {r}") from None
            if min(vals) <= 0 or not all(math.isfinite(v) for v in vals):
                raise CostError(f"{origin}: row {i} needs positive finite m, n, k and time_s: {r}")


def write_calibration(path: str | Path, kind: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                      meta: Mapping) -> Path:
    """Write a calibration file atomically (validated; missing meta keys become null, date defaults to now)."""
    meta = dict(meta or {})
    for key in META_KEYS:
        meta.setdefault(key, None)
    if meta["date"] is None:
        meta["date"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    doc = {"meta": meta, "kind": kind, "columns": list(columns),
           "rows": [[_plain(v) for v in r] for r in rows]}
    validate_calibration(doc, str(path))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(path)
    return path


def read_calibration(path: str | Path) -> dict:
    """Read and validate one calibration file."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CostError(f"{path}: not a readable calibration file ({e})") from None
    if not isinstance(doc, dict):
        raise CostError(f"{path}: a calibration file holds one JSON object")
    validate_calibration(doc, str(path))
    return doc




def gemm_columns(doc: Mapping, origin: str = "<calibration>") -> tuple[list, list, list, list | None, list, list]:
    """(m, n, k, batch or None, dtype, time_s) columns of a calibration document of kind 'gemm' (validated)."""
    validate_calibration(doc, origin)
    if doc["kind"] != "gemm":
        raise CostError(f"{origin}: kind is {doc['kind']!r}, a GEMM table needs kind 'gemm'")
    cols = list(doc["columns"])
    col = {c: [r[cols.index(c)] for r in doc["rows"]] for c in cols}
    return col["m"], col["n"], col["k"], col.get("batch"), col["dtype"], col["time_s"]
