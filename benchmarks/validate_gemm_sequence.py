"""The GEMM model on what a training step runs: one layer's GEMMs back to back, burst vs sustained pricing.

For each catalog model at TP 1, 2 and 8 (micro-batch 1, its own sequence length), the plain GEMMs of one
transformer layer in training (forward, dgrad, wgrad, each as often as the graph has it) are captured
in one CUDA graph and replayed back to back: about 0.5 s untimed (the power controller settles on the
mix), then 5 timed replays. The measured time of one pass over the layer's GEMMs is compared with the
sum of the cost model's GEMM times, burst (`CostModel(kind="table")`) and sustained
(`power="sustained"`, cost/power.py). No sequence was used to fit anything.

Usage:
  device: PYTHONPATH=src python benchmarks/validate_gemm_sequence.py --measure --out $OUT/gemm-sequence.json
  here:   PYTHONPATH=src python benchmarks/validate_gemm_sequence.py --check benchmarks/gemm_sequence_h200/gemm-sequence.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

TPS = (1, 2, 8)


def layer_gemms(model_name: str, tp: int) -> list[tuple[int, int, int, int]] | None:
    """(m, n, k, count) of one layer's plain bf16 GEMMs in training, or None when the model does not divide."""
    from c3kit.errors import C3kitError
    from c3kit.workload.graph import build_step
    from c3kit.workload.model import get_model
    from c3kit.workload.ops import Gemm
    from c3kit.workload.parallel import Parallelism

    model = get_model(model_name)
    try:
        par = Parallelism(tp=tp, sp=tp > 1, micro_batch=1).validate(model, tp)
        graph = build_step(model, par, "train")
    except C3kitError:
        return None
    c: Counter = Counter()
    for node in graph.nodes:
        op = node.op
        if node.scope == "layer" and isinstance(op, Gemm) and op.batch == 1:
            c[(op.m, op.n, op.k)] += node.count
    return [(m, n, k, cnt) for (m, n, k), cnt in sorted(c.items())] or None


