"""Microbenchmarks of the small kernels around a decode step and of the optimizer step's tensor mix: KV-cache
writes (index_copy into [batch, kv_heads, max_len, head_dim] caches), the greedy argmax over the vocabulary,
the token embedding gather, and sequences of different kernels in one CUDA graph against the sum of their
back-to-back prices (does a kernel that follows a different kernel cost more than one that repeats?).
Fused AdamW over the parameter tensors of whole models against the same parameter count in a random mix.
The small kernels of a decode step inside a CUDA graph right after a weight stream that empties L2 (cold) against
the same kernels repeated back to back (warm); AdamW right after a burst of GEMMs against an idle GPU.

Families of `python -m c3kit.runtime.bench.ops --only decode_kernels,optimizer_mix,decode_cold,optimizer_burst`.
"""

from __future__ import annotations

import random
import sys

from c3kit.runtime._torch import require_torch
from c3kit.runtime.bench.ops_recipes import fused_adamw, random_split
from c3kit.runtime.bench.ops_recipes import rope_rotate_half as _rope
from c3kit.runtime.bench.timing import Budget, capture_graph, eager_time, elapsed, graph_time, timed

DECODE_COLUMNS = ["kind", "batch", "heads", "kv_len", "width", "dtype", "bytes", "time_s"]


def _kv_write_rows(torch, device, cuda: bool, quick: bool) -> list[list]:
    """index_copy_ of one new token's K (a transposed view, as attention code writes it) into a bf16 cache."""
    bf = torch.bfloat16
    rows = []
    cases = [(b, hk, hd, L) for b in (1, 4, 16, 64, 256) for hk in (1, 2, 8) for hd in (64, 128)
             for L in (4096, 32768)]
    if quick:
        cases = [(2, 2, 32, 64)]
    for (b, hk, hd, L) in cases:
        if Budget.spent() or b * hk * L * hd * 2 > 8e9:
            continue
        K = torch.zeros(b, hk, L, hd, device=device, dtype=bf)
        k = torch.randn(b, 1, hk, hd, device=device, dtype=bf).transpose(1, 2)
        pos = torch.tensor([L - 1], device=device)
        rows.append(["kv_write", b, hk, L, hd, "bf16", 2.0 * b * hk * hd * 2,
                     timed(lambda K=K, k=k, pos=pos: K.index_copy_(2, pos, k), device, cuda)])
        del K, k
    return rows


def _argmax_rows(torch, device, cuda: bool, quick: bool) -> list[list]:
    """Greedy sampling: argmax over [batch, vocab] logits in bf16 (the lm_head's output) and fp32."""
    rows = []
    vocabs = (32000, 128256, 152064, 256000) if not quick else (1000,)
    for V in vocabs:
        for b in ((1, 4, 16, 64, 256) if not quick else (2,)):
            for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
                if Budget.spent():
                    return rows
                x = torch.randn(b, V, device=device, dtype=dt)
                rows.append(["argmax", b, 1, 0, V, name, float(x.numel() * x.element_size()),
                             timed(lambda x=x: x.argmax(dim=-1), device, cuda)])
                del x
    return rows


def _embedding_rows(torch, device, cuda: bool, quick: bool) -> list[list]:
    """The token embedding gather of a decode step: b rows of a [vocab, hidden] bf16 table."""
    rows = []
    V = 128256 if not quick else 1000
    for H in ((2048, 4096, 8192) if not quick else (64,)):
        emb = torch.randn(V, H, device=device, dtype=torch.bfloat16)
        for b in ((1, 16, 256) if not quick else (2,)):
            tok = torch.randint(0, V, (b, 1), device=device)
            rows.append(["embedding", b, 1, 0, H, "bf16", 2.0 * b * H * 2,
                         timed(lambda emb=emb, tok=tok: torch.nn.functional.embedding(tok, emb), device, cuda)])
        del emb
    return rows


