"""Where a real training step's GPU time goes, kernel by kernel: torch.profiler over a few steps of the
single-GPU training step of c3kit.runtime.bench.train_step, written as per-event device time totals
(kernels, ATen ops and autograd nodes, with counts), so that each op class's share can be set beside c3kit's per-op rows.

Usage (on a GPU): python benchmarks/profile_train_step.py --out DIR [--quick]
Writes DIR/<gpu>-train-profile.json: {"meta", "kind", "columns", "rows"}; rows per (case, kernel).

Usage (anywhere): python benchmarks/profile_train_step.py --summarize FILE
Prints, per profiled case, the device time of the autograd nodes that are memory-bound glue (the split backward's
cat, the input-gradient accumulation adds) beside the glue ops of c3kit's layer description for the same step
(workload.layer.GLUE "split", no gradient accumulation: the profiled steps set .grad to None), and the step's
kernels by class (GEMM, attention, memory-bound) beside c3kit's per-class sums.
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


GLUE_EVENTS = ("SplitWithSizesBackward0", "SplitBackward0", "aten::add_")


def kernel_class(name: str) -> str:
    """"gemm", "attn_fwd", "attn_bwd" or "mem" for a CUDA kernel name of the profile (cuBLAS nvjet, cuDNN SDPA)."""
    if name.startswith("nvjet") or "gemm" in name.lower() and "sdpa" not in name:
        return "gemm"
    if "sdpa" in name and "fprop" in name:
        return "attn_fwd"
    if "sdpa" in name and "bprop" in name or name.startswith("void cudnn::fusion"):
        return "attn_bwd"
    return "mem"


def summarize(path: Path) -> list[str]:
    """Lines comparing the profile's glue events and kernel classes with c3kit's description of the same steps."""
    import json

    from c3kit.cost.model import CostModel
    from c3kit.cost.opclass import _rows
    from c3kit.hw.catalog import get_gpu
    from c3kit.runtime.bench.train_step import TRAIN_MODELS
    from c3kit.step.project import node_times, step_timer
    from c3kit.workload.graph import build_step
    from c3kit.workload.model import ModelConfig
    from c3kit.workload.ops import Gemm
    from c3kit.workload.parallel import Parallelism

    rows = _rows(json.loads(path.read_text()))
    gpu = get_gpu("H200-SXM")
    timer = step_timer(CostModel(kind="efficiency", power="burst"))  # a few profiled steps: burst clocks
    out = []
    for case in dict.fromkeys((r["model"], r["impl"], r["batch"], r["seq"]) for r in rows):
        name, impl, b, s = case
        L, H, hq, hk, hd, F_, V = TRAIN_MODELS[name]
        m = ModelConfig(name=name, hidden=H, layers=L, heads=hq, kv_heads=hk, head_dim=hd, ffn_hidden=F_, vocab=V,
                        gated_mlp=True, norm="rmsnorm", position="rope", tied_embeddings=False, max_seq=1 << 17)
        g = build_step(m, Parallelism(micro_batch=b, global_batch=b), "train", s, "bf16", 8, "bf16",
                       norm_rope="eager" if impl == "eager" else "fused", glue="split", grad_acc="none")
        t = node_times(g, gpu, timer)
        mine = [r for r in rows if (r["model"], r["impl"], r["batch"], r["seq"]) == case]
        out.append(f"{name} {impl} b{b} s{s} ({L} layers)")
        for ev in GLUE_EVENTS:
            hit = [r for r in mine if r["event"] == ev and r["on"] == "CPU"]
            if hit:
                out.append(f"  profile {ev:26s} {hit[0]['calls']:4d} calls  {hit[0]['total_device_s'] * 1e3:8.3f} ms")
        for n in g.nodes:
            if n.role == "glue":
                out.append(f"  c3kit   {n.name:26s} {g.repeats(n):4d} calls  {t[n.id] * g.repeats(n) * 1e3:8.3f} ms")
        prof: dict = {}
        for r in mine:
            if r["on"] == "CUDA":
                k = kernel_class(str(r["event"]))
                prof[k] = prof.get(k, 0.0) + float(r["self_device_s"])
        model: dict = {}
        for n in g.nodes:
            if n.stream != "compute" or n.phase == "opt":
                continue
            k = "gemm" if isinstance(n.op, Gemm) else ("attn_" + n.phase if n.role == "attn" else "mem")
            model[k] = model.get(k, 0.0) + t[n.id] * g.repeats(n)
        for k in ("gemm", "attn_fwd", "attn_bwd", "mem"):
            if k in prof:
                out.append(f"  {k:8s} profile {prof[k] * 1e3:8.2f} ms  c3kit {model.get(k, 0.0) * 1e3:8.2f} ms  "
                           f"{(model.get(k, 0.0) / prof[k] - 1) * 100:+6.1f}%")
    return out


def main(argv: list[str] | None = None) -> int:
    """Profile the cases and write the per-kernel table (or summarize a written one)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpu", default="h200-sxm")
    ap.add_argument("--summarize", type=Path, help="a written <gpu>-train-profile.json: compare it with c3kit")
    a = ap.parse_args(argv)
    if a.summarize is not None:
        if not a.summarize.is_file():
            print(f"error: no profile file {a.summarize}", file=sys.stderr)
            return 2
        print("\n".join(summarize(a.summarize)))
        return 0
    if not a.out:
        print("error: give --out DIR (to profile) or --summarize FILE", file=sys.stderr)
        return 2
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
