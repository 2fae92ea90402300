"""A Llama-style decoder block for one TP rank, as the whole-layer and steady-state benchmarks run it."""

from __future__ import annotations

from c3kit.runtime.bench.ops_recipes import rope_rotate_half as _rope


def block_weights(torch, H, hq, hk, hd, F_, device, dtype):
    """A Llama-style decoder block's weights for one TP rank (hq, hk heads; F_ FFN columns)."""
    def w(*s):
        return (torch.randn(*s, device=device, dtype=dtype) * 0.02).requires_grad_()
    return {"n1": torch.ones(H, device=device, dtype=dtype, requires_grad=True),
            "qkv": w(H, (hq + 2 * hk) * hd), "o": w(hq * hd, H),
            "n2": torch.ones(H, device=device, dtype=dtype, requires_grad=True),
            "gu": w(H, 2 * F_), "d": w(F_, H)}


def block_forward(torch, p, x, cos, sin, hq, hk, hd, kv=None, pos=None):
    """Forward of the block on x [b, s, H]; with kv=(K, V) caches, decode: write at pos, attend over all."""
    F = torch.nn.functional
    b, s, H = x.shape
    h = F.rms_norm(x, (H,), p["n1"], 1e-5)
    qkv = h @ p["qkv"]
    q, k, v = qkv.split([hq * hd, hk * hd, hk * hd], dim=-1)
    q = _rope(q.view(b, s, hq, hd), cos, sin).transpose(1, 2)
    k = _rope(k.view(b, s, hk, hd), cos, sin).transpose(1, 2)
    v = v.view(b, s, hk, hd).transpose(1, 2)
    if kv is None:
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hk)
    else:
        K, V = kv
        K.index_copy_(2, pos, k)
        V.index_copy_(2, pos, v)
        a = F.scaled_dot_product_attention(q, K, V, enable_gqa=hq != hk)
    x = x + a.transpose(1, 2).reshape(b, s, hq * hd) @ p["o"]
    h = F.rms_norm(x, (H,), p["n2"], 1e-5)
    g, u = (h @ p["gu"]).chunk(2, dim=-1)
    return x + (F.silu(g) * u) @ p["d"]
