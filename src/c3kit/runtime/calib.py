"""Calibration files as docs/CONVENTIONS.md defines them, and the machine metadata they carry."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from c3kit.errors import RuntimeSetupError

KINDS = ("gemm", "c3", "comm", "overlap", "contention", "dma")


def _driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def machine_meta(command: Sequence[str] | str | None = None, script: str = "") -> dict[str, str]:
    """meta block of a calibration file: machine, GPU, driver, torch and CUDA versions, UTC date, command, script."""
    gpu, torch_v, cuda_v = "cpu", "none", "none"
    try:
        import torch

        torch_v = torch.__version__
        cuda_v = torch.version.cuda or "none"
        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    if command is None:
        command = sys.argv
    if not isinstance(command, str):
        command = shlex.join([str(c) for c in command])
    return {
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()})",
        "gpu": gpu,
        "driver": _driver_version() if gpu != "cpu" else "none",
        "torch": torch_v,
        "cuda": cuda_v,
        "date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "command": command,
        "script": script,
    }


def _local_write(path: Path, kind: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], meta: dict) -> Path:
    # One row per line keeps large tables readable and diffable.
    head = json.dumps({"meta": dict(meta), "kind": kind, "columns": list(columns)}, indent=1)[:-2]
    body = ",\n".join("  " + json.dumps(list(r), allow_nan=False) for r in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(head + ',\n "rows": [\n' + body + "\n ]\n}\n")
    tmp.replace(path)
    return path


def _plain(o: Any) -> Any:
    """JSON-safe value: numpy/torch scalars to Python, NaN and infinities to None."""
    if hasattr(o, "item"):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def write_calibration(path: str | Path, kind: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                      meta: dict) -> Path:
    """Write a calibration file, through c3kit.cost.table.write_calibration when the cost layer provides it."""
    if kind not in KINDS:
        raise RuntimeSetupError(f"unknown calibration kind {kind!r}: use one of {', '.join(KINDS)}")
    width = len(columns)
    bad = [i for i, r in enumerate(rows) if len(r) != width]
    if bad:
        raise RuntimeSetupError(f"calibration rows {bad[:5]} do not have {width} values (columns {list(columns)})")
    path = Path(path)
    rows = [[_plain(v) for v in r] for r in rows]
    try:
        from c3kit.cost.table import write_calibration as cost_write  # the cost layer's writer, once it exists
    except ImportError:
        cost_write = None
    if cost_write is not None:
        try:
            cost_write(path, kind=kind, columns=list(columns), rows=rows, meta=meta)
            if path.is_file():
                return path
        except TypeError:
            pass
    return _local_write(path, kind, columns, rows, meta)


def read_calibration(path: str | Path) -> dict:
    """Read a calibration file into its dict (meta, kind, columns, rows), checking its shape."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise RuntimeSetupError(f"{path}: not a readable calibration file ({e})") from None
    for key in ("meta", "kind", "columns", "rows"):
        if key not in doc:
            raise RuntimeSetupError(f"{path}: calibration file lacks {key!r}")
    return doc
