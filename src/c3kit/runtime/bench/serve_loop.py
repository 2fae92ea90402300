"""A real LLM serving loop's iterations, measured: decode steps (CUDA graphs) and prefill steps (eager)
of Llama-style models with random weights, whole model (embedding, blocks, final norm, lm_head, greedy
argmax), KV cache per layer as contiguous [batch, kv_heads, max_len, head_dim] tensors.

Run: python -m c3kit.runtime.bench.serve_loop --out DIR [--quick] [--budget-s S]
Writes <gpu>-serve-loop.json: {"meta", "kind", "columns", "rows"}; one row per measured iteration.
"""

from __future__ import annotations

import random
import sys

from c3kit.runtime._torch import require_torch
from c3kit.runtime.bench.timing import Budget, eager_time, timed

# Models of the loop (shapes from the published Hugging Face config.json of Llama 3.2 1B and Llama 3.1 8B;
# "-4L": the 8B's shapes with 4 of its 32 layers, so batch and KV reach serving sizes on one GPU):
# layers, hidden, heads, kv_heads, head_dim, ffn, vocab
SERVE_MODELS = {
    "llama-3.2-1b": (16, 2048, 32, 8, 64, 8192, 128256),
    "llama-3.1-8b-4L": (4, 4096, 32, 8, 128, 14336, 128256),
}
COLUMNS = ["model", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "phase", "batch",
           "q_len", "kv_len", "graph", "time_s"]
KV_BUDGET_B = 48e9  # KV cache bytes allowed in one case (the H200 has 141 GB; weights and activations need room)


def _weights(torch, L, H, hq, hk, hd, F_, V, device):
    """Random weights of the whole model (bf16)."""
    bf = torch.bfloat16

    def w(*s):
        return torch.randn(*s, device=device, dtype=bf) * 0.02
    layers = [{"n1": torch.ones(H, device=device, dtype=bf), "qkv": w(H, (hq + 2 * hk) * hd), "o": w(hq * hd, H),
               "n2": torch.ones(H, device=device, dtype=bf), "gu": w(H, 2 * F_), "d": w(F_, H)} for _ in range(L)]
    return {"emb": w(V, H), "layers": layers, "norm": torch.ones(H, device=device, dtype=bf), "head": w(H, V)}


def _rope(torch, x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def _forward(torch, W, tokens, caches, pos, cos, sin, shape, prefill: bool):
    """Next tokens (greedy) for tokens [b, q]; writes K/V at positions pos into each layer's cache."""
    F = torch.nn.functional
    _L, H, hq, hk, hd, _F, _V = shape
    x = F.embedding(tokens, W["emb"])
    b, s, _ = x.shape
    for p, (K, Vc) in zip(W["layers"], caches):
        h = F.rms_norm(x, (H,), p["n1"], 1e-5)
        q, k, v = (h @ p["qkv"]).split([hq * hd, hk * hd, hk * hd], dim=-1)
        q = _rope(torch, q.view(b, s, hq, hd), cos, sin).transpose(1, 2)
        k = _rope(torch, k.view(b, s, hk, hd), cos, sin).transpose(1, 2)
        v = v.view(b, s, hk, hd).transpose(1, 2)
        K.index_copy_(2, pos, k)
        Vc.index_copy_(2, pos, v)
        if prefill:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hk)
        else:
            a = F.scaled_dot_product_attention(q, K, Vc, enable_gqa=hq != hk)
        x = x + a.transpose(1, 2).reshape(b, s, hq * hd) @ p["o"]
        h = F.rms_norm(x, (H,), p["n2"], 1e-5)
        g, u = (h @ p["gu"]).chunk(2, dim=-1)
        x = x + (F.silu(g) * u) @ p["d"]
    last = F.rms_norm(x[:, -1], (H,), W["norm"], 1e-5)
    return (last @ W["head"]).argmax(dim=-1)


def _cases(quick: bool) -> list[tuple[str, str, int, int, int]]:
    """(model, phase, batch, q_len, kv_len) of every iteration to measure, shuffled (budget cuts evenly)."""
    if quick:
        return [("llama-3.2-1b", "decode", 2, 1, 64), ("llama-3.2-1b", "prefill", 1, 32, 32)]
    out = [(m, "decode", b, 1, kv) for m in SERVE_MODELS for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)
           for kv in (512, 2048, 8192, 32768)]
    out += [(m, "prefill", b, q, q) for m in SERVE_MODELS for b in (1, 2, 4, 8) for q in (512, 2048, 8192)
            if b * q <= 32768]
    random.Random(23).shuffle(out)
    return out


def measure(device, quick: bool) -> list[list]:
    """Measured seconds per iteration of every case that fits (see _cases)."""
    torch = require_torch()
    cuda = device.type == "cuda"
    bf = torch.bfloat16
    rows: list[list] = []
    weights = {}
    for (name, phase, b, q, kv) in _cases(quick):
        if Budget.spent():
            break
        L, H, hq, hk, hd, F_, V = SERVE_MODELS[name]
        if quick:
            L, H, hq, hk, hd, F_, V = 2, 128, 4, 2, 32, 256, 1000
        shape = (L, H, hq, hk, hd, F_, V)
        if 2 * L * b * hk * kv * hd * 2 > KV_BUDGET_B:
            continue
        if name not in weights:
            weights.clear()
            if cuda:
                torch.cuda.empty_cache()
            weights[name] = _weights(torch, L, H, hq, hk, hd, F_, V, device)
        W = weights[name]
        with torch.no_grad():
            caches = [(torch.zeros(b, hk, kv, hd, device=device, dtype=bf),
                       torch.zeros(b, hk, kv, hd, device=device, dtype=bf)) for _ in range(L)]
            tokens = torch.randint(0, V, (b, q), device=device)
            pos = torch.arange(kv - q, kv, device=device)
            cos = torch.randn(q, 1, hd, device=device, dtype=bf)
            sin = torch.randn(q, 1, hd, device=device, dtype=bf)

            def step():
                return _forward(torch, W, tokens, caches, pos, cos, sin, shape, phase == "prefill")
            try:
                if phase == "decode":
                    t, graph = timed(step, device, cuda), int(cuda)
                else:
                    t, graph = eager_time(step, device, target_s=0.05), 0
            except Exception as ex:  # noqa: BLE001 - out of memory at this size: say so, keep going
                print(f"{name} {phase} b{b} q{q} kv{kv}: {type(ex).__name__}", file=sys.stderr)
                if cuda:
                    torch.cuda.empty_cache()
                continue
        rows.append([name, L, H, hq, hk, hd, F_, V, phase, b, q, kv, graph, t])
        del caches, tokens
    return rows


def main(argv: list[str] | None = None) -> int:
    """Measure the serving-loop iterations and write <gpu>-serve-loop.json under --out."""
    from c3kit.runtime.calib import measured_run_main

    return measured_run_main(argv, __doc__.splitlines()[0], "c3kit.runtime.bench.serve_loop", "serve-loop", COLUMNS,
                             measure)


if __name__ == "__main__":
    sys.exit(main())
