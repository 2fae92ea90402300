"""Where a real decode iteration's GPU time goes, kernel by kernel: torch.profiler over eager runs (or, with
--graph, CUDA-graph replays) of the serving loop's decode step (c3kit.runtime.bench.serve_loop), per-kernel
device time per iteration, so that each kernel can be set beside c3kit's per-op rows of the same decode step.
With --graph each case also gets a row "(iteration wall)": the replay's time measured without the profiler,
so that wall minus the kernel sum is the time between kernels inside the graph.

Usage (on a GPU): python benchmarks/profile_decode_step.py --out DIR [--graph] [--layers] [--quick]
(--layers: the one-layer decode steps of the whole-layer check, benchmarks/validate_layers.py, instead)
Writes DIR/<gpu>-decode-profile[-layers][-graph].json: {"meta", "kind", "columns", "rows"}; rows per (case, kernel).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CASES = [("llama-3.2-1b", 16, 8192), ("llama-3.2-1b", 1, 2048), ("llama-3.1-8b-4L", 64, 2048),
         ("llama-3.1-8b-4L", 4, 32768)]
COLUMNS = ["model", "batch", "kv_len", "kernel", "calls", "device_s_per_step"]


WALL = "(iteration wall)"


# one-layer decode steps of the whole-layer check (runtime/bench/ops.py bench_decode, one TP rank's block), timed
# there as CUDA graphs of back-to-back steps: (model, tp, batch, kv_len)
LAYER_CASES = [("gemma-2-9b-like", 4, 4, 16384), ("qwen2.5-14b", 8, 4, 16384), ("yi-34b", 8, 16, 4096),
               ("llama-3.2-3b", 1, 4, 4096), ("mistral-nemo-12b", 2, 16, 4096), ("qwen2.5-32b", 4, 256, 16384)]
LAYER_REPEAT = 20  # steps per captured graph, as the check's timing captures many


def _serve_step(torch, case, device, quick: bool):
    """(case label, batch, kv_len, step callable) of one serving-loop decode iteration."""
    from c3kit.runtime.bench import serve_loop as sl

    bf = torch.bfloat16
    name, b, kv = case
    shape = sl.SERVE_MODELS[name] if not quick else (2, 128, 4, 2, 32, 256, 1000)
    L, H, hq, hk, hd, F_, V = shape
    W = sl._weights(torch, *shape, device)
    caches = [(torch.zeros(b, hk, kv, hd, device=device, dtype=bf),
               torch.zeros(b, hk, kv, hd, device=device, dtype=bf)) for _ in range(L)]
    tokens = torch.randint(0, V, (b, 1), device=device)
    pos = torch.tensor([kv - 1], device=device)
    cos = torch.randn(1, 1, hd, device=device, dtype=bf)
    sin = torch.randn(1, 1, hd, device=device, dtype=bf)
    return name, b, kv, lambda: sl._forward(torch, W, tokens, caches, pos, cos, sin, shape, False)


def _layer_step(torch, case, device, quick: bool):
    """(case label, batch, kv_len, step callable) of LAYER_REPEAT back-to-back one-layer decode steps."""
    from c3kit.runtime.bench.ops import decode_step

    name, tp, b, kv = case
    step = decode_step(torch, name, tp, b, kv, device, quick)

    def steps():
        for _ in range(LAYER_REPEAT):
            step()
    return f"layer:{name}:tp{tp}", b, kv, steps


def profile(device, quick: bool, steps: int = 5, graph: bool = False, layers: bool = False) -> list[list]:
    """Per-kernel device seconds per decode iteration for every case (eager, or CUDA-graph replays); layers: the
    one-layer steps of the whole-layer check instead of the serving loop (per step: divided by LAYER_REPEAT)."""
    from c3kit.runtime._torch import require_torch

    torch = require_torch()
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile

    rows = []
    if layers:
        cases, make, per = (LAYER_CASES if not quick else [("llama-3.2-3b", 8, 2, 64)]), _layer_step, LAYER_REPEAT
    else:
        cases, make, per = (CASES if not quick else [("llama-3.2-1b", 2, 64)]), _serve_step, 1
    for case in cases:
        with torch.no_grad():
            name, b, kv, step = make(torch, case, device, quick)
            for _ in range(3):
                step()
            run = step
            if graph and device.type == "cuda":
                from c3kit.runtime.bench.timing import graph_time

                rows.append([name, b, kv, WALL, 1, graph_time(step, device, calls=1, repeats=9) / per])
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
                rows.append([name, b, kv, ev.key[:200], ev.count / (steps * per), t * 1e-6 / (steps * per)])
        del step
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
    ap.add_argument("--layers", action="store_true", help="the whole-layer check's one-layer decode steps instead")
    a = ap.parse_args(argv)
    from c3kit.cost.calib_store import measured_run_path
    from c3kit.runtime._torch import require_torch
    from c3kit.runtime.calib import write_measurement

    torch = require_torch()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    rows = profile(device, a.quick, graph=a.graph, layers=a.layers)
    kind = "decode-profile" + ("-layers" if a.layers else "") + ("-graph" if a.graph else "")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = write_measurement(measured_run_path(a.gpu, kind, out), kind, COLUMNS, rows,
                             " ".join(["python benchmarks/profile_decode_step.py"] + (argv or sys.argv[1:])),
                             "benchmarks/profile_decode_step.py")
    print(f"{kind}: {len(rows)} rows -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
