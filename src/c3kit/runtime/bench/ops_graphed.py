"""Training kernels timed inside CUDA graphs (no host gaps), forward and backward apart: flash SDPA, RMSNorm /
LayerNorm with their weight-grad reduction, MoE expert weight-gradient GEMMs (a loop of mm and one grouped mm),
and the FP8 recipe's cast kernels one by one.

Families of `python -m c3kit.runtime.bench.ops --only attn_graph,norm_bwd,grouped_wgrad,fp8_cast_parts`.
Run times on one H200 in call 30: attn_graph 15 s, norm_bwd 8 s, grouped_wgrad 11 s, fp8_cast_parts 1.5 s
(--budget-s cuts whole cases).
"""

from __future__ import annotations

import contextlib
import statistics
import sys

from c3kit.runtime._torch import require_torch
from c3kit.runtime.bench.timing import Budget, eager_time, elapsed


def graph_or_events(fn, device, stream=None) -> tuple[float, str]:
    """(seconds of one fn(), how): CUDA-graph replays, else events around eager loops if capture fails, else
    the host clock off CUDA. stream: the stream to run and capture on (the forward's stream, for a backward,
    since autograd runs each backward op on its forward op's stream)."""
    torch = require_torch()
    if device.type != "cuda":
        return eager_time(fn, device), "host"
    stream = stream or torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        t = eager_time(fn, device, target_s=0.003, repeats=1)
        try:
            return _graph_time_on(torch, fn, device, int(max(3, min(100, 0.01 / max(t, 1e-7)))), stream), "graph"
        except Exception:  # noqa: BLE001 - not capturable here: time it eagerly and say so
            torch.cuda.synchronize(device)
            return eager_time(fn, device), "events"


def _graph_time_on(torch, fn, device, calls: int, stream, repeats: int = 5) -> float:
    """Median seconds of one fn() from replays of a CUDA graph of `calls` calls captured on `stream`."""
    fn()
    torch.cuda.synchronize(device)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize(device)
    return statistics.median(elapsed(g.replay, device) / calls for _ in range(repeats))


@contextlib.contextmanager
def _on(torch, stream):
    """Make `stream` current (nothing when it is None), ordered after the work already queued and finished
    before the block is left, so tensors made on either side are ready on the other."""
    if stream is None:
        yield
        return
    stream.wait_stream(torch.cuda.current_stream(stream.device))
    with torch.cuda.stream(stream):
        yield
    torch.cuda.synchronize(stream.device)


# ---------------------------------------------------------------- attn_graph
ATTN_COLUMNS = ["pass", "mode", "batch", "seq", "heads", "kv_heads", "head_dim", "causal", "time_s"]
ATTN_HEADS = ((32, 32, 128), (32, 8, 128), (32, 32, 64), (32, 8, 64))  # (q heads, kv heads, head_dim): MHA, GQA
ATTN_SEQS = (1024, 2048, 4096, 8192, 16384, 32768)
ATTN_TOKENS = 16384  # batch x seq per case (32768 at seq 32k, one sequence)


