"""Where a real decode iteration's GPU time goes, kernel by kernel: torch.profiler over eager runs (or, with
--graph, CUDA-graph replays) of the serving loop's decode step (c3kit.runtime.bench.serve_loop), per-kernel
device time per iteration, so that each kernel can be set beside c3kit's per-op rows of the same decode step.
With --graph each case also gets a row "(iteration wall)": the replay's time measured without the profiler,
so that wall minus the kernel sum is the time between kernels inside the graph.

Usage (on a GPU): python benchmarks/profile_decode_step.py --out DIR [--graph] [--quick]
Writes DIR/<gpu>-decode-profile[-graph].json: {"meta", "kind", "columns", "rows"}; rows per (case, kernel).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CASES = [("llama-3.2-1b", 16, 8192), ("llama-3.2-1b", 1, 2048), ("llama-3.1-8b-4L", 64, 2048),
         ("llama-3.1-8b-4L", 4, 32768)]
COLUMNS = ["model", "batch", "kv_len", "kernel", "calls", "device_s_per_step"]


WALL = "(iteration wall)"


def profile(device, quick: bool, steps: int = 5, graph: bool = False) -> list[list]:
    """Per-kernel device seconds per decode iteration for every case (eager, or CUDA-graph replays)."""
    from c3kit.runtime._torch import require_torch
    from c3kit.runtime.bench import serve_loop as sl

    torch = require_torch()
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    bf = torch.bfloat16
    rows = []
    for (name, b, kv) in (CASES if not quick else [("llama-3.2-1b", 2, 64)]):
        shape = sl.SERVE_MODELS[name] if not quick else (2, 128, 4, 2, 32, 256, 1000)
        L, H, hq, hk, hd, F_, V = shape
        with torch.no_grad():
            W = sl._weights(torch, *shape, device)
            caches = [(torch.zeros(b, hk, kv, hd, device=device, dtype=bf),
                       torch.zeros(b, hk, kv, hd, device=device, dtype=bf)) for _ in range(L)]
            tokens = torch.randint(0, V, (b, 1), device=device)
            pos = torch.tensor([kv - 1], device=device)
            cos = torch.randn(1, 1, hd, device=device, dtype=bf)
            sin = torch.randn(1, 1, hd, device=device, dtype=bf)

            def step():
                return sl._forward(torch, W, tokens, caches, pos, cos, sin, shape, False)
            for _ in range(3):
                step()
            run = step
            if graph and device.type == "cuda":
                from c3kit.runtime.bench.timing import graph_time

                rows.append([name, b, kv, WALL, 1, graph_time(step, device, calls=1, repeats=9)])
                side = torch.cuda.Stream(device)
                side.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side):
                    step()
                torch.cuda.current_stream(device).wait_stream(side)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    step()
                g.replay()
                run = g.replay
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
            with tprofile(activities=acts) as prof:
                for _ in range(steps):
                    run()
                if device.type == "cuda":
                    torch.cuda.synchronize()
        for ev in prof.key_averages():
            if device.type == "cuda":
                if ev.device_type.name != "CUDA":
                    continue
                t = ev.self_device_time_total
            else:
                t = ev.self_cpu_time_total
            if t > 0:
                rows.append([name, b, kv, ev.key[:200], ev.count // steps, t * 1e-6 / steps])
        del W, caches
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    """Profile the cases and write the per-kernel table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpu", default="h200-sxm")
    ap.add_argument("--graph", action="store_true", help="profile CUDA-graph replays (and time them unprofiled)")
    a = ap.parse_args(argv)
    from c3kit.cost.calib_store import measured_run_path
    from c3kit.runtime._torch import require_torch
    from c3kit.runtime.calib import write_measurement

    torch = require_torch()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    rows = profile(device, a.quick, graph=a.graph)
    kind = "decode-profile-graph" if a.graph else "decode-profile"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_measurement(measured_run_path(a.gpu, kind, out), kind, COLUMNS, rows,
                             " ".join(["python benchmarks/profile_decode_step.py"] + (argv or sys.argv[1:])),
                             "benchmarks/profile_decode_step.py")
    print(f"{kind}: {len(rows)} rows -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
