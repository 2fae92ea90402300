"""Whole single-GPU training steps on the H200: measured forward + backward of a whole model and the fused
AdamW step against what `c3kit analyze` projects for the same step (one GPU, no communication).

The measured rows come from `python -m c3kit.runtime.bench.train_step` (benchmarks/run_train_step_h200.sh);
none of the models is in the catalog and no row feeds any parameter. Two ways of writing the block are
measured: `fused` (F.rms_norm, rotate-half RoPE, as the op classes were measured) and `eager` (RMSNorm and
complex RoPE written out in fp32, as early torchtitan / Llama reference code); each is priced with the
matching `norm_rope` of the layer description (the eager kernels' classes come from call 18's eager_ops rows,
never from these steps).

Prints per case measured, predicted and signed error, then median / p90 / bias per part.
Usage: python benchmarks/validate_train_step.py [--dir DIR] [--verbose] [--plot PNG]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / "benchmarks" / "ops_h200"


def _model(r: dict):
    """The ModelConfig of a measured row (untied embeddings, RMSNorm, RoPE, SwiGLU)."""
    from c3kit.workload.model import ModelConfig

    return ModelConfig(name=str(r["model"]), hidden=int(r["hidden"]), layers=int(r["layers"]), heads=int(r["heads"]),
                       kv_heads=int(r["kv_heads"]), head_dim=int(r["head_dim"]), ffn_hidden=int(r["ffn"]),
                       vocab=int(r["vocab"]), gated_mlp=True, norm="rmsnorm", position="rope",
                       tied_embeddings=False, max_seq=1 << 17)


def predict(r: dict, cost_model) -> dict:
    """{'fwd_bwd': s, 'optimizer': s} of c3kit's projected step for the row's model and micro-batch."""
    from c3kit.hw.catalog import get_gpu
    from c3kit.step import project
    from c3kit.step.overheads import DEFAULT_OVERHEADS
    from c3kit.workload.graph import build_step
    from c3kit.workload.parallel import Parallelism

    b = max(1, int(r["batch"]))
    seq = int(r["seq"]) or 2048
    par = Parallelism(tp=1, dp=1, pp=1, micro_batch=b, global_batch=b, recompute="none")
    code = "eager" if r["impl"] == "eager" else "fused"
    # both impls split one QKV and one gate/up GEMM output into views (glue "split"); the timed loop never clears
    # .grad, so every backward adds into the bf16 gradients of every parameter (grad_acc "every")
    g = build_step(_model(r), par, "train", seq, "bf16", 8, "bf16", norm_rope=code, glue="split", grad_acc="every")
    res = project(g, get_gpu("H200-SXM"), cost_model=cost_model, overheads=DEFAULT_OVERHEADS)
    fb = sum(x.compute_s for x in res.rows if x.phase in ("fwd", "bwd") or x.role == "overhead.launch_gaps")
    opt = sum(x.compute_s for x in res.rows if x.role == "optimizer")
    return {"fwd_bwd": fb, "optimizer": opt}


def evaluate(directory: Path, cost_model) -> dict:
    """{set: [(case, measured_s, predicted_s), ...]} with sets fused, eager, optimizer and optimizer_grads.

    The step benchmark's optimizer rows (set optimizer) step fp32 master copies whose gradients stay zero (the
    backward fills the bf16 weights' .grad, never the masters'); the optimizer_setup rows time the same model's
    tensors built the same way with random gradients in one process (set optimizer_grads), as training runs them."""
    from c3kit.cost.opclass import _rows as rows_of

    out: dict = {"fused": [], "eager": [], "optimizer": [], "optimizer_grads": []}
    opt_price: dict = {}
    for path in sorted(directory.glob("*-train-step.json")):
        for r in rows_of(json.loads(path.read_text())):
            p = predict(r, cost_model)
            if r["part"] == "optimizer":
                out["optimizer"].append((f"{r['model']} {r['params'] / 1e9:.2f}B params", r["time_s"], p["optimizer"]))
                opt_price[int(r["params"])] = p["optimizer"]
            else:
                out[r["impl"]].append((f"{r['model']} b{r['batch']} s{r['seq']}", r["time_s"], p["fwd_bwd"]))
    for path in sorted(directory.glob("*-ops-optimizer_setup.json")):
        for r in rows_of(json.loads(path.read_text())):
            n = int(r["width"])
            if r["pass"] == "random_grads" and n in opt_price:
                out["optimizer_grads"].append((f"{n / 1e9:.2f}B params, random grads", r["time_s"], opt_price[n]))
    return out


def optimizer_rates(directory: Path, rows) -> list[str]:
    """Seconds per parameter of the fused AdamW: each measured whole-step optimizer, the optimizer class's own
    measured rows nearest in size (ops-optimizer), and c3kit's price: separates the class fit's residual from what
    differs between the class benchmark and the step."""
    from c3kit.cost.opclass import _rows as rows_of

    cls = [r for p in sorted(directory.glob("*-ops-optimizer.json")) for r in rows_of(json.loads(p.read_text()))
           if r["op"] == "adamw_fused" and r["time_s"]]
    out = []
    for case, measured, predicted in rows:
        n = float(case.split()[-2].removesuffix("B")) * 1e9
        line = f"  adamw {case:32s} step {measured / n * 1e12:5.2f} ps/param  c3kit {predicted / n * 1e12:5.2f}"
        if cls:
            near = min(cls, key=lambda r: abs(float(r["width"]) - n))
            line += (f"  class row {near['time_s'] / float(near['width']) * 1e12:5.2f} ps/param "
                     f"({float(near['width']) / 1e9:.2f}B params, {near['tokens']} tensors)")
        out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    """Print predicted against measured per case and the summary per set."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--plot", type=Path)
    a = ap.parse_args(argv)
    from c3kit.studies.validation import default_cost_model
    from validate_layers import plot_errors, summary  # the same statistics and figure as the block checks

    res = evaluate(a.dir, default_cost_model())
    if not any(res.values()):
        print(f"error: no *-train-step.json under {a.dir}", file=sys.stderr)
        return 2
    for name, rows in res.items():
        if not rows:
            continue
        if a.verbose:
            for case, m, p in rows:
                print(f"  {name:9s} {case:32s} measured {m * 1e3:9.2f} ms  predicted {p * 1e3:9.2f} ms  "
                      f"{(p / m - 1) * 100:+6.1f}%")
        s = summary(rows)
        print(f"{name:9s} n={s['n']:3d}  median {s['median']:5.2f}%  p90 {s['p90']:5.2f}%  bias {s['bias']:+6.2f}%  "
              f"worst {s['worst']:+6.1f}%")
    for line in optimizer_rates(a.dir, res["optimizer"]):
        print(line)
    if res["optimizer_grads"]:
        print("  the step benchmark's optimizer rows stepped zero gradients (its fp32 masters never receive the "
              "backward's); set optimizer_grads times the same tensors with random gradients (ops-optimizer_setup)")
    if a.plot:
        plot_errors(res, a.plot, "H200 single-GPU training steps: c3kit vs measured (never fitted)",
                    "measured time (ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
