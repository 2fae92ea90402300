"""Op-level microbenchmarks beyond GEMMs: kernel floors, memory-bound ops, attention, small / grouped /
FP8 GEMMs, and whole Llama-style layers (training blocks and CUDA-graph decode steps).

Each family writes one calibration file (docs/CONVENTIONS.md format) through c3kit.runtime.calib.
Run: python -m c3kit.runtime.bench.ops --out DIR [--only floor,memory,...] [--quick]
(--quick: a few tiny shapes, for trying it on a CPU; timings there mean nothing).
"""

from __future__ import annotations

import argparse
import random
import sys
import time as _time

from c3kit.runtime._torch import require_torch
from c3kit.runtime.bench.ops_decode import (bench_act_chunked, bench_after_stream_large, bench_decode_cold,
                                             bench_decode_fresh,
                                             bench_decode_kernels, bench_moe_grad, bench_moe_train, bench_optimizer_burst,
                                             bench_optimizer_mix, bench_optimizer_setup)
from c3kit.runtime.bench.ops_graphed import (bench_attn_graph, bench_attn_graph_cudnn, bench_attn_graph_efficient,
                                             bench_fp8_cast_parts, bench_grouped_wgrad, bench_l2_reuse,
                                             bench_memory_graph, bench_norm_bwd)
from c3kit.runtime.bench.ops_heldout import (bench_cp_attention, bench_decode_attn_small, bench_fp8_mm,
                                             bench_norm_width, bench_bmm_attn)
from c3kit.runtime.bench.ops_pairs import bench_gemm_pair
from c3kit.runtime.bench.ops_undercomm import bench_gemm_under_comm
from c3kit.runtime.bench.blocks import block_forward as _block_fwd
from c3kit.runtime.bench.blocks import block_weights as _block
from c3kit.runtime.bench.ops_steady import bench_steady_ops
from c3kit.runtime.bench.ops_recipes import backend_ctx as _backend_ctx
from c3kit.runtime.bench.ops_recipes import random_split as _random_split
from c3kit.runtime.bench.ops_recipes import rope_rotate_half as _rope
from c3kit.runtime.bench.ops_recipes import (bench_attn_backends, bench_eager_ops, bench_fp8, bench_gemm_cold,
                                             bench_moe, bench_optimizer)
from c3kit.runtime.bench.ops_moe import bench_moe_fp8_host, bench_moe_host
from c3kit.runtime.bench.timing import Budget as _Budget
from c3kit.runtime.bench.timing import eager_time as _eager_time
from c3kit.runtime.bench.timing import graph_time as _graph_time
from c3kit.runtime.bench.timing import timed as _timed

FAMILIES = ("floor", "memory", "attention", "gemm", "layers", "decode", "fp8", "moe", "attn_backends",
            "decode_attention", "eager_ops", "optimizer", "gemm_cold", "decode_kernels", "optimizer_mix",
            "moe_train", "act_chunked", "decode_cold", "optimizer_burst",
            "decode_fresh", "optimizer_setup", "after_stream_large", "gemm_pair", "moe_grad", "moe_host",
            "gemm_under_comm", "attn_graph", "norm_bwd", "grouped_wgrad", "fp8_cast_parts", "moe_fp8_host",
            "attn_graph_cudnn", "attn_graph_efficient", "memory_graph", "l2_reuse", "steady_ops",
            "fp8_mm", "norm_width", "decode_attn_small", "cp_attention", "bmm_attn")


# Llama-style models that are NOT in c3kit's catalog (workload/data/models.toml): the whole-layer
# checks run on these, so no catalog model's layer ever fed a parameter. Shapes from each model's
# published config.json (Hugging Face): hidden, heads, kv_heads, head_dim, ffn, vocab.
LAYER_MODELS = {
    "qwen2.5-14b": (5120, 40, 8, 128, 13824, 152064),
    "mistral-nemo-12b": (5120, 32, 8, 128, 14336, 131072),
    "qwen2.5-32b": (5120, 40, 8, 128, 27648, 152064),
    "llama-3.2-3b": (3072, 24, 8, 128, 8192, 128256),
    "gemma-2-9b-like": (3584, 16, 8, 256, 14336, 256000),
    "yi-34b": (7168, 56, 8, 128, 20480, 64000),
}