def _sequence_rows(torch, device, cuda: bool, quick: bool) -> list[list]:
    """A decode-like mix of different small kernels (norm, GEMV, copy, add, SiLU-mul) repeated in one CUDA graph:
    kind seq_mix is the graph's time per kernel, seq_sum the mean of the same kernels each timed back-to-back."""
    F = torch.nn.functional
    bf = torch.bfloat16
    rows = []
    for (b, H) in (((1, 2048), (1, 4096), (16, 4096), (64, 4096)) if not quick else ((2, 64),)):
        x = torch.randn(b, H, device=device, dtype=bf)
        w = torch.ones(H, device=device, dtype=bf)
        W = torch.randn(H, H, device=device, dtype=bf) * 0.02
        y = torch.empty_like(x)
        kern = [lambda: F.rms_norm(x, (H,), w, 1e-5), lambda: x @ W, lambda: y.copy_(x),
                lambda: torch.add(x, y, out=y), lambda: F.silu(x) * y]
        per = [timed(k, device, cuda) for k in kern]
        n_rep = 20 if not quick else 2

        def mix():
            for _ in range(n_rep):
                for k in kern:
                    k()
        if cuda:
            t_mix = graph_time(mix, device, calls=1) / (n_rep * len(kern))
        else:
            t_mix = eager_time(mix, device) / (n_rep * len(kern))
        rows.append(["seq_mix", b, 1, 0, H, "bf16", 0.0, t_mix])
        rows.append(["seq_sum", b, 1, 0, H, "bf16", 0.0, sum(per) / len(per)])
        del x, w, W, y
    return rows


def bench_decode_kernels(device, quick: bool) -> tuple[list[str], list[list]]:
    """KV-cache writes, argmax over the vocabulary, embedding gathers and mixed-kernel graph sequences."""
    torch = require_torch()
    cuda = device.type == "cuda"
    rows: list[list] = []
    with torch.no_grad():
        for part in (_kv_write_rows, _argmax_rows, _embedding_rows, _sequence_rows):
            if Budget.spent():
                break
            rows += part(torch, device, cuda, quick)
            if cuda:
                torch.cuda.empty_cache()
    return DECODE_COLUMNS, rows


def _model_shapes(name: str, quick: bool) -> list[int]:
    """Element counts of every parameter tensor of a training-step model (train_step's own parameter list)."""
    torch = require_torch()
    from c3kit.runtime.bench.train_step import TRAIN_MODELS, _flat, _params

    shape = TRAIN_MODELS[name] if not quick else (2, 128, 4, 2, 32, 256, 1000)
    return [t.numel() for t in _flat(_params(torch, *shape, torch.device("meta")))]


