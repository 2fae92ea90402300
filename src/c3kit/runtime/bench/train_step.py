"""A real single-GPU training step, measured: forward + backward of a whole Llama-style model (embedding,
blocks, final norm, lm_head, fp32 cross-entropy) and the optimizer step (fused AdamW over fp32 master
weights), with two ways of writing the block: `fused` (F.rms_norm, rotate-half RoPE: what the op classes
were measured on) and `eager` (RMSNorm and complex-number RoPE written out in fp32 as early torchtitan
and Llama reference code do). No communication: this checks the step model's compute side and overheads.

Run: python -m c3kit.runtime.bench.train_step --out DIR [--quick] [--budget-s S]
Writes <gpu>-train-step.json: {"meta", "kind", "columns", "rows"}; one row per measured case.
"""

from __future__ import annotations

import random
import sys

from c3kit.runtime._torch import require_torch
from c3kit.runtime.bench.timing import Budget, eager_time

# Models outside c3kit's catalog; shapes from each model's Hugging Face config.json; "-NL": the first N
# layers only, so that one GPU holds the step: layers, hidden, heads, kv_heads, head_dim, ffn, vocab
TRAIN_MODELS = {
    "llama-3.2-1b": (16, 2048, 32, 8, 64, 8192, 128256),
    "llama-3.2-3b-8L": (8, 3072, 24, 8, 128, 8192, 128256),
    "qwen2.5-7b-4L": (4, 3584, 28, 4, 128, 18944, 152064),
}
COLUMNS = ["model", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "impl", "batch",
           "seq", "part", "params", "time_s"]
IMPLS = ("fused", "eager")


def _params(torch, L, H, hq, hk, hd, F_, V, device):
    """bf16 weights (requires_grad) of the whole model."""
    bf = torch.bfloat16

    def w(*s):
        return (torch.randn(*s, device=device, dtype=bf) * 0.02).requires_grad_()

    def ones(n):
        return torch.ones(n, device=device, dtype=bf, requires_grad=True)
    layers = [{"n1": ones(H), "qkv": w(H, (hq + 2 * hk) * hd), "o": w(hq * hd, H), "n2": ones(H),
               "gu": w(H, 2 * F_), "d": w(F_, H)} for _ in range(L)]
    return {"emb": w(V, H), "layers": layers, "norm": ones(H), "head": w(H, V)}


def _flat(P) -> list:
    return [P["emb"], P["norm"], P["head"]] + [t for lay in P["layers"] for t in lay.values()]


def _rms(torch, x, w, impl):
    if impl == "fused":
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-5)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * w


def _rope(torch, x, rot, impl):
    if impl == "fused":
        cos, sin = rot
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * rot).flatten(-2).type_as(x)


def _loss(torch, P, tokens, rot, shape, impl):
    """Mean next-token cross-entropy (fp32 logits) of the model on tokens [b, s]."""
    F = torch.nn.functional
    _L, H, hq, hk, hd, _F, V = shape
    x = F.embedding(tokens, P["emb"])
    b, s, _ = x.shape
    for p in P["layers"]:
        h = _rms(torch, x, p["n1"], impl)
        q, k, v = (h @ p["qkv"]).split([hq * hd, hk * hd, hk * hd], dim=-1)
        q = _rope(torch, q.view(b, s, hq, hd), rot, impl).transpose(1, 2)
        k = _rope(torch, k.view(b, s, hk, hd), rot, impl).transpose(1, 2)
        v = v.view(b, s, hk, hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hk)
        x = x + a.transpose(1, 2).reshape(b, s, hq * hd) @ p["o"]
        h = _rms(torch, x, p["n2"], impl)
        g, u = (h @ p["gu"]).chunk(2, dim=-1)
        x = x + (F.silu(g) * u) @ p["d"]
    logits = _rms(torch, x, P["norm"], impl) @ P["head"]
    return F.cross_entropy(logits.float().view(-1, V), tokens.view(-1))