# ---------------------------------------------------------------- floor
def bench_floor(device, quick: bool) -> tuple[list[str], list[list]]:
    """Per-kernel fixed cost: a 1-element add, eager and in a CUDA graph, plus an add over a size ladder."""
    torch = require_torch()
    cuda = device.type == "cuda"
    cols = ["case", "mode", "elements", "bytes", "kernels", "time_s"]
    rows = []
    x = torch.zeros(1, device=device)
    for n in (1, 10, 100):
        def many(n=n):
            for _ in range(n):
                x.add_(1.0)
        rows.append(["tiny_add", "eager", 1, 8, n, _eager_time(many, device)])
        if cuda:
            rows.append(["tiny_add", "graph", 1, 8, n, _graph_time(many, device, calls=10)])
    sizes = [2 ** p for p in range(10, 31, 2)] if not quick else [1024, 4096]
    for n in sizes:
        a = torch.empty(n, dtype=torch.bfloat16, device=device).normal_()
        b = torch.empty_like(a)
        c = torch.empty_like(a)
        rows.append(["add", "graph" if cuda else "eager", n, 3 * 2 * n, 1,
                     _timed(lambda a=a, b=b, c=c: torch.add(a, b, out=c), device, cuda)])
        rows.append(["copy", "graph" if cuda else "eager", n, 2 * 2 * n, 1,
                     _timed(lambda a=a, c=c: c.copy_(a), device, cuda)])
        del a, b, c
    return cols, rows