def bench_attn_graph(device, quick: bool, backend: str = "flash") -> tuple[list[str], list[list]]:
    """Causal SDPA (flash backend on CUDA) forward and backward (autograd.grad), each timed in CUDA graphs."""
    torch = require_torch()
    from c3kit.runtime.bench.ops_recipes import backend_ctx

    cuda = device.type == "cuda"
    bf = torch.bfloat16 if cuda else torch.float32
    heads, seqs = (ATTN_HEADS[1:2], (64,)) if quick else (ATTN_HEADS, ATTN_SEQS)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for hq, hk, hd in heads:
        for s in seqs:
            if Budget.spent():
                return ATTN_COLUMNS, rows
            b = 1 if quick else max(1, ATTN_TOKENS // s)
            q = torch.randn(b, hq, s, hd, device=device, dtype=bf, requires_grad=True)
            k = torch.randn(b, hk, s, hd, device=device, dtype=bf, requires_grad=True)
            v = torch.randn(b, hk, s, hd, device=device, dtype=bf, requires_grad=True)
            gqa = hq != hk
            try:
                rows += _attn_case(torch, device, cuda, sdpa, backend_ctx, q, k, v, gqa, (b, s, hq, hk, hd), backend)
            except RuntimeError as e:  # no kernel of this backend for this case (e.g. GQA on an older torch): go on
                print(f"attn_graph ({backend}): skipped b={b} s={s} heads={hq}/{hk} hd={hd}: {str(e).splitlines()[0]}",
                      file=sys.stderr)
                if cuda:
                    torch.cuda.synchronize(device)
            del q, k, v
    return ATTN_COLUMNS, rows


def _attn_case(torch, device, cuda: bool, sdpa, backend_ctx, q, k, v, gqa: bool, shape,
               backend: str = "flash") -> list[list]:
    """The forward and backward rows of one attention case."""
    rows = []
    with backend_ctx(backend if cuda else "default"):
        fwd = lambda: sdpa(q, k, v, is_causal=True, enable_gqa=gqa)  # noqa: E731
        with torch.no_grad():
            t, how = graph_or_events(fwd, device)
        rows.append(["fwd", how, *shape, 1, t])
        st = torch.cuda.Stream(device) if cuda else None
        with _on(torch, st):
            out = fwd()
            dout = torch.randn_like(out)
        bwd = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)  # noqa: E731
        t, how = graph_or_events(bwd, device, st)
        rows.append(["bwd", how, *shape, 1, t])
    return rows


def bench_attn_graph_cudnn(device, quick: bool) -> tuple[list[str], list[list]]:
    """attn_graph's cases on SDPA's cuDNN backend (19 s on one H200 in call 33)."""
    return bench_attn_graph(device, quick, "cudnn")


def bench_attn_graph_efficient(device, quick: bool) -> tuple[list[str], list[list]]:
    """attn_graph's cases on SDPA's memory-efficient backend, MHA only (17 s on one H200 in call 33)."""
    return bench_attn_graph(device, quick, "efficient")


# ---------------------------------------------------------------- norm_bwd
NORM_COLUMNS = ["norm", "part", "mode", "rows", "hidden", "time_s"]
NORM_HIDDEN = (2048, 4096, 8192, 16384)
NORM_ROWS = (4096, 16384, 65536)


def bench_norm_bwd(device, quick: bool) -> tuple[list[str], list[list]]:
    """RMSNorm / LayerNorm (bf16): forward, backward (dx and weight grads), backward of dx alone, and the weight-grad
    reduction alone (sum over rows of dy * x_hat in fp32), each in CUDA graphs."""
    torch = require_torch()
    F = torch.nn.functional
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    hidden, nrows = ((256,), (64,)) if quick else (NORM_HIDDEN, NORM_ROWS)
    rows = []
    for H in hidden:
        for T in nrows:
            for norm in ("rmsnorm", "layernorm"):
                if Budget.spent():
                    return NORM_COLUMNS, rows
                x = torch.randn(T, H, device=device, dtype=bf, requires_grad=True)
                w = torch.randn(H, device=device, dtype=bf, requires_grad=True)
                bias = torch.randn(H, device=device, dtype=bf, requires_grad=True) if norm == "layernorm" else None
                if norm == "rmsnorm":
                    fwd = lambda x=x, w=w: F.rms_norm(x, (H,), w, 1e-6)  # noqa: E731
                else:
                    fwd = lambda x=x, w=w, bias=bias: F.layer_norm(x, (H,), w, bias, 1e-5)  # noqa: E731
                params = (w,) if bias is None else (w, bias)
                with torch.no_grad():
                    t, how = graph_or_events(fwd, device)
                rows.append([norm, "fwd", how, T, H, t])
                st = torch.cuda.Stream(device) if cuda else None
                with _on(torch, st):
                    y = fwd()
                    dy = torch.randn_like(y)
                for part, inputs in (("bwd", (x, *params)), ("bwd_dx", (x,))):
                    t, how = graph_or_events(
                        lambda inputs=inputs: torch.autograd.grad(y, inputs, dy, retain_graph=True), device, st)
                    rows.append([norm, part, how, T, H, t])
                with torch.no_grad():
                    xhat = fwd() / w if norm == "rmsnorm" else (fwd() - bias) / w
                    xhat, dyf = xhat.float(), dy.float()
                    t, how = graph_or_events(lambda: (dyf * xhat).sum(0), device)
                rows.append([norm, "wgrad_reduce", how, T, H, t])
                del x, w, bias, y, dy, xhat, dyf
                if cuda:
                    torch.cuda.empty_cache()
    return NORM_COLUMNS, rows