def master_optimizer(torch, flat: list, device, grad):
    """(fp32 master copies of the model's tensors with gradients grad(master), fused AdamW over them (fused on
    CUDA) stepped once so that its state exists before timing)."""
    master = [t.detach().float().requires_grad_() for t in flat]
    for m_ in master:
        m_.grad = grad(m_)
    opt = torch.optim.AdamW(master, lr=1e-4, fused=device.type == "cuda")
    opt.step()
    return master, opt


def rotary_tables(torch, s: int, hd: int, impl: str, device):
    """RoPE tables of s positions (theta 500000): bf16 (cos, sin) for the fused code, complex for the eager one."""
    pos = torch.arange(s, device=device, dtype=torch.float32)
    inv = 1.0 / (500000.0 ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
    ang = torch.outer(pos, inv)
    if impl == "fused":
        emb = torch.cat((ang, ang), dim=-1)
        return emb.cos().to(torch.bfloat16)[:, None, :], emb.sin().to(torch.bfloat16)[:, None, :]
    return torch.polar(torch.ones_like(ang), ang)[:, None, :]


def _cases(quick: bool) -> list[tuple[str, str, int, int]]:
    """(model, impl, batch, seq) of every case, shuffled so that a budget cut keeps a spread."""
    if quick:
        return [("llama-3.2-1b", impl, 1, 32) for impl in IMPLS]
    out = [(m, impl, b, s) for m in TRAIN_MODELS for impl in IMPLS for b in (1, 2, 4) for s in (2048, 4096, 8192)
           if b * s <= 16384]
    random.Random(29).shuffle(out)
    return out


def measure(device, quick: bool) -> list[list]:
    """Measured seconds of forward + backward and of the optimizer step for every case that fits."""
    torch = require_torch()
    rows: list[list] = []
    built: dict = {}
    for (name, impl, b, s) in _cases(quick):
        if Budget.spent():
            break
        shape = TRAIN_MODELS[name] if not quick else (2, 128, 4, 2, 32, 256, 1000)
        L, H, hq, hk, hd, F_, V = shape
        if name not in built:
            built.clear()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            P = _params(torch, *shape, device)
            flat = _flat(P)
            # nonzero gradients, as training's are: fused AdamW over zero gradients runs about 20% slower
            # (ops-optimizer_setup, call 25)
            master, opt = master_optimizer(torch, flat, device, torch.randn_like)
            built[name] = (P, flat, master, opt)
        P, flat, master, opt = built[name]
        n_params = sum(t.numel() for t in flat)
        tokens = torch.randint(0, V, (b, s), device=device)
        rot = rotary_tables(torch, s, hd, impl, device)

        def fwd_bwd():
            loss = _loss(torch, P, tokens, rot, shape, impl)
            loss.backward()
        try:
            t_fb = eager_time(fwd_bwd, device, target_s=0.2, repeats=3)
        except Exception as ex:  # noqa: BLE001 - out of memory at this size: say so, keep going
            print(f"{name} {impl} b{b} s{s}: {type(ex).__name__}", file=sys.stderr)
            for t in flat:
                t.grad = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        for t in flat:
            t.grad = None
        rows.append([name, L, H, hq, hk, hd, F_, V, impl, b, s, "fwd_bwd", n_params, t_fb])
        if impl == "fused" and not any(r[0] == name and r[11] == "optimizer" for r in rows):
            rows.append([name, L, H, hq, hk, hd, F_, V, "fused_adamw", 0, 0, "optimizer", n_params,
                         eager_time(opt.step, device, target_s=0.1, repeats=3)])
    return rows


def main(argv: list[str] | None = None) -> int:
    """Measure the training steps and write <gpu>-train-step.json under --out."""
    from c3kit.runtime.calib import measured_run_main

    return measured_run_main(argv, __doc__.splitlines()[0], "c3kit.runtime.bench.train_step", "train-step", COLUMNS,
                             measure)


if __name__ == "__main__":
    sys.exit(main())
