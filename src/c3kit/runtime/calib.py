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

from c3kit.cost.calib_store import KINDS
from c3kit.cost.calib_store import write_calibration as cost_write
from c3kit.errors import RuntimeSetupError


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


def _plain(o: Any) -> Any:
    """JSON-safe value: numpy/torch scalars to Python, NaN and infinities to None."""
    if hasattr(o, "item"):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def write_measurement(path: str | Path, kind: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                      command: str, script: str) -> Path:
    """Write one measurement file of the op benchmarks ({"meta", "kind", "columns", "rows"}; meta from
    machine_meta(command, script)): the ops-<family> files and the measured whole-run checks."""
    doc = {"meta": machine_meta(command, script), "kind": kind, "columns": list(columns),
           "rows": [[_plain(v) for v in r] for r in rows]}
    path = Path(path)
    path.write_text(json.dumps(doc) + "\n")
    return path


def write_calibration(path: str | Path, kind: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
                      meta: dict) -> Path:
    """Write a calibration file through the calibration store (kind and row widths checked here first)."""
    if kind not in KINDS:
        raise RuntimeSetupError(f"unknown calibration kind {kind!r}: use one of {', '.join(KINDS)}")
    width = len(columns)
    bad = [i for i, r in enumerate(rows) if len(r) != width]
    if bad:
        raise RuntimeSetupError(f"calibration rows {bad[:5]} do not have {width} values (columns {list(columns)})")
    return cost_write(Path(path), kind=kind, columns=list(columns), rows=[[_plain(v) for v in r] for r in rows],
                      meta=meta)