def measure(out: Path, settle_s: float = 0.5, reps: int = 5) -> int:
    """Time every model x TP layer sequence on the GPU; write the rows."""
    import torch

    from c3kit.workload.model import list_models

    if not torch.cuda.is_available():
        print("error: --measure needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for name in list_models():
        for tp in TPS:
            gemms = layer_gemms(name, tp)
            if gemms is None:
                continue
            bufs = []
            for m, n, k, cnt in gemms:
                a = torch.randn(m, k, dtype=torch.bfloat16, device=dev, generator=gen)
                b = torch.randn(k, n, dtype=torch.bfloat16, device=dev, generator=gen)
                bufs.append((a, b, torch.empty(m, n, dtype=torch.bfloat16, device=dev), cnt))

            def seq():
                for a, b, c, cnt in bufs:
                    for _ in range(cnt):
                        torch.mm(a, b, out=c)

            side = torch.cuda.Stream(dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                seq()
            torch.cuda.current_stream(dev).wait_stream(side)
            g = torch.cuda.CUDAGraph()
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                g.capture_begin()
                seq()
                g.capture_end()
            torch.cuda.current_stream(dev).wait_stream(side)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            one = e0.elapsed_time(e1) * 1e-3
            for _ in range(max(1, int(settle_s / max(one, 1e-6)))):
                g.replay()
            ts = []
            for _ in range(reps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                g.replay()
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_time(e1) * 1e-3)
            rows.append({"model": name, "tp": tp, "gemms": gemms, "time_s": statistics.median(ts),
                         "first_s": one, "spread": max(ts) / min(ts) - 1})
            print(f"{name:>16} tp {tp}: {len(gemms)} shapes, {sum(x[3] for x in gemms)} GEMMs, "
                  f"first {one * 1e3:.3f} ms, settled {rows[-1]['time_s'] * 1e3:.3f} ms", flush=True)
            g, bufs = None, []  # free this layer's buffers before the next model's
            torch.cuda.empty_cache()
    from c3kit.runtime.calib import machine_meta

    doc = {"meta": {**machine_meta(script="benchmarks/validate_gemm_sequence.py"), "settle_s": settle_s, "reps": reps},
           "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def plot(path: Path, out: list[dict]) -> None:
    """Error of burst and sustained pricing per layer sequence (sorted by measured time)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(out, key=lambda o: o["measured_s"])
    x = [o["measured_s"] * 1e3 for o in rows]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    ax.scatter(x, [o["burst_err"] * 100 for o in rows], s=14, label="burst table (sum)")
    ax.scatter(x, [o["sustained_err"] * 100 for o in rows], s=14, label="sustained (sum)")
    ax.axhline(0, color="k", lw=0.8)
    for y in (-5, 5):
        ax.axhline(y, color="grey", lw=0.5, ls="--")
    ax.set(xscale="log", xlabel="measured time of one layer's training GEMMs (ms)", ylabel="predicted / measured - 1 (%)",
           title=f"{len(rows)} layer sequences, back to back on the GPU")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check(path: Path, as_json: bool = False, plot_path: str = "") -> int:
    """Predicted (burst, sustained) against measured layer-sequence times; a table and the error summary."""
    import numpy as np

    from c3kit.cost import CostModel, time as op_time
    from c3kit.hw.catalog import get_gpu
    from c3kit.workload.ops import Gemm

    doc = json.loads(path.read_text())
    gpu = get_gpu("H200-SXM")
    burst, sus = CostModel(kind="table"), CostModel(kind="table", power="sustained")
    curve_sus = CostModel(kind="efficiency", power="sustained")  # c3kit analyze's default
    out = []
    for r in doc["rows"]:
        ops = [(Gemm("g", m, n, k), cnt) for m, n, k, cnt in r["gemms"]]
        pb = sum(op_time(op, gpu, burst) * c for op, c in ops)
        ps = sum(op_time(op, gpu, sus) * c for op, c in ops)
        pc = sum(op_time(op, gpu, curve_sus) * c for op, c in ops)
        out.append({"model": r["model"], "tp": r["tp"], "measured_s": r["time_s"], "burst_s": pb, "sustained_s": ps,
                    "burst_err": pb / r["time_s"] - 1, "sustained_err": ps / r["time_s"] - 1,
                    "curve_sustained_err": pc / r["time_s"] - 1})
    eb = np.abs([o["burst_err"] for o in out])
    es = np.abs([o["sustained_err"] for o in out])
    ec = np.abs([o["curve_sustained_err"] for o in out])
    summary = {"n": len(out), "burst_median": float(np.median(eb)), "burst_p90": float(np.percentile(eb, 90)),
               "sustained_median": float(np.median(es)), "sustained_p90": float(np.percentile(es, 90)),
               "curve_sustained_median": float(np.median(ec)), "curve_sustained_p90": float(np.percentile(ec, 90))}
    if plot_path:
        plot(Path(plot_path), out)
    if as_json:
        print(json.dumps({"rows": out, "summary": summary}, indent=1))
        return 0
    print(f"# {path}: measured {doc['meta'].get('date')} on {doc['meta'].get('gpu')}")
    print(f"{'model':>16} {'tp':>3} {'measured ms':>12} {'burst ms':>9} {'err':>7} {'sustained ms':>13} {'err':>7}")
    for o in out:
        print(f"{o['model']:>16} {o['tp']:>3} {o['measured_s'] * 1e3:>12.3f} {o['burst_s'] * 1e3:>9.3f} "
              f"{o['burst_err']:>+7.1%} {o['sustained_s'] * 1e3:>13.3f} {o['sustained_err']:>+7.1%}")
    print(f"# {summary['n']} layer sequences: |error| burst median {summary['burst_median']:.2%} p90 "
          f"{summary['burst_p90']:.2%}; sustained median {summary['sustained_median']:.2%} p90 {summary['sustained_p90']:.2%}; "
          f"efficiency curve + sustained (c3kit analyze's default) median {summary['curve_sustained_median']:.2%} "
          f"p90 {summary['curve_sustained_p90']:.2%}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="time the sequences on this machine's GPU")
    ap.add_argument("--out", default="c3kit-out/gemm-sequence.json")
    ap.add_argument("--check", default="", help="a measured file to compare with the model")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plot", default="", help="with --check: also write the per-sequence error figure (PNG)")
    a = ap.parse_args(argv)
    if a.measure:
        return measure(Path(a.out))
    if a.check:
        if not Path(a.check).is_file():
            print(f"error: no such file {a.check}", file=sys.stderr)
            return 2
        return check(Path(a.check), a.json, a.plot)
    print("error: give --measure or --check FILE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
