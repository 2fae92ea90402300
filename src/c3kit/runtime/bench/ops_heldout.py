"""Cases for op classes whose held-out checks lack data (issue 12): FP8 torch._scaled_mm beside torch.mm over
Llama-class training shapes per TP rank, LayerNorm / RMSNorm over nine widths, decode attention at small KV
caches, and long-sequence attention in the chunk shapes torch context parallelism runs.

Families of `python -m c3kit.runtime.bench.ops --only fp8_mm,norm_width,decode_attn_small,cp_attention`.
Expected run time on one H200 (estimated from the rows of the fp8, memory_graph, norm_bwd, decode_attention and
attn_graph families; not yet run): fp8_mm 12 s, norm_width 35 s, decode_attn_small 30 s, cp_attention 50 s, plus
about 1 s of clock warm-up each (--budget-s cuts whole cases; each case list is ordered so a cut keeps coverage).
The case lists are plain functions of no device, so tests check them on a CPU.
"""

from __future__ import annotations

import random
import sys
import time as _time

from c3kit.runtime._torch import require_torch
from c3kit.runtime.bench.ops_graphed import _on, graph_or_events
from c3kit.runtime.bench.timing import Budget, eager_time, elapsed

WARMUP_S = 1.0  # bf16 GEMMs before the first timing: the SM clock ramps up from idle over ~0.1-1 s
LONG_S = 2e-3  # calls at least this long are timed with events around single calls (a graph adds nothing)


def warm_clocks(device, seconds: float = WARMUP_S) -> None:
    """Run 4096-cube bf16 GEMMs for `seconds` so that the first timing does not see idle clocks (nothing off CUDA)."""
    torch = require_torch()
    if device.type != "cuda":
        return
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    t_end = _time.perf_counter() + seconds
    while _time.perf_counter() < t_end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize(device)


def time_op(fn, device, stream=None) -> tuple[float, str]:
    """(seconds of one fn(), how): median of 3 event-timed single calls for calls of LONG_S or more, else
    graph_or_events (CUDA-graph replays); stream as in graph_or_events."""
    torch = require_torch()
    if device.type != "cuda":
        return eager_time(fn, device, repeats=3), "host"
    with _on(torch, stream):
        fn()
        first = elapsed(fn, device)
        if first >= LONG_S:
            return sorted([first, elapsed(fn, device), elapsed(fn, device)])[1], "events"
    return graph_or_events(fn, device, stream)


# ---------------------------------------------------------------- fp8_mm
FP8MM_COLUMNS = ["kind", "m", "n", "k", "dtype", "mode", "shape", "time_s"]
# Llama-3 layers: the short name the rows' shape column carries -> the catalog preset (workload/data/models.toml,
# sourced there) whose hidden, heads, KV heads, head_dim and FFN width give the per-rank shapes
FP8MM_MODELS = {"llama-8b": "llama-3-8b", "llama-70b": "llama-3-70b", "llama-405b": "llama-3.1-405b"}
FP8MM_RANKS = (("llama-8b", 1), ("llama-8b", 2), ("llama-70b", 2), ("llama-70b", 4), ("llama-70b", 8),
               ("llama-405b", 4), ("llama-405b", 8))
FP8MM_TOKENS = (4096, 8192, 16384)
FP8MM_CUBES = (1024, 1536, 2048)


