"""Microbenchmarks of the kernels frameworks put around GEMMs and attention: FP8 training recipes
(scaled GEMMs, amax / cast / cast-transpose kernels), MoE routing (router top-k, token permute and
unpermute, grouped GEMMs under real routing) and attention backends (cuDNN forced, and the unfused
bmm + softmax + bmm attention of pre-FlashAttention Megatron).

Families of `python -m c3kit.runtime.bench.ops --only fp8,moe,attn_backends`.
"""

from __future__ import annotations

import random
import sys

from c3kit.runtime._torch import require_torch
from c3kit.runtime.bench.timing import Budget, eager_time, timed


def backend_ctx(name: str):
    """A context that forces one SDPA backend (flash, efficient, cudnn); "default" leaves PyTorch's choice."""
    torch = require_torch()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                        "cudnn": SDPBackend.CUDNN_ATTENTION}[name]) if name != "default" else torch.enable_grad()


# (n, k) of Llama-style training GEMMs (qkv, o, gate+up, down of 8B / 70B-class layers at TP 1..8)
_TRAIN_NK = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (10240, 8192), (8192, 8192),
             (3584, 8192), (8192, 3584), (1280, 8192), (2048, 2048), (1536, 2048), (5120, 5120)]


def bench_fp8(device, quick: bool) -> tuple[list[str], list[list]]:
    """FP8 training recipe pieces: BF16 vs tensorwise / rowwise-scaled FP8 GEMMs and their cast kernels."""
    torch = require_torch()
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    cols = ["kind", "m", "n", "k", "dtype", "time_s"]
    rows: list[list] = []
    f8 = getattr(torch, "float8_e4m3fn", None)
    ms = [1024, 4096, 8192, 16384] if not quick else [64]
    nks = _TRAIN_NK if not quick else [(64, 64)]
    cases = [(m, n, k) for m in ms for (n, k) in nks]
    random.Random(13).shuffle(cases)
    for (m, n, k) in cases:
        if Budget.spent():
            break
        a = torch.randn(m, k, device=device, dtype=bf)
        b = torch.randn(n, k, device=device, dtype=bf)
        rows.append(["bf16_mm", m, n, k, "bf16", timed(lambda: a @ b.t(), device, cuda)])
        if cuda and f8 is not None:
            a8, b8 = a.to(f8), b.to(f8).t()
            one = torch.ones((), device=device)
            try:
                rows.append(["fp8_tensorwise", m, n, k, "fp8",
                             timed(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=bf), device, cuda)])
            except Exception as ex:  # noqa: BLE001 - not supported on this build: say so, keep going
                print(f"tensorwise {(m, n, k)}: {type(ex).__name__}: {ex}", file=sys.stderr)
            sa = torch.ones(m, 1, device=device)
            sb = torch.ones(1, n, device=device)
            try:
                rows.append(["fp8_rowwise", m, n, k, "fp8",
                             timed(lambda: torch._scaled_mm(a8, b8, sa, sb, out_dtype=bf), device, cuda)])
            except Exception as ex:  # noqa: BLE001
                print(f"rowwise {(m, n, k)}: {type(ex).__name__}: {ex}", file=sys.stderr)
        dt = f8 if f8 is not None else bf

        def cast(a=a):
            s = a.abs().amax().float().clamp(min=1e-12) / 448.0
            return (a / s).to(dt)

        def cast_t(a=a):
            s = a.abs().amax().float().clamp(min=1e-12) / 448.0
            y = (a / s).to(dt)
            return y, y.t().contiguous()

        def amax(a=a):
            return a.abs().amax()
        rows.append(["cast_tensorwise", m, k, 0, "fp8", timed(cast, device, cuda)])
        rows.append(["cast_transpose", m, k, 0, "fp8", timed(cast_t, device, cuda)])
        rows.append(["amax", m, k, 0, "fp8", timed(amax, device, cuda)])
        del a, b
    return cols, rows


