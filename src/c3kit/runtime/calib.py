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


def measured_run_main(argv: Sequence[str] | None, description: str, module: str, kind: str,
                      columns: Sequence[str], measure) -> int:
    """The command line of a whole-run benchmark (serving loop, training step): --out, --quick, --gpu, --script,
    --budget-s; runs measure(device, quick) and writes <gpu>-<kind>.json under --out."""
    import argparse
    import time

    from c3kit.cost.calib_store import measured_run_path
    from c3kit.runtime._torch import require_torch
    from c3kit.runtime.bench.timing import Budget

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpu", default="h200-sxm")
    ap.add_argument("--script", default=f"python -m {module}")
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="stop taking new cases after this")
    a = ap.parse_args(argv)
    torch = require_torch()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    Budget.deadline = t0 + a.budget_s
    rows = measure(device, a.quick)
    path = write_measurement(measured_run_path(a.gpu, kind, out), kind, columns, rows,
                             " ".join([f"python -m {module}"] + list(argv or sys.argv[1:])), a.script)
    print(f"{kind}: {len(rows)} rows in {time.perf_counter() - t0:.1f} s -> {path}", flush=True)
    return 0


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
