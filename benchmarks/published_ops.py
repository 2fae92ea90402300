"""Published op-level microbenchmarks against the model (cost/published.py, cost/data/published_ops).

Prints, per GPU with a published file, every row: the published achieved TFLOP/s, the model's, and the
ratio, with the row's role: "fit" rows set the GEMM level or are the attention rates themselves (their
agreement is by construction), "check" rows are out of sample. Steady-state GEMM rows ("gemm ... sustained")
are compared with the model at sustained clocks (their fit rows set the GPU's sustained-clock factor). Then the source cross-check on the GPU
both have: the same table's H100 / H200 figures against c3kit's own H200-measured curve (burst clocks), at
the table's shapes. Nothing here reads a published step time.

The same cross-check for the Azure AI-benchmarking-guide suite, whose A100 and MI300X rows are shipped: its
H200 rows (GEMM FP8 sweep after 10,000 warm-up iterations, BabelStream) against c3kit's H200 measurements.

It also writes the generated blocks of docs/published-calibration.md: every shipped published source (GPU, op
class, role, rows, retrieval date) and the basis of every catalog GPU x op class.

Usage: python benchmarks/published_ops.py [--markdown]
       python benchmarks/published_ops.py --write-doc     # rewrite the doc's generated blocks
       python benchmarks/published_ops.py --check-doc     # exit 1 where they differ from the shipped files
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "published-calibration.md"
BLOCK = re.compile(r"(<!-- generated:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- end generated:(?P=name) -->)", re.S)

# the table's Hopper rows (stas00/ml-engineering compute/accelerator/README.md @ 744d01e1, 'Maximum Achievable
# Matmul FLOPS comparison table'): GPU, dtype, m, n, k, TFLOP/s; the BF16 H100 row says "H200 is the same"
MAMF_HOPPER = (("H100-SXM", "bf16", 2048, 2048, 13312, 794.5), ("H100-SXM", "fp8", 1024, 9216, 14336, 1402.6),
               ("H200-SXM", "fp8", 1280, 4096, 12032, 1453.4))


# Azure/AI-benchmarking-guide Azure_Results/ND_H200_v5_results.md @ 7f20e5fa: cuBLASLt FP8 (m = n = k) after
# 10,000 warm-up iterations, TFLOP/s; BabelStream Triad, TB/s
AZURE_H200_GEMM = ((4096, 1249.1), (8192, 1300.6), (16384, 1366.3))
# BabelStream Triad (2 reads, 1 write per element) against the measured class of the kernel with that traffic
AZURE_H200_STREAM = (("Triad", "residual_add", 4.15),)


def rows():
    """(gpu, op, shape, role, published TFLOP/s, model TFLOP/s) for every published row."""
    from c3kit import cost
    from c3kit.cost import published as pub
    from c3kit.hw import get_gpu
    from c3kit.cost.collectives import busbw
    from c3kit.workload.ops import Attention, Collective, Gemm

    m = cost.CostModel(kind="efficiency")
    out = []
    for ops in pub.all_published():
        gpu = get_gpu(ops.gpu)
        for p in ops.gemm:
            t = cost.time(Gemm("g", p.m, p.n, p.k, p.dtype), gpu, m)
            out.append((ops.gpu, f"gemm {p.dtype}", f"{p.m}x{p.n}x{p.k}", p.role, p.tflops,
                        2 * p.m * p.n * p.k / t / 1e12))
        sus = cost.CostModel(kind="efficiency", power="sustained")
        for s in ops.sustained:  # priced at the dtype whose rate the row runs at (rate_of)
            t = cost.time(Gemm("g", s.m, s.n, s.k, s.rate_of), gpu, sus)
            out.append((ops.gpu, f"gemm {s.rate_of} sustained", f"{s.m}x{s.n}x{s.k}", s.role, s.tflops,
                        2 * s.m * s.n * s.k / t / 1e12))
        for a in ops.attention:
            # the row's layout, else FlashAttention-2's benchmark: 16k tokens, hidden 2048
            heads = a.heads or 2048 // a.head_dim
            batch, kvh = a.batch or 16384 // a.seq, a.kv_heads or heads
            op = Attention("a", batch, heads, kvh, a.seq, a.seq, a.head_dim, causal=a.causal, backend=a.backends[0])
            bwd = Attention("a", batch, heads, kvh, a.seq, a.seq, a.head_dim, causal=a.causal, backward=True,
                            backend=a.backends[0])
            t = cost.time(op, gpu, m) + cost.time(bwd, gpu, m)
            out.append((ops.gpu, f"{a.kernel} fwd+bwd", f"seq {a.seq} hd {a.head_dim}{' causal' if a.causal else ''}",
                        a.role, a.tflops, (op.flops + bwd.flops) / t / 1e12))
        frac = pub.memory_fraction(ops.gpu)
        for r in ops.memory:  # GB/s, not TFLOP/s: the model's is the one fraction all rows set
            out.append((ops.gpu, f"STREAM {r.kernel} (GB/s)", "", r.role, r.gbps, frac * gpu.hbm_bw / 1e9))
        for c in ops.collective:
            op = Collective("c", c.kind, float(c.nbytes), c.ranks, span="intra")
            t = cost.time(op, gpu, m)
            out.append((ops.gpu, f"{c.kind} busbw (GB/s)", f"{c.ranks} ranks {c.nbytes / 2**20:g} MiB", c.role,
                        c.busbw_gbps, busbw(op, t) / 1e9))
    return out


def hopper_check():
    """(gpu, dtype, shape, published TFLOP/s, c3kit's H200-measured curve TFLOP/s) at the table's Hopper rows."""
    from c3kit.cost.default_curve import default_curve_for
    from c3kit.hw import get_gpu

    out = []
    for g, dt, m, n, k, tf in MAMF_HOPPER:
        gpu = get_gpu(g)
        curve = default_curve_for(gpu)[0]
        out.append((g, dt, f"{m}x{n}x{k}", tf, 2 * m * n * k / curve.gemm_time(m, n, k, dt, gpu) / 1e12))
    return out


def azure_h200_check():
    """(what, size, published, c3kit's H200 measurement-based figure) for the Azure suite's H200 rows: GEMM
    TFLOP/s (burst and sustained clocks) and streaming bandwidth in TB/s (the measured memory class)."""
    from c3kit import cost
    from c3kit.cost.opclass import calibration_for
    from c3kit.hw import get_gpu
    from c3kit.workload.ops import Gemm

    h200 = get_gpu("H200-SXM")
    out = []
    for n, tf in AZURE_H200_GEMM:
        g = Gemm("g", n, n, n, "fp8")
        for power in ("burst", "sustained"):
            t = cost.time(g, h200, cost.CostModel(kind="efficiency", power=power))
            out.append((f"GEMM fp8 ({power})", f"{n}^3", tf, g.flops / t / 1e12))
    cal = calibration_for(h200, "memory")
    elements, width = float(1 << 28), 8192.0  # 512 MiB of bf16 per operand: far beyond the 50 MB L2
    for kernel, kind, tb in AZURE_H200_STREAM:
        from c3kit.workload.memops import memop_traffic

        nbytes, _ = memop_traffic(kind, elements, 2.0)
        t = float(cal.kind_time(kind, elements, width, 2.0))
        out.append((f"STREAM {kernel} vs measured {kind}", "512 MiB", tb, nbytes / t / 1e12))
    return out


ROW_CLASS = {"gemm": lambda r: {"bf16": "gemm", "fp16": "gemm", "fp8": "gemm_fp8"}[r.dtype],
             "sustained": lambda r: "gemm (sustained clock)",
             "attention": lambda r: "attention", "memory": lambda r: "memory, fp8_cast",
             "collective": lambda r: _collective_class(r.kind)}


def _collective_class(kind: str) -> str:
    from c3kit.cost.published import FIT_KINDS

    return FIT_KINDS.get(kind, "collective")


def sources_block() -> str:
    """Markdown: every shipped published source, per GPU and op class, with its rows' roles and retrieval date."""
    from c3kit.cost import published as pub
    from c3kit.cost.published import cite

    rows = []
    for ops in pub.all_published():
        seen: dict = {}
        for table in ("gemm", "sustained", "attention", "memory", "collective"):
            for r in getattr(ops, table):
                key = (ROW_CLASS[table](r), cite(r.source), r.retrieved or ops.retrieved)
                roles = seen.setdefault(key, {"fit": 0, "check": 0})
                roles[r.role] += 1
        for (cls, src, date), roles in seen.items():
            n = ", ".join(f"{v} {k}" for k, v in roles.items() if v)
            rows.append((ops.gpu, cls, src, n, date, ops.origin))
    head = ("GPU", "op class", "source (repository path @ commit, or address)", "rows", "retrieved", "file")
    return _md(head, rows)


def basis_block() -> str:
    """Markdown: the basis of every catalog GPU x op class (cost/basis.py)."""
    from c3kit.cost.basis import OP_CLASSES, basis
    from c3kit.hw.catalog import list_gpus

    rows = [(g.name, *(basis(g.name)[c].replace(" microbenchmark", "").replace("transferred from ", "from ")
                       for c in OP_CLASSES)) for g in list_gpus()]
    return _md(("GPU", *OP_CLASSES), rows)


def _md(head, rows) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]) + "\n"