def bench_moe(device, quick: bool) -> tuple[list[str], list[list]]:
    """MoE routing: router softmax + top-k, token permute / unpermute, grouped GEMMs at real routed counts."""
    torch = require_torch()
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    cols = ["kind", "tokens", "hidden", "experts", "top_k", "n", "time_s"]
    rows: list[list] = []
    grouped = getattr(torch, "_grouped_mm", None)
    cases = [(T, H, E, k) for T in (2048, 8192, 16384, 32768) for H in (2048, 4096, 7168)
             for (E, k) in ((8, 2), (64, 6), (128, 8), (256, 8))]
    random.Random(17).shuffle(cases)
    if quick:
        cases = [(64, 64, 8, 2)]
    gen = torch.Generator(device=device).manual_seed(0)
    for (T, H, E, k) in cases:
        if Budget.spent():
            break
        if T * k * H * 2 * 3 > 12e9:
            continue
        x = torch.randn(T, H, device=device, dtype=bf)
        logits = torch.randn(T, E, device=device, dtype=bf, generator=gen)

        def route():
            p = torch.softmax(logits.float(), dim=-1)
            return torch.topk(p, k, dim=-1)
        rows.append(["router_topk", T, H, E, k, 0, timed(route, device, cuda)])
        w, ids = route()
        flat = ids.flatten()
        order = torch.argsort(flat, stable=True)
        src = order // k

        def permute():
            o = torch.argsort(flat, stable=True)
            return x.index_select(0, o // k)
        rows.append(["permute", T, H, E, k, 0, timed(permute, device, cuda)])
        y = x.index_select(0, src)
        wf = w.flatten()[order].to(bf).unsqueeze(1)

        def unpermute():
            out = torch.zeros_like(x)
            return out.index_add_(0, src, y * wf)
        rows.append(["unpermute", T, H, E, k, 0, timed(unpermute, device, cuda)])
        if grouped is not None and cuda:
            counts = torch.bincount(flat, minlength=E)
            offs = torch.cumsum(counts, 0).to(torch.int32)
            for n in (768, 1536, 2 * 1408):
                if Budget.spent() or E * H * n * 2 > 8e9:
                    break
                wt = torch.randn(E, n, H, device=device, dtype=bf).transpose(-2, -1)
                try:
                    rows.append(["grouped_mm_routed", T, H, E, k, n,
                                 timed(lambda: grouped(y, wt, offs=offs), device, cuda)])
                    bal = torch.arange(1, E + 1, device=device, dtype=torch.int32) * (T * k // E)
                    rows.append(["grouped_mm_balanced", T, H, E, k, n,
                                 timed(lambda: grouped(y, wt, offs=bal), device, cuda)])
                except Exception as ex:  # noqa: BLE001
                    print(f"_grouped_mm {(T, H, E, k, n)}: {type(ex).__name__}: {ex}", file=sys.stderr)
                del wt
        del x, logits, y
    return cols, rows


def _unfused(torch, q, k, v, scale: float, causal: bool):
    """Attention as two batched GEMMs around a masked softmax (Megatron-LM before FlashAttention)."""
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    if causal:
        n = q.shape[-2]
        mask = torch.ones(n, n, device=q.device, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v)


def bench_attn_backends(device, quick: bool) -> tuple[list[str], list[list]]:
    """Attention by backend: cuDNN forced, flash forced, and unfused bmm + softmax + bmm; fwd and bwd."""
    torch = require_torch()
    F = torch.nn.functional
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    cols = ["backend", "pass", "batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim", "causal", "time_s"]
    rows: list[list] = []
    cases = [(b, h, s, hd) for s in (512, 1024, 2048, 4096, 8192, 16384, 32768) for hd in (64, 128)
             for h in (8, 16, 32, 12, 48) for b in (1, 4) if b * h * s * s * 2 * 3 <= 24e9]
    random.Random(19).shuffle(cases)
    if quick:
        cases = [(1, 2, 64, 32)]
    for (b, h, s, hd) in cases[:90]:
        if Budget.spent():
            break
        q = torch.randn(b, h, s, hd, device=device, dtype=bf, requires_grad=True)
        kk = torch.randn(b, h, s, hd, device=device, dtype=bf, requires_grad=True)
        v = torch.randn(b, h, s, hd, device=device, dtype=bf, requires_grad=True)
        backends = ("cudnn", "flash", "unfused") if cuda else ("unfused",)
        for be in backends:
            if be == "unfused" and b * h * s * s * 2 * 3 > 12e9:
                continue
            try:
                if be == "unfused":
                    def fwd():
                        return _unfused(torch, q, kk, v, hd ** -0.5, True)
                    tf = timed(fwd, device, cuda)
                else:
                    with backend_ctx(be):
                        def fwd():
                            return F.scaled_dot_product_attention(q, kk, v, is_causal=True)
                        tf = timed(fwd, device, cuda)
                with (backend_ctx(be) if be != "unfused" else torch.enable_grad()):
                    o = fwd()
                    go = torch.randn_like(o)
                    tb = eager_time(lambda: torch.autograd.grad(o, (q, kk, v), go, retain_graph=True), device)
                rows.append([be, "fwd", b, h, h, s, s, hd, 1, tf])
                rows.append([be, "bwd", b, h, h, s, s, hd, 1, tb])
                del o, go
            except Exception as ex:  # noqa: BLE001 - backend cannot run this shape: say so, keep going
                print(f"attention {be} {(b, h, s, hd)}: {type(ex).__name__}", file=sys.stderr)
        del q, kk, v
    return cols, rows


def _rmsnorm_fp32(torch, x, w):
    """RMSNorm written out in fp32 (torchtitan's `rmsnorm` norm_type, the Llama reference code)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * w


def _rope_complex(torch, x, freqs):
    """RoPE as complex multiplication in fp32 (torchtitan / Llama reference apply_rotary_emb)."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs).flatten(-2).type_as(x)


def bench_eager_ops(device, quick: bool) -> tuple[list[str], list[list]]:
    """Norm and RoPE as eager framework code writes them (fp32 composite RMSNorm, complex RoPE), forward and
    backward, in the memory family's columns (op kinds rmsnorm_eager and rope_complex)."""
    torch = require_torch()
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    cols = ["op", "pass", "tokens", "width", "bytes", "time_s"]
    rows: list[list] = []
    tokens = [64, 1024, 4096, 8192, 16384, 32768] if not quick else [8]
    widths = [2048, 3072, 4096, 5120, 8192] if not quick else [256]
    cases = [(T, W) for T in tokens for W in widths]
    random.Random(37).shuffle(cases)
    for (T, W) in cases:
        if Budget.spent():
            break
        e = T * W * 2
        x = torch.randn(T, W, device=device, dtype=bf, requires_grad=True)
        w = torch.ones(W, device=device, dtype=bf, requires_grad=True)
        g = torch.randn(T, W, device=device, dtype=bf)
        rows.append(["rmsnorm_eager", "fwd", T, W, 2 * e, timed(lambda: _rmsnorm_fp32(torch, x, w), device, cuda)])
        y = _rmsnorm_fp32(torch, x, w)
        rows.append(["rmsnorm_eager", "bwd", T, W, 3 * e,
                     timed(lambda: torch.autograd.grad(y, (x, w), g, retain_graph=True), device, cuda, graph=False)])
        hd = 128
        q = torch.randn(T, W // hd, hd, device=device, dtype=bf, requires_grad=True)
        ang = torch.rand(T, 1, hd // 2, device=device)
        freqs = torch.polar(torch.ones_like(ang), ang)
        rows.append(["rope_complex", "fwd", T, W, 2 * e, timed(lambda: _rope_complex(torch, q, freqs), device, cuda)])
        yr = _rope_complex(torch, q, freqs)
        rows.append(["rope_complex", "bwd", T, W, 2 * e,
                     timed(lambda: torch.autograd.grad(yr, q, g.view(T, W // hd, hd), retain_graph=True), device,
                           cuda, graph=False)])
        del x, w, g, y, q, yr
    return cols, rows


def random_split(n_params: int, sizes: list[int], rng: random.Random) -> list[int]:
    """n_params split into tensors of sizes drawn from `sizes` (the last one cut to what is left)."""
    out, left = [], n_params
    while left > 0:
        s = min(left, rng.choice(sizes))
        out.append(s)
        left -= s
    return out


def rope_rotate_half(x, cos, sin):
    """Rotary embedding the way Llama-style PyTorch code writes it (rotate_half)."""
    torch = require_torch()
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def fused_adamw(torch, sizes: list[int], device):
    """(fp32 parameters of these element counts with random gradients, AdamW over them (fused on CUDA), stepped once
    so that its state exists before timing)."""
    ps = [torch.zeros(s, device=device, requires_grad=True) for s in sizes]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(ps, lr=1e-4, fused=device.type == "cuda")
    opt.step()
    return ps, opt


def bench_optimizer(device, quick: bool) -> tuple[list[str], list[list]]:
    """Fused AdamW (fp32 master weights, fp32 gradients) and foreach gradient clipping over a model's worth of
    tensors, 64M to 2G parameters, in the memory family's columns (tokens = tensors, width = parameters)."""
    torch = require_torch()
    cols = ["op", "pass", "tokens", "width", "bytes", "time_s"]
    rows: list[list] = []
    rng = random.Random(41)
    sizes = [2 ** 26, 2 ** 28, 2 ** 29, 2 ** 30, 3 * 2 ** 29, 2 ** 31] if not quick else [4096]
    per = [4096 * 4096, 4096 * 1024, 4096 * 14336 // 2, 2048 * 8192, 4096] if not quick else [1024]
    for n_params in sizes:
        if Budget.spent():
            break
        shapes = random_split(n_params, per, rng)
        try:
            ps, opt = fused_adamw(torch, shapes, device)
            rows.append(["adamw_fused", "step", len(ps), n_params, 28.0 * n_params,
                         eager_time(opt.step, device, target_s=0.05, repeats=3)])
            rows.append(["clip_grad_norm", "step", len(ps), n_params, 4.0 * n_params * 2,
                         eager_time(lambda: torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True), device,
                                    target_s=0.05, repeats=3)])
        except Exception as ex:  # noqa: BLE001 - out of memory at this size: say so, keep going
            print(f"optimizer {n_params}: {type(ex).__name__}", file=sys.stderr)
        ps = opt = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return cols, rows


def bench_gemm_cold(device, quick: bool) -> tuple[list[str], list[list]]:
    """Small-M GEMMs (M 1-512) with the weight read from HBM on every call, as in a decode step where the other
    layers' weights evict it from L2: each timed call uses the next of enough weight copies to exceed 3 x L2
    (kind small_m_cold, the gemm family's columns)."""
    torch = require_torch()
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    cols = ["kind", "m", "n", "k", "groups", "dtype", "time_s"]
    rows: list[list] = []
    nk = [(4096, 4096), (1280, 5120), (5120, 1792), (14336, 4096), (4096, 14336), (8192, 3584), (1024, 8192),
          (6144, 4096), (3072, 2048), (2048, 8192), (16384, 2048), (28672, 8192)]
    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    if quick:
        nk, ms = [(64, 64)], [1, 8]
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 60 << 20) if cuda else 1 << 20
    for (n, k) in nk:
        copies = max(2, int(3 * l2 // (n * k * 2)) + 1)
        ws = [torch.randn(k, n, device=device, dtype=bf) for _ in range(copies)]
        for m in ms:
            if Budget.spent():
                break
            a = torch.randn(m, k, device=device, dtype=bf)
            state = {"i": 0}

            def call(a=a):
                state["i"] = (state["i"] + 1) % copies
                return a @ ws[state["i"]]
            rows.append(["small_m_cold", m, n, k, 1, "bf16", timed(call, device, cuda)])
        del ws
    return cols, rows