def fp8_mm_cases() -> list[tuple[int, int, int, str]]:
    """(m, n, k, shape) of one TP rank's QKV, output, gate+up and down projections over FP8MM_RANKS (tokens m
    rotating through FP8MM_TOKENS), then the small cubes."""
    from c3kit.workload.model import get_model

    cases = []
    i = 0
    for model, tp in FP8MM_RANKS:
        m = get_model(FP8MM_MODELS[model])
        H, hq, hk, hd, F_ = m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden
        kv = max(1, hk // tp)
        layers = (("qkv", (hq // tp + 2 * kv) * hd, H), ("o", H, hq // tp * hd),
                  ("gate_up", 2 * F_ // tp, H), ("down", H, F_ // tp))
        for name, n, k in layers:
            cases.append((FP8MM_TOKENS[i % len(FP8MM_TOKENS)], n, k, f"{model} tp{tp} {name}"))
            i += 1
    cases += [(c, c, c, "cube") for c in FP8MM_CUBES]
    return cases


def bench_fp8_mm(device, quick: bool) -> tuple[list[str], list[list]]:
    """torch.mm bf16, and torch._scaled_mm e4m3 with tensorwise and rowwise fp32 scales (bf16 out), per shape
    of fp8_mm_cases; FP8 rows only where float8_e4m3fn and _scaled_mm run (an H100/H200-class GPU)."""
    torch = require_torch()
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    f8 = getattr(torch, "float8_e4m3fn", None)
    cases = [(64, 64, 64, "cube")] if quick else fp8_mm_cases()
    warm_clocks(device)
    rows = []
    for m, n, k, shape in cases:
        if Budget.spent():
            break
        a = torch.randn(m, k, device=device, dtype=bf)
        b = torch.randn(n, k, device=device, dtype=bf)
        t, how = time_op(lambda: torch.mm(a, b.t()), device)
        rows.append(["bf16_mm", m, n, k, "bf16", how, shape, t])
        if cuda and f8 is not None:
            a8, b8 = a.to(f8), b.to(f8).t()  # _scaled_mm takes its second operand column-major
            one = torch.ones((), device=device)
            sa, sb = torch.ones(m, 1, device=device), torch.ones(1, n, device=device)
            for kind, scales in (("fp8_tensorwise", (one, one)), ("fp8_rowwise", (sa, sb))):
                try:
                    t, how = time_op(lambda s=scales: torch._scaled_mm(a8, b8, *s, out_dtype=bf), device)
                    rows.append([kind, m, n, k, "fp8", how, shape, t])
                except Exception as ex:  # noqa: BLE001 - this scaling is not supported here: say so, keep going
                    print(f"fp8_mm {kind} {(m, n, k)}: {type(ex).__name__}: {str(ex).splitlines()[0]}",
                          file=sys.stderr)
            del a8, b8
        del a, b
    return FP8MM_COLUMNS, rows


# ---------------------------------------------------------------- norm_width
NORM_WIDTH_COLUMNS = ["op", "pass", "mode", "tokens", "width", "bytes", "time_s"]
NORM_WIDTHS = (2048, 3072, 4096, 5120, 6144, 7168, 8192, 12288, 16384)
NORM_TOKENS = (4096, 8192, 16384, 32768)


def norm_width_cases() -> list[tuple[int, int]]:
    """(tokens, width) pairs: every width at 8k and 16k tokens first, then 4k and 32k (a budget cut keeps widths)."""
    order = (8192, 16384, 4096, 32768)
    return [(T, W) for T in order for W in NORM_WIDTHS]


def bench_norm_width(device, quick: bool) -> tuple[list[str], list[list]]:
    """F.rms_norm / F.layer_norm (bf16, weight and no bias, as the memory families run them): forward and backward
    (grads of x and weight), each in CUDA graphs and launched eagerly; bytes as the memory family counts them."""
    torch = require_torch()
    F = torch.nn.functional
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    cases = [(64, 256)] if quick else norm_width_cases()
    eager = "eager" if cuda else "host"
    warm_clocks(device)
    rows = []
    for T, W in cases:
        if Budget.spent():
            break
        e = T * W * 2
        x = torch.randn(T, W, device=device, dtype=bf, requires_grad=True)
        w = torch.ones(W, device=device, dtype=bf, requires_grad=True)
        for op, fwd in (("rmsnorm", lambda: F.rms_norm(x, (W,), w, 1e-5)),
                        ("layernorm", lambda: F.layer_norm(x, (W,), w, None, 1e-5))):
            with torch.no_grad():
                t, how = graph_or_events(fwd, device)
                rows.append([op, "fwd", how, T, W, float(2 * e), t])
                rows.append([op, "fwd", eager, T, W, float(2 * e), eager_time(fwd, device)])
            st = torch.cuda.Stream(device) if cuda else None
            with _on(torch, st):
                y = fwd()
                dy = torch.randn_like(y)
            bwd = lambda y=y, dy=dy: torch.autograd.grad(y, (x, w), dy, retain_graph=True)  # noqa: E731
            t, how = graph_or_events(bwd, device, st)
            rows.append([op, "bwd", how, T, W, float(3 * e), t])
            with _on(torch, st):
                rows.append([op, "bwd", eager, T, W, float(3 * e), eager_time(bwd, device)])
            del y, dy
        del x, w
        if cuda:
            torch.cuda.empty_cache()
    return NORM_WIDTH_COLUMNS, rows


# ---------------------------------------------------------------- decode_attn_small
DECODE_SMALL_COLUMNS = ["backend", "pass", "mode", "batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim",
                        "causal", "time_s"]
DECODE_SMALL_KV = (128, 256, 512, 1024, 2048)
DECODE_SMALL_BATCH = (1, 2, 4, 8, 16, 32, 64)
DECODE_SMALL_HEADS = (8, 16, 32, 64)
DECODE_SMALL_KV_HEADS = 8
DECODE_SMALL_HEAD_DIM = 128


def decode_small_cases() -> list[tuple[int, int, int]]:
    """(kv_len, batch, heads), shuffled with a fixed seed so that a budget cut keeps every KV length and batch."""
    cases = [(kv, b, h) for kv in DECODE_SMALL_KV for b in DECODE_SMALL_BATCH for h in DECODE_SMALL_HEADS]
    random.Random(12).shuffle(cases)
    return cases


def bench_decode_attn_small(device, quick: bool) -> tuple[list[str], list[list]]:
    """Decode attention (q_len 1, bf16, no mask) over small KV caches, on SDPA's default choice and on flash,
    each in CUDA graphs (8 KV heads of head_dim 128; GQA where heads > 8)."""
    torch = require_torch()
    from c3kit.runtime.bench.ops_recipes import backend_ctx

    sdpa = torch.nn.functional.scaled_dot_product_attention
    cuda = device.type == "cuda"
    dt = torch.bfloat16 if cuda else torch.float32
    hk, hd = DECODE_SMALL_KV_HEADS, DECODE_SMALL_HEAD_DIM
    cases = [(64, 2, 16)] if quick else decode_small_cases()
    warm_clocks(device)
    rows = []
    for kv, b, hq in cases:
        if Budget.spent():
            break
        q = torch.randn(b, hq, 1, hd, device=device, dtype=dt)
        k = torch.randn(b, hk, kv, hd, device=device, dtype=dt)
        v = torch.randn(b, hk, kv, hd, device=device, dtype=dt)
        for backend in ("default", "flash") if cuda else ("default",):
            try:
                with backend_ctx(backend), torch.no_grad():
                    t, how = graph_or_events(lambda: sdpa(q, k, v, enable_gqa=hq != hk), device)
                rows.append([backend, "decode", how, b, hq, hk, 1, kv, hd, 0, t])
            except RuntimeError as ex:  # no kernel of this backend for this case: say so, keep going
                print(f"decode_attn_small {backend} {(kv, b, hq)}: {str(ex).splitlines()[0]}", file=sys.stderr)
                if cuda:
                    torch.cuda.synchronize(device)
        del q, k, v
    return DECODE_SMALL_COLUMNS, rows


# ---------------------------------------------------------------- cp_attention
CP_COLUMNS = ["pass", "mode", "role", "batch", "heads", "kv_heads", "head_dim", "q_len", "kv_len", "causal",
              "runs", "time_s"]
CP_SEQS = (65536, 131072, 262144)
CP_DEGREES = (2, 4, 8)
CP_HEADS, CP_KV_HEADS, CP_HEAD_DIM = 32, 8, 128


def cp_roles(chunk: int) -> list[tuple[str, int, int, int]]:
    """(role, q_len, kv_len, causal) of the attention calls of torch context parallelism's ring over a rank's shard
    of two chunks of `chunk` tokens: with load balancing, the causal diagonal over the own shard, the whole shard's q
    against an earlier rank's first chunk, the second chunk's q against a later rank's shard; without it, the shard
    against an earlier rank's shard (non-causal); and one chunk against one chunk, non-causal and causal (the
    per-chunk calls of head-tail CP implementations that split the shard)."""
    c, L = chunk, 2 * chunk
    return [("diag", L, L, 1), ("kv_half", L, c, 0), ("q_half", c, L, 0), ("full", L, L, 0), ("chunk", c, c, 0),
            ("chunk_diag", c, c, 1)]


def cp_cases() -> list[tuple[str, int, int, int, str]]:
    """(role, q_len, kv_len, causal, runs) over CP_SEQS x CP_DEGREES, each distinct shape once, smallest chunk
    first; runs names the (sequence, cp) pairs that call it, e.g. '64k/cp2 128k/cp4'."""
    by_chunk: dict[int, list[str]] = {}
    for S in CP_SEQS:
        for cp in CP_DEGREES:
            by_chunk.setdefault(S // (2 * cp), []).append(f"{S // 1024}k/cp{cp}")
    return [(role, q, kv, causal, " ".join(runs)) for c, runs in sorted(by_chunk.items())
            for role, q, kv, causal in cp_roles(c)]


def bench_cp_attention(device, quick: bool) -> tuple[list[str], list[list]]:
    """Flash SDPA (bf16, GQA 32/8 heads of 128, batch 1) forward and backward (autograd.grad of q, k, v) for each
    shape of cp_cases: long calls timed with events around single calls, short ones in CUDA graphs."""
    torch = require_torch()
    from c3kit.runtime.bench.ops_recipes import backend_ctx

    sdpa = torch.nn.functional.scaled_dot_product_attention
    cuda = device.type == "cuda"
    dt = torch.bfloat16 if cuda else torch.float32
    hq, hk, hd = CP_HEADS, CP_KV_HEADS, CP_HEAD_DIM
    cases = [(role, q, kv, c, "quick") for role, q, kv, c in cp_roles(32)[:2]] if quick else cp_cases()
    warm_clocks(device)
    rows = []
    for role, ql, kl, causal, runs in cases:
        if Budget.spent():
            break
        q = torch.randn(1, hq, ql, hd, device=device, dtype=dt, requires_grad=True)
        k = torch.randn(1, hk, kl, hd, device=device, dtype=dt, requires_grad=True)
        v = torch.randn(1, hk, kl, hd, device=device, dtype=dt, requires_grad=True)
        shape = [1, hq, hk, hd, ql, kl, causal, runs]
        try:
            with backend_ctx("flash" if cuda else "default"):
                fwd = lambda: sdpa(q, k, v, is_causal=bool(causal), enable_gqa=True)  # noqa: E731
                with torch.no_grad():
                    t, how = time_op(fwd, device)
                rows.append(["fwd", how, role, *shape, t])
                st = torch.cuda.Stream(device) if cuda else None
                with _on(torch, st):
                    out = fwd()
                    dout = torch.randn_like(out)
                t, how = time_op(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), device, st)
                rows.append(["bwd", how, role, *shape, t])
                del out, dout
        except RuntimeError as ex:  # no flash kernel for this case here (or out of memory): say so, keep going
            print(f"cp_attention {role} q={ql} kv={kl}: {str(ex).splitlines()[0]}", file=sys.stderr)
            if cuda:
                torch.cuda.synchronize(device)
        del q, k, v
        if cuda:
            torch.cuda.empty_cache()
    return CP_COLUMNS, rows


# ---------------------------------------------------------------- bmm_attn
BMM_ATTN_COLUMNS = ["kind", "groups", "m", "n", "k", "head_dim", "mode", "time_s"]
BMM_ATTN_SEQS = (512, 1024, 2048, 4096, 8192)
BMM_ATTN_HEADS = (8, 16, 32, 64)
BMM_ATTN_HEAD_DIMS = (64, 128)


def bmm_attn_cases() -> list[tuple[str, int, int, int, int, int]]:
    """(kind, groups, m, n, k, head_dim) of unfused attention's two batched GEMMs per (batch x heads, seq, head_dim):
    scores = Q K^T (m = n = seq, k = head_dim) and out = P V (m = seq, n = head_dim, k = seq); batch x heads of 8-64
    at 512-8192 tokens, skipping the score matrices over 2^31 elements."""
    out = []
    for s in BMM_ATTN_SEQS:
        for g in BMM_ATTN_HEADS:
            for hd in BMM_ATTN_HEAD_DIMS:
                if g * s * s > 2**31:
                    continue
                out.append(("qk", g, s, s, hd, hd))
                out.append(("pv", g, s, hd, s, hd))
    return out


def bench_bmm_attn(device, quick: bool) -> tuple[list[str], list[list]]:
    """torch.bmm bf16 at unfused attention's shapes (bmm_attn_cases): the rows the GEMM model's bmm check lacks."""
    torch = require_torch()
    bf = torch.bfloat16
    cases = [("qk", 2, 64, 64, 32, 32), ("pv", 2, 64, 32, 64, 32)] if quick else bmm_attn_cases()
    warm_clocks(device)
    rows = []
    for kind, g, m, n, k, hd in cases:
        if Budget.spent():
            break
        a = torch.randn(g, m, k, device=device, dtype=bf)
        b = torch.randn(g, k, n, device=device, dtype=bf)
        t, how = time_op(lambda: torch.bmm(a, b), device)
        rows.append([kind, g, m, n, k, hd, how, t])
        del a, b
    return BMM_ATTN_COLUMNS, rows