def doc_text(text: str) -> str:
    """text (docs/published-calibration.md) with its generated blocks rewritten from the shipped files."""
    gen = {"published-sources": sources_block, "published-basis": basis_block}
    return BLOCK.sub(lambda m: m.group(1) + gen[m.group("name")]() + m.group(4), text)


def main(argv=None) -> int:
    """Print both tables (plain text, or markdown with --markdown), or write / check the doc's blocks."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="markdown tables")
    ap.add_argument("--write-doc", action="store_true", help="rewrite docs/published-calibration.md's blocks")
    ap.add_argument("--check-doc", action="store_true", help="exit 1 if the doc's blocks are stale")
    args = ap.parse_args(argv)
    if args.write_doc or args.check_doc:
        old = DOC.read_text()
        new = doc_text(old)
        if args.check_doc:
            print("docs/published-calibration.md is " + ("up to date" if new == old else "stale: run --write-doc"))
            return 0 if new == old else 1
        DOC.write_text(new)
        return 0
    md = args.markdown
    head = ("GPU", "op", "shape", "role", "published TFLOP/s", "model TFLOP/s", "model / published")
    body = [(g, op, sh, role, f"{p:.1f}", f"{q:.1f}", f"{q / p:.3f}") for g, op, sh, role, p, q in rows()]
    _table(head, body, md)
    print()
    print("Source cross-check: the same table's Hopper figures against c3kit's H200-measured GEMM curve (burst):")
    print()
    head2 = ("GPU", "dtype", "shape", "published TFLOP/s", "H200-measured curve TFLOP/s", "curve / published")
    _table(head2, [(g, d, s, f"{p:.1f}", f"{q:.1f}", f"{q / p:.3f}") for g, d, s, p, q in hopper_check()], md)
    print()
    print("Source cross-check: the Azure suite's H200 rows against c3kit's H200 measurements:")
    print()
    head3 = ("what", "size", "published", "c3kit H200", "c3kit / published")
    _table(head3, [(w, sz, f"{p:.2f}", f"{q:.2f}", f"{q / p:.3f}") for w, sz, p, q in azure_h200_check()], md)
    return 0


def _table(head, body, md: bool) -> None:
    if md:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        for r in body:
            print("| " + " | ".join(r) + " |")
        return
    w = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    for r in (head, *body):
        print("  ".join(str(x).ljust(n) for x, n in zip(r, w)))


if __name__ == "__main__":
    raise SystemExit(main())