def bench_optimizer_mix(device, quick: bool) -> tuple[list[str], list[list]]:
    """Fused AdamW over whole models' parameter tensors and over the same count in a random mix of large tensors,
    in the memory family's columns (op adamw_fused, pass model:<name> or mix, tokens = tensors, width = params)."""
    torch = require_torch()
    from c3kit.runtime.bench.train_step import TRAIN_MODELS

    cols = ["op", "pass", "tokens", "width", "bytes", "time_s"]
    rows: list[list] = []
    rng = random.Random(43)
    for name in (list(TRAIN_MODELS) if not quick else [next(iter(TRAIN_MODELS))]):
        try:
            shapes = _model_shapes(name, quick)
        except Exception as ex:  # noqa: BLE001 - the meta device is missing on this build: say so, go on
            print(f"optimizer_mix {name}: {type(ex).__name__}: {ex}", file=sys.stderr)
            continue
        n_params = sum(shapes)
        mix = random_split(n_params, [4096 * 4096, 4096 * 1024, 4096 * 14336 // 2, 2048 * 8192], rng)
        for label, sizes in ((f"model:{name}", shapes), ("mix", mix), ("one", [n_params])):
            if Budget.spent():
                return cols, rows
            try:
                ps, opt = fused_adamw(torch, sizes, device)
                rows.append(["adamw_fused", label, len(ps), n_params, 28.0 * n_params,
                             eager_time(opt.step, device, target_s=0.05, repeats=3)])
                rows.append(["zero_grad", label, len(ps), n_params, 4.0 * n_params,
                             eager_time(lambda ps=ps: torch._foreach_zero_([p.grad for p in ps]), device,
                                        target_s=0.02, repeats=3)])
            except Exception as ex:  # noqa: BLE001 - out of memory at this size: say so, keep going
                print(f"optimizer_mix {label}: {type(ex).__name__}", file=sys.stderr)
            ps = opt = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return cols, rows


# MoE expert layers of published models (Hugging Face config.json): hidden, expert FFN width, experts, top-k
MOE_LAYERS = {"qwen3-30b-a3b": (2048, 768, 128, 8), "olmoe-1b-7b": (2048, 1024, 64, 8),
              "qwen3-235b-a22b": (4096, 1536, 128, 8), "mixtral-8x7b": (4096, 14336, 8, 2),
              "deepseek-v3": (7168, 2048, 256, 8)}
MOE_TRAIN_COLUMNS = ["kind", "model", "tokens", "hidden", "ffn", "experts", "top_k", "ep", "pass", "time_s"]


def bench_moe_train(device, quick: bool) -> tuple[list[str], list[list]]:
    """The expert GEMMs of MoE training with torch._grouped_mm at a random router's counts: gate+up (N = 2 x ffn)
    and down (N = hidden) forward, and forward + backward (dgrad and wgrad by autograd), for each model's local
    experts at expert parallelism 1 and 8 (E / ep experts receive the rank's tokens x top-k rows)."""
    torch = require_torch()
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    rows: list[list] = []
    grouped = getattr(torch, "_grouped_mm", None)
    if grouped is None:
        return MOE_TRAIN_COLUMNS, rows  # this build has no grouped GEMM
    gen = torch.Generator(device=device).manual_seed(1)
    layers = MOE_LAYERS if not quick else {"tiny": (32, 24, 8, 2)}
    for name, (H, F, E, k) in layers.items():
        for ep in ((1, 8) if not quick else (1,)):
            if E % ep:
                continue
            el = E // ep
            for T in ((4096, 16384) if not quick else (16,)):
                if Budget.spent():
                    return MOE_TRAIN_COLUMNS, rows
                rows_n = T * k
                if el * H * 2 * F * 2 * 3 > 20e9 or rows_n * max(H, 2 * F) * 2 * 4 > 20e9:
                    continue
                # the router's top-k over all E experts; this rank keeps the rows of its first el experts, scaled
                # to T x k rows in all as balanced EP dispatch gives each rank on average
                ids = torch.randint(0, E, (rows_n,), device=device, generator=gen)
                counts = torch.bincount(ids % el, minlength=el)
                offs = torch.cumsum(counts, 0).to(torch.int32)
                try:
                    x = torch.randn(rows_n, H, device=device, dtype=bf, requires_grad=True)
                    w1 = (torch.randn(el, 2 * F, H, device=device, dtype=bf) * 0.02).transpose(-2, -1).requires_grad_()
                    h = torch.randn(rows_n, F, device=device, dtype=bf, requires_grad=True)
                    w2 = (torch.randn(el, H, F, device=device, dtype=bf) * 0.02).transpose(-2, -1).requires_grad_()
                    for kind, a, w in (("gate_up", x, w1), ("down", h, w2)):
                        with torch.no_grad():
                            tf = timed(lambda a=a, w=w: grouped(a, w, offs=offs), device, cuda)
                        g = torch.randn(rows_n, w.shape[-1], device=device, dtype=bf)

                        def fb(a=a, w=w, g=g):
                            y = grouped(a, w, offs=offs)
                            torch.autograd.backward(y, g)
                        tfb = eager_time(fb, device, target_s=0.03, repeats=3)
                        rows.append([kind, name, T, H, F, el, k, ep, "fwd", tf])
                        rows.append([kind, name, T, H, F, el, k, ep, "fwd_bwd", tfb])
                except Exception as ex:  # noqa: BLE001 - not supported / out of memory here: say so, keep going
                    print(f"moe_train {name} ep{ep} T{T}: {type(ex).__name__}: {ex}", file=sys.stderr)
                x = w1 = h = w2 = None
                if cuda:
                    torch.cuda.empty_cache()
    return MOE_TRAIN_COLUMNS, rows


MOE_GRAD_COLUMNS = ["kind", "model", "tokens", "hidden", "ffn", "experts", "top_k", "ep", "routing", "pass", "time_s"]


def bench_moe_grad(device, quick: bool) -> tuple[list[str], list[list]]:
    """The backward of the moe_train expert GEMMs split into its parts, each inside a CUDA graph (no eager host time,
    no .grad accumulation): forward; forward + the input gradient (dgrad); forward + the weight gradient (wgrad);
    forward + both (autograd.grad, as the backward runs them); and the in-place add that accumulates a weight
    gradient into an existing .grad of the parameter's (transposed) layout. Each at the router's random counts and at
    balanced counts (every local expert the same rows), so the grouped class's tile count under uneven groups is
    measured against even ones."""
    torch = require_torch()
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    rows: list[list] = []
    grouped = getattr(torch, "_grouped_mm", None)
    if grouped is None:
        return MOE_GRAD_COLUMNS, rows
    gen = torch.Generator(device=device).manual_seed(1)
    layers = MOE_LAYERS if not quick else {"tiny": (32, 24, 8, 2)}
    for name, (H, F, E, k) in layers.items():
        for ep in ((1, 8) if not quick else (1,)):
            if E % ep:
                continue
            el = E // ep
            for T in ((4096, 16384) if not quick else (16,)):
                rows_n = T * k
                if el * H * 2 * F * 2 * 4 > 20e9 or rows_n * max(H, 2 * F) * 2 * 4 > 20e9:
                    continue
                ids = torch.randint(0, E, (rows_n,), device=device, generator=gen)
                routed = torch.bincount(ids % el, minlength=el)
                even = torch.full((el,), rows_n // el, device=device, dtype=routed.dtype)
                even[: rows_n - int(even.sum())] += 1
                for routing, counts in (("random", routed), ("balanced", even)):
                    if Budget.spent():
                        return MOE_GRAD_COLUMNS, rows
                    offs = torch.cumsum(counts, 0).to(torch.int32)
                    try:
                        for kind, K, N in (("gate_up", H, 2 * F), ("down", F, H)):
                            a = torch.randn(rows_n, K, device=device, dtype=bf, requires_grad=True)
                            w = (torch.randn(el, N, K, device=device, dtype=bf) * 0.02).transpose(-2, -1)
                            w.requires_grad_()
                            g = torch.randn(rows_n, N, device=device, dtype=bf)

                            def fwd(a=a, w=w, offs=offs):
                                with torch.no_grad():
                                    grouped(a, w, offs=offs)

                            def part(inputs, a=a, w=w, g=g, offs=offs):
                                return lambda: torch.autograd.grad(grouped(a, w, offs=offs), inputs, g)
                            times = {"fwd": timed(fwd, device, cuda), "fwd_dgrad": timed(part((a,)), device, cuda),
                                     "fwd_wgrad": timed(part((w,)), device, cuda),
                                     "fwd_bwd": timed(part((a, w)), device, cuda)}
                            acc = torch.zeros_like(w)
                            new = torch.randn(el, K, N, device=device, dtype=bf)
                            times["grad_accumulate"] = timed(lambda acc=acc, new=new: acc.add_(new), device, cuda)
                            for ps, t in times.items():
                                rows.append([kind, name, T, H, F, el, k, ep, routing, ps, t])
                            a = w = g = acc = new = None
                    except Exception as ex:  # noqa: BLE001 - not supported / out of memory here: say so, keep going
                        print(f"moe_grad {name} ep{ep} T{T}: {type(ex).__name__}: {ex}", file=sys.stderr)
                    if cuda:
                        torch.cuda.empty_cache()
    return MOE_GRAD_COLUMNS, rows


def bench_act_chunked(device, quick: bool) -> tuple[list[str], list[list]]:
    """SwiGLU over the two halves of one GEMM output (gate, up = h.chunk(2, -1): strided views, as code with one
    fused gate+up projection runs it), forward (CUDA graph) and backward to the two views (autograd, without the
    chunk's own cat), in the memory family's columns (op swiglu_chunked, width = the FFN half); and the forward on
    contiguous copies of the halves (op swiglu) in the same run."""
    torch = require_torch()
    cuda = device.type == "cuda"
    F = torch.nn.functional
    bf = torch.bfloat16
    cols = ["op", "pass", "tokens", "width", "bytes", "time_s"]
    rows: list[list] = []
    tokens = (2048, 4096, 8192, 16384, 32768) if not quick else (64,)
    widths = (1024, 1792, 2048, 3584, 4096, 6912, 7168, 14336) if not quick else (32,)
    for T in tokens:
        for W in widths:
            if Budget.spent() or T * 2 * W * 2 * 6 > 16e9:
                continue
            h = torch.randn(T, 2 * W, device=device, dtype=bf, requires_grad=True)
            g, u = h.chunk(2, dim=-1)
            e = T * W * 2
            with torch.no_grad():
                rows.append(["swiglu_chunked", "fwd", T, W, 3.0 * e, timed(lambda g=g, u=u: F.silu(g) * u, device, cuda)])
            y = F.silu(g) * u
            gy = torch.randn(T, W, device=device, dtype=bf)
            rows.append(["swiglu_chunked", "bwd", T, W, 5.0 * e,
                         timed(lambda y=y, g=g, u=u, gy=gy: torch.autograd.grad(y, (g, u), gy, retain_graph=True),
                               device, cuda, graph=False)])
            gc_, uc = g.detach().contiguous(), u.detach().contiguous()
            with torch.no_grad():  # the same kernel on contiguous halves (kind swiglu), timed in the same run
                rows.append(["swiglu", "fwd", T, W, 3.0 * e, timed(lambda: F.silu(gc_) * uc, device, cuda)])
            del h, g, u, y, gy, gc_, uc
    return cols, rows


DECODE_COLD_COLUMNS = ["op", "batch", "hidden", "width", "bytes", "warm_s", "cold_s", "stream_s"]
STREAM_BYTES = 160e6  # the weight stream before each cold kernel: over three times the H200's 50 MB L2


def _replays(graph, device, n: int) -> list[float]:
    """Seconds of n replays of a captured CUDA graph, each timed on its own."""
    return [elapsed(graph.replay, device) for _ in range(n)]


def _cold_pair(device, stream, op, n_rep: int = 12, repeats: int = 15) -> tuple[float, float, float]:
    """(warm, cold, stream) seconds per call: op repeated back to back in a graph; op right after the weight
    stream (graph of [stream, op] x n minus the graph of [stream] x n); the stream alone. The stream-only and
    pair graphs are replayed interleaved so that clock drift falls on both."""
    import statistics

    warm_g = capture_graph([op] * n_rep, device)
    only_g = capture_graph([stream] * n_rep, device)
    pair_g = capture_graph([f for _ in range(n_rep) for f in (stream, op)], device)
    only, pair = [], []
    for _ in range(repeats):
        only += _replays(only_g, device, 1)
        pair += _replays(pair_g, device, 1)
    warm = statistics.median(_replays(warm_g, device, repeats)) / n_rep
    t_only, t_pair = statistics.median(only) / n_rep, statistics.median(pair) / n_rep
    return warm, t_pair - t_only, t_only


def _decode_small_ops(torch, b: int, H: int, device) -> list[tuple[str, int, float, object]]:
    """(op, width, bytes, call) of the small kernels of a Llama-style decode step at batch b and hidden H, written
    as ops.decode_step writes them (head dim 128, 8 KV heads, FFN 3.5 H per rank at TP 1)."""
    F = torch.nn.functional
    bf = torch.bfloat16
    hd, hk, hq, Ff = 128, 8, H // 128, int(3.5 * H) // 256 * 256
    x = torch.randn(b, H, device=device, dtype=bf)
    y = torch.randn(b, H, device=device, dtype=bf)
    w = torch.ones(H, device=device, dtype=bf)
    gu = torch.randn(b, 2 * Ff, device=device, dtype=bf)
    q = torch.randn(b, 1, hq, hd, device=device, dtype=bf)
    cos = torch.randn(1, 1, hd, device=device, dtype=bf)
    sin = torch.randn(1, 1, hd, device=device, dtype=bf)
    L = 4096 if b <= 256 else 64  # prefill-sized rows: a short cache keeps it in memory
    K = torch.zeros(b, hk, L, hd, device=device, dtype=bf)
    k = torch.randn(b, 1, hk, hd, device=device, dtype=bf).transpose(1, 2)
    pos = torch.tensor([L - 1], device=device)
    logits = torch.randn(b, 128256, device=device, dtype=bf)
    emb = torch.randn(128256, H, device=device, dtype=bf)
    tok = torch.randint(0, 128256, (b, 1), device=device)

    def swiglu():
        g, u = gu.chunk(2, dim=-1)
        return F.silu(g) * u
    return [("rmsnorm", H, 4.0 * b * H, lambda: F.rms_norm(x, (H,), w, 1e-5)),
            ("add", H, 6.0 * b * H, lambda: torch.add(x, y, out=y)),
            ("swiglu_chunked", Ff, 6.0 * b * Ff, swiglu),
            ("rope", hq * hd, 4.0 * b * hq * hd, lambda: _rope(q, cos, sin)),
            ("index_copy", hk * hd, 4.0 * b * hk * hd, lambda: K.index_copy_(2, pos, k)),
            ("argmax", 128256, 2.0 * b * 128256, lambda: logits.argmax(dim=-1)),
            ("embedding", H, 4.0 * b * H, lambda: F.embedding(tok, emb))]


DECODE_ROWS = (1, 4, 16, 64, 256)
LARGE_ROWS = (1024, 4096, 16384)  # prefill / training forward sizes: does the after-stream cost stay, grow or go?


def bench_decode_cold(device, quick: bool, rows_of: tuple = DECODE_ROWS) -> tuple[list[str], list[list]]:
    """Small decode kernels in a CUDA graph right after a GEMV that streams STREAM_BYTES of weights (their own
    weights and inputs evicted from L2, as in a real decode step) against the same kernel back to back."""
    def ops_of(torch, b, H, out, device):
        return _decode_small_ops(torch, b, H, device)  # inputs of their own, not the stream's output
    return _after_stream(device, quick, rows_of, ops_of)


def _after_stream(device, quick: bool, rows_of: tuple, ops_of) -> tuple[list[str], list[list]]:
    """Rows of DECODE_COLD_COLUMNS: each kernel of ops_of(torch, rows, hidden, stream output, device) timed by
    _cold_pair after a GEMV of b rows that streams STREAM_BYTES of weights into its output, hidden 2048-8192."""
    torch = require_torch()
    rows: list[list] = []
    if device.type != "cuda":
        return DECODE_COLD_COLUMNS, rows  # needs CUDA graphs and an L2 to empty: nothing to time on the CPU
    bf = torch.bfloat16
    cases = [(b, H) for H in (2048, 4096, 8192) for b in rows_of]
    n_rep = 12 if max(rows_of) <= 256 else 4
    if quick:
        cases = [(2, 256)]
    with torch.no_grad():
        for (b, H) in cases:
            if Budget.spent():
                break
            N = int(STREAM_BYTES / (2 * H)) // 128 * 128
            xs = torch.randn(b, H, device=device, dtype=bf)
            W = torch.randn(H, N, device=device, dtype=bf) * 0.02
            out = torch.empty(b, N, device=device, dtype=bf)
            stream = (lambda xs=xs, W=W, out=out: torch.matmul(xs, W, out=out))
            for (op, width, nbytes, call) in ops_of(torch, b, H, out, device):
                if Budget.spent():
                    break
                warm, cold, t_stream = _cold_pair(device, stream, call, n_rep)
                rows.append([op, b, H, width, nbytes, warm, cold, t_stream])
            del xs, W, out
            torch.cuda.empty_cache()
    return DECODE_COLD_COLUMNS, rows


def bench_optimizer_burst(device, quick: bool) -> tuple[list[str], list[list]]:
    """Fused AdamW timed once right after a burst of large GEMMs, once after the GPU idled, and in a steady loop,
    in the memory family's columns (op adamw_fused, pass after_burst / after_idle / steady)."""
    import statistics
    import time as _t

    from c3kit.runtime.bench.timing import elapsed, sync

    torch = require_torch()
    cols = ["op", "pass", "tokens", "width", "bytes", "time_s"]
    rows: list[list] = []
    cuda = device.type == "cuda"
    n_gemm = 8192 if not quick else 64
    a = torch.randn(n_gemm, n_gemm, device=device, dtype=torch.bfloat16 if cuda else torch.float32)
    rng = random.Random(47)
    for n_params in ((1e8, 5e8, 1e9) if not quick else (1e5,)):
        if Budget.spent():
            break
        sizes = random_split(int(n_params), [4096 * 4096, 4096 * 1024, 4096 * 14336 // 2, 2048 * 8192]
                             if not quick else [1000], rng)
        ps, opt = fused_adamw(torch, sizes, device)
        opt.step()
        sync(device)
        burst, idle = [], []
        for _ in range(5 if not quick else 1):
            t0 = _t.perf_counter()
            while _t.perf_counter() - t0 < (0.5 if not quick else 0.01):
                for _ in range(8):
                    a @ a
                sync(device)
            burst.append(elapsed(opt.step, device))
            _t.sleep(1.0 if not quick else 0.01)
            idle.append(elapsed(opt.step, device))
        steady = eager_time(opt.step, device, target_s=0.05, repeats=3)
        n = int(n_params)
        for label, t in (("after_burst", statistics.median(burst)), ("after_idle", statistics.median(idle)),
                         ("steady", steady)):
            rows.append(["adamw_fused", label, len(ps), n, 28.0 * n, t])
        ps = opt = None
        if cuda:
            torch.cuda.empty_cache()
    return cols, rows


def _fresh_ops(torch, b: int, H: int, out, device) -> list[tuple[str, int, float, object]]:
    """(op, width, bytes, call) of the decode kernels whose input a real step has just written: each reads a slice
    of `out`, the output of the weight stream before it (RoPE and the KV write on q / k, SwiGLU on gate and up,
    RMSNorm on the residual sum with its weight cold, the residual add with the residual cold)."""
    F = torch.nn.functional
    bf = torch.bfloat16
    hd, hk, hq = 128, 8, H // 128
    N = out.shape[1]
    Ff = min(int(3.5 * H) // 256 * 256, N // 2)
    w = torch.ones(H, device=device, dtype=bf)
    resid = torch.randn(b, H, device=device, dtype=bf)
    cos = torch.randn(1, 1, hd, device=device, dtype=bf)
    sin = torch.randn(1, 1, hd, device=device, dtype=bf)
    L = 4096 if b <= 256 else 64  # prefill-sized rows: a short cache keeps it in memory
    K = torch.zeros(b, hk, L, hd, device=device, dtype=bf)
    pos = torch.tensor([L - 1], device=device)
    q = out[:, :hq * hd].view(b, 1, hq, hd)
    k = out[:, :hk * hd].view(b, 1, hk, hd).transpose(1, 2)
    x = out[:, :H]

    def swiglu():
        g, u = out[:, :2 * Ff].chunk(2, dim=-1)
        return F.silu(g) * u
    return [("rmsnorm", H, 4.0 * b * H, lambda: F.rms_norm(x, (H,), w, 1e-5)),
            ("add", H, 6.0 * b * H, lambda: torch.add(x, resid, out=resid)),
            ("swiglu_chunked", Ff, 6.0 * b * Ff, swiglu),
            ("rope", hq * hd, 4.0 * b * hq * hd, lambda: _rope(q, cos, sin)),
            ("index_copy", hk * hd, 4.0 * b * hk * hd, lambda: K.index_copy_(2, pos, k))]


def bench_decode_fresh(device, quick: bool, rows_of: tuple = DECODE_ROWS) -> tuple[list[str], list[list]]:
    """The decode_cold measurement with each kernel reading what the weight stream just wrote (as in a real decode
    step), so that only the operands a real step leaves cold (norm weight, residual, KV cache) are cold."""
    return _after_stream(device, quick, rows_of, _fresh_ops)


def bench_optimizer_setup(device, quick: bool) -> tuple[list[str], list[list]]:
    """Fused AdamW over a training-step model's fp32 master copies built as the train_step benchmark builds them,
    timed in a steady loop before any forward + backward, after five, with random instead of zero gradients, and
    over fresh zero tensors of the same sizes (ops_recipes.fused_adamw), in one process (memory family columns)."""
    torch = require_torch()
    from c3kit.runtime.bench.train_step import (TRAIN_MODELS, _flat, _loss, _params, master_optimizer,
                                                rotary_tables)

    cols = ["op", "pass", "tokens", "width", "bytes", "time_s"]
    rows: list[list] = []
    names = ["llama-3.2-1b", "qwen2.5-7b-4L"] if not quick else ["llama-3.2-1b"]
    for name in names:
        if Budget.spent():
            break
        shape = TRAIN_MODELS[name] if not quick else (1, 64, 2, 1, 32, 128, 256)
        L, H, hq, hk, hd, F_, V = shape
        P = _params(torch, *shape, device)
        flat = _flat(P)
        master, opt = master_optimizer(torch, flat, device, torch.zeros_like)
        n = sum(t.numel() for t in flat)

        def row(label, o):
            rows.append(["adamw_fused", label, len(flat), n, 28.0 * n,
                         eager_time(o.step, device, target_s=0.1 if not quick else 0.005, repeats=3)])
        row("train_setup", opt)
        s = 2048 if not quick else 16
        tokens = torch.randint(0, V, (1, s), device=device)
        rot = rotary_tables(torch, s, hd, "fused", device)
        for _ in range(5):
            _loss(torch, P, tokens, rot, shape, "fused").backward()
        row("after_fwd_bwd", opt)
        for m_ in master:
            m_.grad = torch.randn_like(m_)
        row("random_grads", opt)
        sizes = [t.numel() for t in flat]
        P = flat = master = opt = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
        ps, opt2 = fused_adamw(torch, sizes, device)
        rows.append(["adamw_fused", "fresh_zeros", len(ps), n, 28.0 * n,
                     eager_time(opt2.step, device, target_s=0.1 if not quick else 0.005, repeats=3)])
        ps = opt2 = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return cols, rows


def bench_after_stream_large(device, quick: bool) -> tuple[list[str], list[list]]:
    """decode_cold and decode_fresh at prefill / training-forward row counts (LARGE_ROWS), ops of the fresh rows
    named fresh:<op>."""
    cols, cold = bench_decode_cold(device, quick, LARGE_ROWS)
    _, fresh = bench_decode_fresh(device, quick, LARGE_ROWS)
    return cols, cold + [["fresh:" + r[0]] + r[1:] for r in fresh]
