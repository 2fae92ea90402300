"""The GEMMs of PyTorch's async TP on one GPU: each published overlap case's GEMM whole, as its eight per-step chunks
(m / 8 rows each, the rows a decomposed all-gather matmul or matmul reduce-scatter computes per step) back to back on
one stream, and the same chunks alternating over two streams as async TP issues them, each in a CUDA graph; beside
c3kit's GEMM price of the whole and of a chunk. Does a decomposed step cost more than its share of the GEMM on its
own, before any communication? (docs/async_tp.md lists this as unmeasured.)
Run on a GPU: python3 benchmarks/async_tp_chunks.py --out FILE.json; without --out it prints the table of a shipped
file (benchmarks/ops_h200/h200-sxm-async-tp-chunks.json)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "ops_h200" / "h200-sxm-async-tp-chunks.json"
COLUMNS = ["case", "m", "n", "k", "steps", "whole_s", "chunks_one_stream_s", "chunks_two_streams_s"]


def _cases() -> list[tuple[str, int, int, int]]:
    """(case, m, n, k) of every GEMM pattern row of the shipped overlap dataset, once per case."""
    from c3kit.overlap.validate import load

    df = load()
    df = df[df["pattern"].isin(["ag_gemm", "gemm_rs"])].drop_duplicates("case")
    return [(str(r.case), int(r.m), int(r.n), int(r.k)) for r in df.itertuples()]


def _graph_time(torch, fn, reps: int = 20) -> float:
    """Median seconds of one fn() from replays of a CUDA graph holding it."""
    from c3kit.runtime.bench.timing import capture_graph, elapsed

    dev = torch.device("cuda")
    g = capture_graph([fn], dev)
    return statistics.median(elapsed(g.replay, dev) for _ in range(reps))


def measure(steps: int = 8) -> list[list]:
    """Rows of COLUMNS for every case (bf16, random operands, output slices written in place)."""
    import torch

    rows = []
    for case, m, n, k in _cases():
        A = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        B = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        C = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        c = m // steps
        streams = [torch.cuda.current_stream(), torch.cuda.Stream()]

        def whole():
            torch.matmul(A, B, out=C)

        def one():
            for i in range(steps):
                torch.matmul(A[i * c:(i + 1) * c], B, out=C[i * c:(i + 1) * c])

        def two():
            main = torch.cuda.current_stream()
            streams[1].wait_stream(main)
            for i in range(steps):
                with torch.cuda.stream(streams[i % 2] if i % 2 else main):
                    torch.matmul(A[i * c:(i + 1) * c], B, out=C[i * c:(i + 1) * c])
            main.wait_stream(streams[1])
        rows.append([case, m, n, k, steps, _graph_time(torch, whole), _graph_time(torch, one), _graph_time(torch, two)])
        print(rows[-1], flush=True)
    return rows


def table(doc: dict) -> list[str]:
    """Lines: measured whole / one-stream / two-stream times against c3kit's GEMM prices of the whole and of eight
    chunks, and the engine's ring-dma schedule of the case on eight H200s (communication included)."""
    from c3kit import cost
    from c3kit.hw.catalog import get_gpu
    from c3kit.overlap import OverlapProblem, evaluate
    from c3kit.studies.validation import default_cost_model
    from c3kit.workload.ops import Gemm

    hw, cm = get_gpu("H200-SXM"), default_cost_model()
    out = [f"{'case':26s} {'whole':>9s} {'8 chunks 1s':>12s} {'2 streams':>10s} {'c3kit whole':>12s} "
           f"{'c3kit 8 x chunk':>16s} {'engine ring-dma':>16s}"]
    for r in (dict(zip(doc["columns"], row)) for row in doc["rows"]):
        m, n, k, s = r["m"], r["n"], r["k"], r["steps"]
        pw = cost.time(Gemm("g", m, n, k, "bf16"), hw, cm)
        pc = s * cost.time(Gemm("g", m // s, n, k, "bf16"), hw, cm)
        prob = OverlapProblem("gemm_rs" if "-rs-" in r["case"] else "ag_gemm", m, n, k, gpus=s)
        ring = evaluate(prob, hw, ["ring-dma"])[0].time
        out.append(f"{r['case']:26s} {r['whole_s'] * 1e6:8.1f}u {r['chunks_one_stream_s'] * 1e6:11.1f}u "
                   f"{r['chunks_two_streams_s'] * 1e6:9.1f}u {pw * 1e6:11.1f}u {pc * 1e6:15.1f}u {ring * 1e6:15.1f}u")
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure (--out) or print the table of a measured file."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--file", type=Path, default=DEFAULT)
    a = ap.parse_args(argv)
    if a.out:
        from c3kit.runtime.calib import write_measurement

        write_measurement(a.out, "async-tp-chunks", COLUMNS, measure(), "python3 benchmarks/async_tp_chunks.py --out",
                          "benchmarks/async_tp_chunks.py")
        return 0
    if not a.file.is_file():
        print(f"error: no measured file at {a.file}: run with --out on a GPU first", file=sys.stderr)
        return 2
    for line in table(json.loads(a.file.read_text())):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