# ---------------------------------------------------------------- grouped_wgrad
WGRAD_COLUMNS = ["impl", "mode", "experts", "tokens_per_expert", "hidden", "ffn", "flops", "time_s"]
WGRAD_DIMS = ((2048, 768), (4096, 1536), (7168, 2048), (4096, 4096))  # (hidden, expert ffn)
WGRAD_EXPERTS = (8, 32, 64)
WGRAD_TOKENS = (64, 512, 2048, 8192)
WGRAD_MAX_BYTES = 12 << 30  # skip cases whose operands would exceed this


def _grouped_mm(torch):
    """torch._grouped_mm, or None where this torch has none."""
    return getattr(torch, "_grouped_mm", None)


def bench_grouped_wgrad(device, quick: bool) -> tuple[list[str], list[list]]:
    """Per-expert dW_e = X_e^T dY_e as a loop of torch.mm and as one torch._grouped_mm (where it runs), in graphs."""
    torch = require_torch()
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    dims, experts, tokens = (((64, 32),), (2,), (16,)) if quick else (WGRAD_DIMS, WGRAD_EXPERTS, WGRAD_TOKENS)
    gmm = _grouped_mm(torch)
    rows = []
    for h, f in dims:
        for E in experts:
            for t in tokens:
                if Budget.spent():
                    return WGRAD_COLUMNS, rows
                if 2 * (E * t * (h + f) + E * h * f) > WGRAD_MAX_BYTES:
                    continue
                X = torch.randn(E * t, h, device=device, dtype=bf)
                dY = torch.randn(E * t, f, device=device, dtype=bf)
                W = torch.empty(E, h, f, device=device, dtype=bf)
                flops = 2.0 * E * t * h * f
                Xs, dYs = X.split(t), dY.split(t)

                def loop():
                    for e in range(E):
                        torch.mm(Xs[e].t(), dYs[e], out=W[e])

                tm, how = graph_or_events(loop, device)
                rows.append(["mm_loop", how, E, t, h, f, flops, tm])
                if gmm is not None and cuda:
                    row = _grouped_row(torch, device, gmm, X, dY, E, t)
                    if row is not None:
                        rows.append([row[0], row[1], E, t, h, f, flops, row[2]])
                del X, dY, W, Xs, dYs
    return WGRAD_COLUMNS, rows


def _grouped_row(torch, device, gmm, X, dY, E: int, t: int):
    """(impl, how, seconds) of dW as one torch._grouped_mm (groups split the reduction dimension), with the first
    operand layout this build accepts (the relayout itself untimed: a fused kernel would read it in place);
    None when none runs."""
    offs = torch.arange(t, E * t + 1, t, device=device, dtype=torch.int32)
    Xt = X.t()
    layouts = (("grouped_mm", lambda: (Xt, dY)), ("grouped_mm_a_rowmajor", lambda: (Xt.contiguous(), dY)),
               ("grouped_mm_a_row_b_col", lambda: (Xt.contiguous(), dY.t().contiguous().t())))
    errors = []
    for impl, make in layouts:
        try:
            a, b = make()
            gmm(a, b, offs=offs)
            torch.cuda.synchronize(device)
            t_s, how = graph_or_events(lambda a=a, b=b: gmm(a, b, offs=offs), device)
            return impl, how, t_s
        except RuntimeError as e:  # this layout is not supported here: try the next
            errors.append(str(e).splitlines()[0] if str(e) else type(e).__name__)
            torch.cuda.synchronize(device)
    print(f"grouped_wgrad: torch._grouped_mm did not run (E={E}, t={t}): {errors[-1]}", file=sys.stderr)
    return None