# ---------------------------------------------------------------- memory-bound ops
def bench_memory(device, quick: bool) -> tuple[list[str], list[list]]:
    """Norms, activations, residual add, RoPE, cross-entropy, embedding and AdamW: forward and backward."""
    torch = require_torch()
    F = torch.nn.functional
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    cols = ["op", "pass", "tokens", "width", "bytes", "time_s"]
    rows = []
    rng = random.Random(7)
    tokens = [1, 8, 64, 256, 1024, 4096, 8192, 16384, 32768] if not quick else [8, 64]
    widths = [2048, 4096, 5120, 8192] if not quick else [256]

    def run(op, ps, T, W, nbytes, fn, graph=True):
        rows.append([op, ps, T, W, float(nbytes), _timed(fn, device, cuda, graph)])

    for T in tokens:
        for W in widths:
            if _Budget.spent():
                break
            x = torch.randn(T, W, device=device, dtype=bf, requires_grad=True)
            g = torch.randn(T, W, device=device, dtype=bf)
            w = torch.ones(W, device=device, dtype=bf, requires_grad=True)
            e = T * W * 2
            run("rmsnorm", "fwd", T, W, 2 * e, lambda: F.rms_norm(x, (W,), w, 1e-5))
            y = F.rms_norm(x, (W,), w, 1e-5)
            run("rmsnorm", "bwd", T, W, 3 * e,
                lambda: torch.autograd.grad(y, (x, w), g, retain_graph=True), graph=False)
            run("layernorm", "fwd", T, W, 2 * e, lambda: F.layer_norm(x, (W,), w, None, 1e-5))
            yl = F.layer_norm(x, (W,), w, None, 1e-5)
            run("layernorm", "bwd", T, W, 3 * e,
                lambda: torch.autograd.grad(yl, (x, w), g, retain_graph=True), graph=False)
            r = torch.randn(T, W, device=device, dtype=bf)
            run("residual_add", "fwd", T, W, 3 * e, lambda: x + r)
            run("gelu", "fwd", T, W, 2 * e, lambda: F.gelu(x, approximate="tanh"))
            yg = F.gelu(x, approximate="tanh")
            run("gelu", "bwd", T, W, 3 * e, lambda: torch.autograd.grad(yg, x, g, retain_graph=True), graph=False)
            u = torch.randn(T, W, device=device, dtype=bf, requires_grad=True)
            run("swiglu", "fwd", T, W, 3 * e, lambda: F.silu(x) * u)
            ys = F.silu(x) * u
            run("swiglu", "bwd", T, W, 5 * e, lambda: torch.autograd.grad(ys, (x, u), g, retain_graph=True),
                graph=False)
            hd = 128
            if W % hd == 0:
                q = torch.randn(T, W // hd, hd, device=device, dtype=bf, requires_grad=True)
                cos = torch.randn(T, 1, hd, device=device, dtype=bf)
                sin = torch.randn(T, 1, hd, device=device, dtype=bf)
                run("rope", "fwd", T, W, 2 * e, lambda: _rope(q, cos, sin))
                yr = _rope(q, cos, sin)
                run("rope", "bwd", T, W, 2 * e,
                    lambda: torch.autograd.grad(yr, q, g.view(T, W // hd, hd), retain_graph=True), graph=False)
            del x, g, w, y, yl, r, yg, u, ys
    for T in ([512, 2048, 8192, 16384] if not quick else [8]):
        for V in ([32000, 128256, 152064] if not quick else [512]):
            if _Budget.spent():
                break
            if T * V * 4 > 12e9:
                continue
            logits = torch.randn(T, V, device=device, dtype=bf, requires_grad=True)
            tgt = torch.randint(0, V, (T,), device=device)
            run("cross_entropy", "fwd", T, V, T * V * 2, lambda: F.cross_entropy(logits.float(), tgt))
            loss = F.cross_entropy(logits.float(), tgt)
            run("cross_entropy", "bwd", T, V, T * V * 2 * 3,
                lambda: torch.autograd.grad(loss, logits, retain_graph=True), graph=False)
            del logits, tgt, loss
    for T in ([1024, 8192, 32768] if not quick else [8]):
        for W in ([4096, 8192] if not quick else [64]):
            emb = torch.nn.Embedding(128256 if not quick else 1000, W, device=device, dtype=bf)
            idx = torch.randint(0, emb.num_embeddings, (T,), device=device)
            run("embedding", "fwd", T, W, 2 * T * W * 2, lambda: emb(idx))
    # AdamW over a model's worth of tensors: bytes = 16 B/param moved (p, g, m, v read; p, m, v written, fp32)
    for n_params in ([2 ** 20, 2 ** 24, 2 ** 26, 2 ** 28] if not quick else [4096]):
        for impl in ("fused", "foreach"):
            if _Budget.spent():
                break
            shapes = _random_split(n_params, [4096 * 4096, 4096 * 1024, 4096 * 14336 // 4, 4096], rng)
            ps = [torch.zeros(s, device=device, requires_grad=True) for s in shapes]
            for p in ps:
                p.grad = torch.randn_like(p)
            try:
                opt = torch.optim.AdamW(ps, lr=1e-4, **{impl: True})
                opt.step()
                rows.append(["adamw_" + impl, "step", len(ps), n_params, 28.0 * n_params,
                             _eager_time(opt.step, device)])
                rows.append(["clip_grad_norm", "step", len(ps), n_params, 4.0 * n_params * 2,
                             _eager_time(lambda: torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True), device)])
            except Exception as ex:  # noqa: BLE001 - an implementation missing on this build: record it
                print(f"adamw {impl}: {ex}", file=sys.stderr)
            del ps
    return cols, rows


# ---------------------------------------------------------------- attention
def bench_attention(device, quick: bool) -> tuple[list[str], list[list]]:
    """SDPA forward and backward (causal, GQA, head dims 64/128); decode attention is its own family."""
    torch = require_torch()
    F = torch.nn.functional
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    cols = ["backend", "pass", "batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim", "causal", "time_s"]
    rows = []
    rng = random.Random(11)
    seqs = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072] if not quick else [64, 128]
    cases = []
    for s in seqs:
        for hd in (64, 128):
            for hq, hk in ((8, 8), (8, 1), (16, 2), (32, 8), (4, 1), (64, 8)):
                b = 1 if quick else max(1, 16384 // s)
                # causal forward FLOPs under ~2e13 (about 40 ms) so that the set fits in a device call
                if 2 * b * hq * s * s * hd > 2e13:
                    continue
                cases.append((b, hq, hk, s, hd))
    rng.shuffle(cases)
    if quick:
        cases = cases[:4]
    for backend in (("default", "flash", "efficient") if cuda else ("default",)):
        for (b, hq, hk, s, hd) in cases:
            if _Budget.spent():
                break
            if backend != "default" and rng.random() < 0.7:
                continue
            q = torch.randn(b, hq, s, hd, device=device, dtype=bf, requires_grad=True)
            k = torch.randn(b, hk, s, hd, device=device, dtype=bf, requires_grad=True)
            v = torch.randn(b, hk, s, hd, device=device, dtype=bf, requires_grad=True)
            try:
                with _backend_ctx(backend):
                    def fwd():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hk)
                    tf = _timed(fwd, device, cuda)
                    o = fwd()
                    go = torch.randn_like(o)
                    tb = _eager_time(lambda: torch.autograd.grad(o, (q, k, v), go, retain_graph=True), device)
                rows.append([backend, "fwd", b, hq, hk, s, s, hd, 1, tf])
                rows.append([backend, "bwd", b, hq, hk, s, s, hd, 1, tb])
            except Exception as ex:  # noqa: BLE001 - backend cannot run this shape: skip it
                print(f"attention {backend} {(b, hq, hk, s, hd)}: {type(ex).__name__}", file=sys.stderr)
            del q, k, v
    return cols, rows


def bench_decode_attention(device, quick: bool) -> tuple[list[str], list[list]]:
    """Decode attention (q_len 1 over a KV cache, SDPA's own choice of kernel), KV 512 to 128k, shuffled so that
    a budget cut keeps every KV length."""
    torch = require_torch()
    F = torch.nn.functional
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    cols = ["backend", "pass", "batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim", "causal", "time_s"]
    rows = []
    cases = [(kv, b, hd, hq, hk) for kv in (512, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
             for b in (1, 4, 16, 64, 256)
             for hd, hq, hk in ((128, 8, 1), (128, 32, 8), (128, 4, 1), (64, 16, 16), (128, 64, 8), (256, 16, 8),
                                (64, 32, 8), (128, 40, 8))
             if b * hk * kv * hd * 2 * 2 <= 16e9]
    random.Random(31).shuffle(cases)
    if quick:
        cases = [(64, 2, 32, 4, 2)]
    for (kv, b, hd, hq, hk) in cases:
        if _Budget.spent():
            break
        q = torch.randn(b, hq, 1, hd, device=device, dtype=bf)
        k = torch.randn(b, hk, kv, hd, device=device, dtype=bf)
        v = torch.randn(b, hk, kv, hd, device=device, dtype=bf)
        try:
            t = _timed(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=hq != hk), device, cuda)
            rows.append(["default", "decode", b, hq, hk, 1, kv, hd, 0, t])
        except Exception as ex:  # noqa: BLE001 - this shape cannot run here: say so, keep going
            print(f"decode attention {(b, hq, hk, kv, hd)}: {type(ex).__name__}", file=sys.stderr)
        del q, k, v
    return cols, rows


# ---------------------------------------------------------------- small, grouped and FP8 GEMMs
def bench_gemm(device, quick: bool) -> tuple[list[str], list[list]]:
    """Small-M GEMMs / GEMVs (decode), grouped GEMMs (MoE experts), FP8 _scaled_mm and its cast kernels."""
    torch = require_torch()
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    cols = ["kind", "m", "n", "k", "groups", "dtype", "time_s"]
    rows = []
    nk = [(4096, 4096), (1280, 5120), (5120, 1792), (14336, 4096), (4096, 14336), (28672, 8192), (8192, 3584),
          (1024, 8192), (6144, 4096), (8192, 8192)]
    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    if quick:
        nk, ms = [(64, 64)], [1, 8]
    for (n, k) in nk:
        w = torch.randn(k, n, device=device, dtype=bf)
        for m in ms:
            if _Budget.spent():
                break
            a = torch.randn(m, k, device=device, dtype=bf)
            rows.append(["small_m", m, n, k, 1, "bf16", _timed(lambda a=a: a @ w, device, cuda)])
    # grouped GEMM: E experts, tokens per expert m (balanced), as torch._grouped_mm runs it, and as a loop
    grouped = getattr(torch, "_grouped_mm", None)
    for E in ([8, 16, 64, 128] if not quick else [2]):
        for (n, k) in ([(2048, 4096), (4096, 1024), (1536, 2048), (14336, 4096)] if not quick else [(64, 64)]):
            for m in ([16, 64, 256, 1024, 4096] if not quick else [8]):
                if _Budget.spent():
                    break
                if E * m * max(n, k) * 2 > 4e9 or E * n * k * 2 > 8e9:
                    continue
                a = torch.randn(E * m, k, device=device, dtype=bf)
                w = torch.randn(E, k, n, device=device, dtype=bf)
                if grouped is not None and cuda:
                    offs = torch.arange(m, E * m + 1, m, device=device, dtype=torch.int32)
                    try:
                        wt = w.transpose(-2, -1).contiguous().transpose(-2, -1)
                        rows.append(["grouped_mm", m, n, k, E, "bf16",
                                     _timed(lambda: grouped(a, wt, offs=offs), device, cuda)])
                    except Exception as ex:  # noqa: BLE001
                        print(f"_grouped_mm {(E, m, n, k)}: {type(ex).__name__}: {ex}", file=sys.stderr)
                if E <= 16:
                    def loop(a=a, w=w, E=E, m=m):
                        for e in range(E):
                            a[e * m:(e + 1) * m] @ w[e]
                    rows.append(["expert_loop", m, n, k, E, "bf16", _timed(loop, device, cuda)])
                rows.append(["bmm", m, n, k, E, "bf16",
                             _timed(lambda a=a, w=w, E=E, m=m: torch.bmm(a.view(E, m, k), w), device, cuda)])
                del a, w
    # FP8: per-tensor scaled e4m3 GEMM, and the amax + scale + cast kernels that feed it
    if cuda and hasattr(torch, "float8_e4m3fn"):
        for (m, n, k) in [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 1280, 5120), (16384, 5120, 1792),
                          (8192, 28672, 8192), (8192, 8192, 3584), (2048, 14336, 4096), (32768, 4096, 14336),
                          (1024, 1024, 1024), (4096, 6144, 4096), (8192, 4096, 14336), (512, 8192, 8192)]:
            a = torch.randn(m, k, device=device, dtype=bf)
            b = torch.randn(n, k, device=device, dtype=bf)
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=device)
            try:
                rows.append(["fp8_scaled_mm", m, n, k, 1, "fp8",
                             _timed(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=bf), device, cuda)])
            except Exception as ex:  # noqa: BLE001
                print(f"_scaled_mm {(m, n, k)}: {type(ex).__name__}: {ex}", file=sys.stderr)
            rows.append(["bf16_mm", m, n, k, 1, "bf16", _timed(lambda: a @ b.t(), device, cuda)])

            def cast(a=a):
                s = a.abs().amax().float().clamp(min=1e-12) / 448.0
                return (a / s).to(torch.float8_e4m3fn)
            rows.append(["fp8_cast", m, k, 0, 1, "fp8", _timed(cast, device, cuda)])
            del a, b, a8, b8
    return cols, rows


# ---------------------------------------------------------------- whole layers
def _model_tps():
    """(model, tp) of every LAYER_MODELS block whose heads and FFN split over tp."""
    return [(name, tp) for name, (_, nh, _, _, F_, _) in LAYER_MODELS.items() for tp in (1, 2, 4, 8)
            if nh % tp == 0 and F_ % tp == 0]


def _rank_block(name: str, tp: int, quick: bool) -> tuple[int, int, int, int, int]:
    """(hidden, query heads, KV heads, head_dim, FFN columns) of one TP rank's block (tiny with quick)."""
    H, nh, nk, hd, F_, _V = LAYER_MODELS[name]
    if quick:
        H, nh, nk, hd, F_, tp = 256, 8, 8, 32, 512, 1
    return H, nh // tp, max(1, nk // tp), hd, F_ // tp


def bench_layers(device, quick: bool) -> tuple[list[str], list[list]]:
    """Whole blocks (one TP rank's share) forward only and forward + backward, 4k to 32k tokens."""
    torch = require_torch()
    cols = ["model", "tp", "batch", "seq", "pass", "hidden", "heads", "kv_heads", "head_dim", "ffn", "time_s"]
    rows = []
    bf = torch.bfloat16
    cases = [(name, tp, b, s) for name, tp in _model_tps()
             for (b, s) in ((1, 4096), (2, 4096), (1, 8192), (1, 16384), (1, 32768))]
    random.Random(3).shuffle(cases)
    cases = cases[:60]
    if quick:
        cases = [("llama-3.2-3b", 8, 1, 64)]
    for (name, tp, b, s) in cases:
        if _Budget.spent():
            break
        H, hq, hk, hd, Fl = _rank_block(name, tp, quick)
        p = _block(torch, H, hq, hk, hd, Fl, device, bf)
        x = torch.randn(b, s, H, device=device, dtype=bf, requires_grad=True)
        cos = torch.randn(s, 1, hd, device=device, dtype=bf)
        sin = torch.randn(s, 1, hd, device=device, dtype=bf)
        with torch.no_grad():
            tf = _eager_time(lambda: _block_fwd(torch, p, x, cos, sin, hq, hk, hd), device, target_s=0.05)
        g = torch.randn(b, s, H, device=device, dtype=bf)

        def fb():
            y = _block_fwd(torch, p, x, cos, sin, hq, hk, hd)
            torch.autograd.backward(y, g)
        tfb = _eager_time(fb, device, target_s=0.05)
        rows.append([name, tp, b, s, "fwd", H, hq, hk, hd, Fl, tf])
        rows.append([name, tp, b, s, "fwd_bwd", H, hq, hk, hd, Fl, tfb])
        del p, x, g
    return cols, rows


def bench_decode(device, quick: bool) -> tuple[list[str], list[list]]:
    """One-layer decode steps in a CUDA graph: one token per sequence, KV cache 4k to 128k, batch 1 to 256."""
    torch = require_torch()
    cuda = device.type == "cuda"
    cols = ["model", "tp", "batch", "kv_len", "hidden", "heads", "kv_heads", "head_dim", "ffn", "graph", "time_s"]
    rows = []
    cases = [(name, tp, b, kv) for name, tp in _model_tps() for b in (1, 4, 16, 64, 256)
             for kv in (4096, 16384, 32768, 131072)]
    rng = random.Random(5)
    rng.shuffle(cases)
    if quick:
        cases = [("llama-3.2-3b", 8, 2, 64)]
    for (name, tp, b, kv) in cases[:160]:
        if _Budget.spent():
            break
        H, hq, hk, hd, Fl = _rank_block(name, tp, quick)
        if b * hk * kv * hd * 2 * 2 > 24e9:
            continue
        with torch.no_grad():
            step = decode_step(torch, name, tp, b, kv, device, quick)
            t = _timed(step, device, cuda)
            rows.append([name, tp, b, kv, H, hq, hk, hd, Fl, int(cuda), t])
        del step
    return cols, rows


def decode_step(torch, name: str, tp: int, b: int, kv: int, device, quick: bool):
    """One decode step of one TP rank's block (random weights, KV caches of kv_len kv filled to the last position):
    the step bench_decode times (benchmarks/profile_decode_step.py profiles the same)."""
    bf = torch.bfloat16
    H, hq, hk, hd, Fl = _rank_block(name, tp, quick)
    p = _block(torch, H, hq, hk, hd, Fl, device, bf)
    K = torch.randn(b, hk, kv, hd, device=device, dtype=bf)
    V = torch.randn(b, hk, kv, hd, device=device, dtype=bf)
    x = torch.randn(b, 1, H, device=device, dtype=bf)
    cos = torch.randn(1, 1, hd, device=device, dtype=bf)
    sin = torch.randn(1, 1, hd, device=device, dtype=bf)
    pos = torch.tensor([kv - 1], device=device)
    return lambda: _block_fwd(torch, p, x, cos, sin, hq, hk, hd, (K, V), pos)


BENCHES = {"floor": bench_floor, "memory": bench_memory, "attention": bench_attention, "gemm": bench_gemm,
           "layers": bench_layers, "decode": bench_decode, "fp8": bench_fp8, "moe": bench_moe,
           "attn_backends": bench_attn_backends,
           "decode_attention": bench_decode_attention, "eager_ops": bench_eager_ops,
           "optimizer": bench_optimizer, "gemm_cold": bench_gemm_cold,
           "decode_kernels": bench_decode_kernels, "optimizer_mix": bench_optimizer_mix,
           "moe_train": bench_moe_train, "act_chunked": bench_act_chunked, "decode_cold": bench_decode_cold,
           "optimizer_burst": bench_optimizer_burst, "decode_fresh": bench_decode_fresh,
           "optimizer_setup": bench_optimizer_setup, "after_stream_large": bench_after_stream_large,
           "gemm_pair": bench_gemm_pair, "moe_grad": bench_moe_grad, "moe_host": bench_moe_host,
           "gemm_under_comm": bench_gemm_under_comm,
           "attn_graph": bench_attn_graph, "attn_graph_cudnn": bench_attn_graph_cudnn,
           "attn_graph_efficient": bench_attn_graph_efficient, "norm_bwd": bench_norm_bwd,
           "grouped_wgrad": bench_grouped_wgrad,
           "fp8_cast_parts": bench_fp8_cast_parts, "moe_fp8_host": bench_moe_fp8_host,
           "memory_graph": bench_memory_graph, "l2_reuse": bench_l2_reuse,
           "steady_ops": bench_steady_ops,
           "fp8_mm": bench_fp8_mm, "norm_width": bench_norm_width, "decode_attn_small": bench_decode_attn_small,
           "cp_attention": bench_cp_attention, "bmm_attn": bench_bmm_attn}


def main(argv: list[str] | None = None) -> int:
    """Run the chosen families and write ops-<family>.json calibration files under --out."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default=",".join(FAMILIES))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpu", default="h200-sxm")
    ap.add_argument("--script", default="python -m c3kit.runtime.bench.ops")
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="per family: stop taking new cases after this")
    a = ap.parse_args(argv)
    torch = require_torch()
    from pathlib import Path

    from c3kit.cost.calib_store import op_calibration_path
    from c3kit.runtime.calib import write_measurement

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    fams = [f for f in a.only.split(",") if f]
    bad = [f for f in fams if f not in FAMILIES]
    if bad:
        print(f"error: unknown family {bad[0]!r}: use {', '.join(FAMILIES)}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for fam in fams:
        t0 = _time.perf_counter()
        _Budget.deadline = t0 + a.budget_s
        cols, rows = BENCHES[fam](device, a.quick)
        path = op_calibration_path(a.gpu, fam, out)
        write_measurement(path, "ops-" + fam, cols, rows,
                          " ".join(["python -m c3kit.runtime.bench.ops"] + (argv or sys.argv[1:])), a.script)
        print(f"{fam}: {len(rows)} rows in {_time.perf_counter() - t0:.1f} s -> {path}", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
