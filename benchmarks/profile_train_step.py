"""Where a real training step's GPU time goes, kernel by kernel: torch.profiler over a few steps of the
single-GPU training step of c3kit.runtime.bench.train_step, written as per-event device time totals
(kernels, ATen ops and autograd nodes, with counts), so that each op class's share can be set beside c3kit's per-op rows.

Usage (on a GPU): python benchmarks/profile_train_step.py --out DIR [--quick]
Writes DIR/<gpu>-train-profile.json: {"meta", "kind", "columns", "rows"}; rows per (case, kernel).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CASES = [("llama-3.2-3b-8L", "fused", 2, 4096), ("llama-3.2-1b", "fused", 1, 8192), ("qwen2.5-7b-4L", "fused", 2, 4096)]
COLUMNS = ["model", "impl", "batch", "seq", "event", "on", "calls", "self_device_s", "total_device_s"]


def profile(device, quick: bool, steps: int = 3) -> list[list]:
    """Per-kernel device seconds per step for every case."""
    from c3kit.runtime._torch import require_torch
    from c3kit.runtime.bench import train_step as ts

    torch = require_torch()
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    rows = []
    for (name, impl, b, s) in (CASES if not quick else [("llama-3.2-1b", "fused", 1, 32)]):
        shape = ts.TRAIN_MODELS[name] if not quick else (2, 128, 4, 2, 32, 256, 1000)
        P = ts._params(torch, *shape, device)
        tokens = torch.randint(0, shape[-1], (b, s), device=device)
        hd = shape[4]
        pos = torch.arange(s, device=device, dtype=torch.float32)
        inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
        emb = torch.cat((torch.outer(pos, inv),) * 2, dim=-1)
        rot = (emb.cos().to(torch.bfloat16)[:, None, :], emb.sin().to(torch.bfloat16)[:, None, :])

        def step():
            ts._loss(torch, P, tokens, rot, shape, impl).backward()
            for t in ts._flat(P):
                t.grad = None
        for _ in range(2):
            step()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with tprofile(activities=acts) as prof:
            for _ in range(steps):
                step()
            if device.type == "cuda":
                torch.cuda.synchronize()
        for ev in prof.key_averages():
            if device.type == "cuda":
                self_d = getattr(ev, "self_device_time_total", 0.0)
                tot_d = getattr(ev, "device_time_total", 0.0)
            else:
                self_d, tot_d = ev.self_cpu_time_total, ev.cpu_time_total
            if tot_d > 0 or self_d > 0:
                rows.append([name, impl, b, s, ev.key[:200], ev.device_type.name, ev.count // steps,
                             self_d * 1e-6 / steps, tot_d * 1e-6 / steps])
        del P
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    """Profile the cases and write the per-kernel table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpu", default="h200-sxm")
    a = ap.parse_args(argv)
    from c3kit.cost.calib_store import measured_run_path
    from c3kit.runtime._torch import require_torch
    from c3kit.runtime.calib import write_measurement

    torch = require_torch()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    rows = profile(device, a.quick)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_measurement(measured_run_path(a.gpu, "train-profile", out), "train-profile", COLUMNS, rows,
                             " ".join(["python benchmarks/profile_train_step.py"] + (argv or sys.argv[1:])),
                             "benchmarks/profile_train_step.py")
    print(f"train-profile: {len(rows)} rows -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