# ---------------------------------------------------------------- fp8_cast_parts
FP8_COLUMNS = ["part", "mode", "elements", "cols", "time_s"]
FP8_SIZES = tuple(1 << p for p in (20, 22, 24, 26, 28))  # 1M .. 256M elements
FP8_COLS = 8192
E4M3_MAX = 448.0  # largest finite float8_e4m3fn (OCP FP8 spec)


def bench_fp8_cast_parts(device, quick: bool) -> tuple[list[str], list[list]]:
    """The tensorwise FP8 cast split into kernels: amax, scale, scaled cast (plain and saturating) and
    transpose-cast of a bf16 [n / 8192, 8192] tensor, each in CUDA graphs; no rows without float8_e4m3fn."""
    torch = require_torch()
    f8 = getattr(torch, "float8_e4m3fn", None)
    if f8 is None:
        return FP8_COLUMNS, []
    cols = 256 if quick else FP8_COLS
    sizes = (1 << 14,) if quick else FP8_SIZES
    rows = []
    for n in sizes:
        if Budget.spent():
            break
        x = torch.randn(n // cols, cols, device=device, dtype=torch.bfloat16)
        try:
            x[:1, :8].to(f8)
        except Exception:  # noqa: BLE001 - no float8 casts on this device
            return FP8_COLUMNS, rows
        amax = x.abs().max().float()
        scale = E4M3_MAX / amax.clamp(min=1e-12)
        parts = {
            "amax": lambda: x.abs().max(),
            "scale": lambda: E4M3_MAX / amax.clamp(min=1e-12),
            "cast": lambda: (x * scale).to(f8),
            "cast_saturate": lambda: (x * scale).clamp(-E4M3_MAX, E4M3_MAX).to(f8),
            "transpose_cast": lambda: (x * scale).to(f8).t().contiguous(),
            "cast_and_transpose": lambda: ((x * scale).to(f8), (x.t() * scale).contiguous().to(f8)),
        }
        for part, fn in parts.items():
            try:
                t, how = graph_or_events(fn, device)
            except Exception:  # noqa: BLE001 - this cast is not implemented here: leave its row out
                continue
            rows.append([part, how, n, cols, t])
        del x
    return FP8_COLUMNS, rows


# ---------------------------------------------------------------- memory_graph
MEMGRAPH_COLUMNS = ["op", "pass", "mode", "tokens", "width", "bytes", "time_s"]
# a fine token grid across the L2 edge: one bf16 tensor of T x W is 4 MB to 512 MB (the H200's L2 is 50 MB)
MEMGRAPH_TOKENS = (512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 32768)
MEMGRAPH_WIDTHS = (4096, 8192)


def bench_memory_graph(device, quick: bool) -> tuple[list[str], list[list]]:
    """The memory family's elementwise ops (residual add, GELU, SwiGLU, RMSNorm, LayerNorm; forward and backward)
    with every pass in CUDA graphs, on a fine token grid across the L2 edge (10.5 s on one H200 in call 34).
    bytes: the bytes the memory family counts for the op and pass."""
    torch = require_torch()
    F = torch.nn.functional
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    tokens, widths = ((64,), (256,)) if quick else (MEMGRAPH_TOKENS, MEMGRAPH_WIDTHS)
    rows = []

    def time_bwd(op, T, W, nbytes, fwd, inputs):
        st = torch.cuda.Stream(device) if cuda else None
        with _on(torch, st):
            y = fwd()
            dy = torch.randn_like(y)
        t, how = graph_or_events(lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True), device, st)
        rows.append([op, "bwd", how, T, W, float(nbytes), t])

    for W in widths:
        for T in tokens:
            if Budget.spent():
                return MEMGRAPH_COLUMNS, rows
            e = T * W * 2
            x = torch.randn(T, W, device=device, dtype=bf, requires_grad=True)
            u = torch.randn(T, W, device=device, dtype=bf, requires_grad=True)
            r = torch.randn(T, W, device=device, dtype=bf)
            w = torch.ones(W, device=device, dtype=bf, requires_grad=True)
            ops = (("residual_add", 3 * e, None, lambda: x + r, ()),
                   ("gelu", 2 * e, 3 * e, lambda: F.gelu(x, approximate="tanh"), (x,)),
                   ("swiglu", 3 * e, 5 * e, lambda: F.silu(x) * u, (x, u)),
                   ("rmsnorm", 2 * e, 3 * e, lambda: F.rms_norm(x, (W,), w, 1e-5), (x, w)),
                   ("layernorm", 2 * e, 3 * e, lambda: F.layer_norm(x, (W,), w, None, 1e-5), (x, w)))
            for op, fwd_bytes, bwd_bytes, fwd, inputs in ops:
                with torch.no_grad():
                    t, how = graph_or_events(fwd, device)
                rows.append([op, "fwd", how, T, W, float(fwd_bytes), t])
                if bwd_bytes is not None:
                    time_bwd(op, T, W, bwd_bytes, fwd, inputs)
            del x, u, r, w
            if cuda:
                torch.cuda.empty_cache()
    return MEMGRAPH_COLUMNS, rows



# ---------------------------------------------------------------- l2_reuse
L2REUSE_COLUMNS = ["op", "producer", "mode", "tokens", "width", "bytes", "producer_s", "pair_s", "time_s"]
L2REUSE_TOKENS = (1024, 2048, 3072, 4096, 8192, 16384)
L2REUSE_WIDTHS = (4096, 8192)


def bench_l2_reuse(device, quick: bool) -> tuple[list[str], list[list]]:
    """Residual add and RMSNorm forward right after the kernel that wrote their input (what a layer runs): after a
    GEMM or a copy producing x, and after a 1 GiB copy of unrelated data (x evicted from L2); time_s = the pair's
    time - the producer's alone, both in CUDA graphs (about 30 s on one H200, estimated)."""
    torch = require_torch()
    F = torch.nn.functional
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    tokens, widths = ((64,), (256,)) if quick else (L2REUSE_TOKENS, L2REUSE_WIDTHS)
    big = 1 << 30 if cuda else 1 << 16
    junk_src = torch.empty(big, dtype=torch.uint8, device=device)
    junk_dst = torch.empty_like(junk_src)
    rows = []
    for W in widths:
        for T in tokens:
            if Budget.spent():
                return L2REUSE_COLUMNS, rows
            e = T * W * 2
            a = torch.randn(T, W, device=device, dtype=bf)
            b = torch.randn(W, W, device=device, dtype=bf) / W ** 0.5
            y = torch.randn(T, W, device=device, dtype=bf)
            x = torch.empty(T, W, device=device, dtype=bf)
            r = torch.randn(T, W, device=device, dtype=bf)
            w = torch.ones(W, device=device, dtype=bf)
            producers = (("gemm", lambda: torch.matmul(a, b, out=x)), ("copy", lambda: x.copy_(y)),
                         ("evict", lambda: junk_dst.copy_(junk_src)))
            consumers = (("residual_add", 3 * e, lambda: x + r),
                         ("rmsnorm", 2 * e, lambda: F.rms_norm(x, (W,), w, 1e-5)))
            with torch.no_grad():
                for pname, prod in producers:
                    tp, how = graph_or_events(prod, device)
                    for op, nbytes, cons in consumers:
                        def pair(prod=prod, cons=cons):
                            prod()
                            cons()
                        t2, how2 = graph_or_events(pair, device)
                        mode = how if how == how2 else f"{how}/{how2}"
                        rows.append([op, pname, mode, T, W, float(nbytes), tp, t2, t2 - tp])
            del a, b, y, x, r, w
            if cuda:
                torch.cuda.empty_cache()
    return L2REUSE_COLUMNS, rows
