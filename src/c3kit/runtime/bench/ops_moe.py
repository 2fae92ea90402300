"""The host side of an eager MoE block in training: how long the host takes to issue its work, how long the GPU
takes to run it, and what the per-layer wait for the token counts costs.

Megatron-Core's alltoall token dispatcher copies the tokens per expert to the host and waits for them once per
MoE layer forward (the grouped expert GEMM takes its row counts as host integers), so the GPU's queue is empty
after every such wait and the host's issue time of the work that follows is exposed wherever it exceeds the
GPU's. This family measures, for one expert-parallel rank's MoE block written with PyTorch ops in Megatron-Core's
order (router GEMM, softmax + top-k, load-balancing loss, token counts, permute by a stable sort and a row gather,
experts, unpermute by a weighted index_add; the all-to-alls are absent on one GPU, so the rank keeps all of its
tokens x top-k rows on its local experts as balanced dispatch gives it on average):

- pass "sync": the host's wait for the token counts (.tolist() of the counts on the GPU) with an idle GPU;
- passes "fwd" and "bwd": host_s = seconds the host takes to issue the pass while the GPU is still busy with a
  long spin ahead of it (so the host never waits), gpu_s = the GPU's time for the same pass from events recorded
  behind the spin (the queue never runs dry), wall_s = the pass as run eagerly from an idle GPU (forward with the
  count wait inside), kernels = CUDA kernels launched (profiler; NaN where unavailable);
- experts "grouped" (torch._grouped_mm over the local experts, as Transformer Engine's GroupedLinear on
  Blackwell or Megatron-Core's GroupedMLP) and "sequential" (one GEMM per local expert, as Megatron-Core's
  SequentialMLP and Transformer Engine's GroupedLinear on Hopper issue them).

Plain PyTorch issues fewer Python calls than Transformer Engine's modules, so host_s is a lower bound for
framework code built on those modules. Run: python -m c3kit.runtime.bench.ops --out DIR --only moe_host
--budget-s 150 (about 2 to 3 minutes on an H200; --quick for a CPU check).

Family moe_fp8_host (bench_moe_fp8_host): the FP8 current-scaling casts in front of the experts' GEMMs, as
Transformer Engine's GroupedLinear quantizes each local expert's rows with a quantizer of its own (amax pass, scale,
cast with a transposed copy): host issue time, GPU time, eager wall time and kernels of casting all of an EP rank's
T x top-k rows at once ("cast_one"), each local expert's rows alone ("cast_per_expert"), and each expert's cast
followed by its FP8 gate+up GEMM (torch._scaled_mm, tensorwise scales: "gemm_per_expert", CUDA only). Run:
python -m c3kit.runtime.bench.ops --out DIR --only moe_fp8_host --budget-s 60 (under a minute on an H200).
"""

from __future__ import annotations

import math
import statistics
import sys
import time as _time
import warnings

from c3kit.runtime._torch import require_torch
from c3kit.runtime.bench.ops_decode import MOE_LAYERS
from c3kit.runtime.bench.timing import Budget, sync

MOE_HOST_COLUMNS = ["experts_impl", "model", "tokens", "hidden", "ffn", "experts", "local_experts", "top_k", "ep",
                    "pass", "wall_s", "host_s", "gpu_s", "kernels"]
# attention of each MOE_LAYERS model (heads, kv_heads, head_dim), from its Hugging Face config.json; DeepSeek-V3's
# multi-head latent attention is stood in for by 128 query and key-value heads of 128 (its qk_nope_head_dim)
MOE_ATTENTION = {"qwen3-30b-a3b": (32, 4, 128), "olmoe-1b-7b": (16, 16, 128), "qwen3-235b-a22b": (64, 4, 128),
                 "mixtral-8x7b": (32, 8, 128), "deepseek-v3": (128, 128, 128)}
AUX_COEFF = 1e-3  # Megatron-Bridge Qwen3MoEModelProvider moe_aux_loss_coeff (the value only scales a gradient)

# (model, ep, tokens per rank): local experts from 8 to 256
MOE_HOST_CASES = (("qwen3-30b-a3b", 8, 4096), ("qwen3-30b-a3b", 8, 8192), ("qwen3-30b-a3b", 8, 16384),
                  ("qwen3-30b-a3b", 1, 4096), ("olmoe-1b-7b", 8, 4096), ("olmoe-1b-7b", 1, 4096),
                  ("qwen3-235b-a22b", 8, 4096), ("mixtral-8x7b", 1, 4096), ("deepseek-v3", 8, 4096),
                  ("deepseek-v3", 8, 16384), ("deepseek-v3", 1, 4096), ("qwen3-30b-a3b", 1, 16384))


class MoEBlock:
    """One EP rank's MoE block: router weights over all E experts, the local experts' gate+up and down weights."""

    def __init__(self, torch, H: int, F: int, E: int, el: int, k: int, device, grouped: bool):
        bf = torch.bfloat16
        self.torch, self.E, self.el, self.k, self.grouped = torch, E, el, k, grouped
        self.wr = (torch.randn(E, H, device=device, dtype=bf) * 0.02).requires_grad_()
        self.w1 = (torch.randn(el, 2 * F, H, device=device, dtype=bf) * 0.02).requires_grad_()
        self.w2 = (torch.randn(el, H, F, device=device, dtype=bf) * 0.02).requires_grad_()

    def route(self, x):
        """Router GEMM, softmax + top-k, the load-balancing loss, and the rows kept by each local expert."""
        torch, E, k = self.torch, self.E, self.k
        logits = x @ self.wr.t()
        scores = torch.softmax(logits.float(), dim=-1)
        probs, ids = torch.topk(scores, k, dim=-1)
        routing = torch.zeros_like(scores).scatter_(1, ids, 1.0)  # Megatron's routing map (tokens x experts)
        frac = routing.sum(0) / (x.shape[0] * k)
        aux = (scores.mean(0) * frac).sum() * (E * AUX_COEFF)  # switch load-balancing loss
        local = (ids % self.el).flatten()  # balanced EP dispatch: all T x k rows land on this rank's experts
        # tokens per local expert without a host sync (CUDA bincount reads the input's max on the host)
        counts = torch.zeros(self.el, device=x.device, dtype=torch.int64).scatter_add_(0, local, torch.ones_like(local))
        return probs, local, counts, aux

    def experts(self, xp, splits, counts):
        """The local experts over rows already in expert order (splits: host row counts per expert; counts: the
        same on the GPU, whose running sum the grouped GEMM takes, so no host-to-device copy waits)."""
        torch = self.torch
        if self.grouped:
            offs = counts.cumsum(0).to(torch.int32)
            h = torch._grouped_mm(xp, self.w1.transpose(-2, -1), offs=offs)
            g, u = h.chunk(2, dim=-1)
            return torch._grouped_mm(torch.nn.functional.silu(g) * u, self.w2.transpose(-2, -1), offs=offs)
        outs = []
        for e, part in enumerate(torch.split(xp, splits)):
            g, u = (part @ self.w1[e].t()).chunk(2, dim=-1)
            outs.append((torch.nn.functional.silu(g) * u) @ self.w2[e].t())
        return torch.cat(outs)

    def forward(self, x, splits=None):
        """The block's output and aux loss; splits=None waits for the counts on the host as the dispatcher does."""
        torch = self.torch
        probs, local, counts, aux = self.route(x)
        if splits is None:
            splits = counts.tolist()  # the host waits for the GPU here
        order = torch.argsort(local, stable=True)
        src = order // self.k
        xp = x.index_select(0, src)  # permute
        y = self.experts(xp, splits, counts)
        w = probs.flatten().gather(0, order).to(y.dtype).unsqueeze(1)
        out = torch.zeros_like(x).index_add_(0, src, y * w)  # unpermute
        return out, aux


def _kernels(torch, fn) -> float:
    """CUDA kernels one call of fn launches (torch.profiler); NaN where the profiler cannot say."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        n = sum(1 for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA"))
        return float(n) if n else math.nan
    except Exception:  # noqa: BLE001 - no CUPTI here: say NaN
        return math.nan


def _behind_spin(torch, device, cuda: bool, setup, issue, spin_s: float) -> tuple[float, float]:
    """(host seconds to issue(), GPU seconds of the issued work) with the GPU busy on a spin while the host issues."""
    state = setup()
    sync(device)
    if not cuda:
        t0 = _time.perf_counter()
        issue(state)
        return _time.perf_counter() - t0, _time.perf_counter() - t0
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(spin_s * 2.5e9))  # cycles: at least spin_s at any clock up to 2.5 GHz
    e0.record()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")  # a hidden host sync would make host_s the spin's length
        try:
            t0 = _time.perf_counter()
            issue(state)
            host = _time.perf_counter() - t0
        finally:
            torch.cuda.set_sync_debug_mode("default")
    e1.record()
    if any("synchroniz" in str(w.message) for w in caught):
        print(f"moe_host: the issued pass synchronized with the GPU ({caught[0].message}); host_s includes the wait",
              file=sys.stderr)
    e1.synchronize()
    return host, e0.elapsed_time(e1) / 1e3


def _wall(device, setup, issue) -> float:
    """Seconds of issue() as run eagerly from an idle GPU, to its last kernel's end."""
    state = setup()
    sync(device)
    t0 = _time.perf_counter()
    issue(state)
    sync(device)
    return _time.perf_counter() - t0


class AttnBlock:
    """A pre-norm GQA attention block with rotary embeddings (RMSNorm, QKV GEMM, rotate-half RoPE, SDPA, output
    GEMM, residual add) and the MoE block's pre-norm: the rest of a MoE Transformer layer, in plain PyTorch."""

    def __init__(self, torch, H: int, heads: int, kv_heads: int, hd: int, T: int, device):
        bf = torch.bfloat16
        self.torch, self.heads, self.kv, self.hd = torch, heads, kv_heads, hd
        self.wqkv = (torch.randn((heads + 2 * kv_heads) * hd, H, device=device, dtype=bf) * 0.02).requires_grad_()
        self.wo = (torch.randn(H, heads * hd, device=device, dtype=bf) * 0.02).requires_grad_()
        self.n1 = torch.ones(H, device=device, dtype=bf, requires_grad=True)
        self.n2 = torch.ones(H, device=device, dtype=bf, requires_grad=True)
        ang = torch.arange(T, device=device).float()[:, None] * torch.rand(hd // 2, device=device)[None]
        self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(bf)[None, None]
        self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(bf)[None, None]

    def _rope(self, t):
        a, b = t.chunk(2, dim=-1)
        return t * self.cos + self.torch.cat([-b, a], dim=-1) * self.sin

    def forward(self, x):
        """(the residual stream after attention, the MoE block's normalized input)."""
        torch, F = self.torch, self.torch.nn.functional
        T, H = x.shape
        qkv = F.linear(F.rms_norm(x, (H,), self.n1), self.wqkv)
        q, k, v = qkv.split([self.heads * self.hd, self.kv * self.hd, self.kv * self.hd], dim=-1)
        q = self._rope(q.view(1, T, self.heads, self.hd).transpose(1, 2))
        k = self._rope(k.view(1, T, self.kv, self.hd).transpose(1, 2))
        v = v.view(1, T, self.kv, self.hd).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.heads)
        h = x + F.linear(o.transpose(1, 2).reshape(T, self.heads * self.hd), self.wo)
        return h, F.rms_norm(h, (H,), self.n2)


def measure_passes(torch, device, cuda: bool, forward, x, splits, repeats: int, prefix: str = "") -> dict:
    """{pass: (wall_s, host_s, gpu_s, kernels)} of forward(x, splits) -> (out, aux) and its backward (medians over
    `repeats`); forward(x, None) waits for the counts on the host as run."""

    def fwd_state():
        return None

    def fwd_run(_):
        return forward(x, None)

    def fwd_issue(_):
        return forward(x, splits)

    def bwd_state():
        out, aux = forward(x, splits)
        return out, aux, torch.randn_like(out)

    def bwd_issue(state):
        out, aux, g = state
        torch.autograd.backward((out, aux), (g, torch.ones_like(aux)))

    for _ in range(2):  # warm-up: allocator, cuBLAS handles, autograd
        bwd_issue(bwd_state())
    sync(device)
    t0 = _time.perf_counter()
    bwd_issue(bwd_state())
    spin = min(max(0.05, 4 * (_time.perf_counter() - t0)), 0.85)  # 0.85 s: the spin's cycles stay in 32 bits
    res: dict = {}
    for name, setup, run, issue in (("fwd", fwd_state, fwd_run, fwd_issue), ("bwd", bwd_state, bwd_issue, bwd_issue)):
        wall = statistics.median(_wall(device, setup, run) for _ in range(repeats))
        pairs = [_behind_spin(torch, device, cuda, setup, issue, spin) for _ in range(repeats)]
        kern = math.nan
        if cuda:
            st = setup()
            kern = _kernels(torch, lambda st=st, issue=issue: issue(st))
        res[prefix + name] = (wall, statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs), kern)
    return res


def measure_case(torch, device, cuda: bool, block: MoEBlock, attn: AttnBlock | None, T: int, H: int,
                 repeats: int) -> dict:
    """The count wait, the MoE block's fwd / bwd and (with attn) the whole layer's layer_fwd / layer_bwd at T tokens."""
    x = torch.randn(T, H, device=device, dtype=torch.bfloat16, requires_grad=True)
    counts = block.route(x.detach())[2]
    splits = counts.tolist()
    res: dict = {"sync": (statistics.median(_wall(device, lambda: None, lambda _: counts.tolist())
                                            for _ in range(repeats)), math.nan, math.nan, math.nan)}
    res.update(measure_passes(torch, device, cuda, block.forward, x, splits, repeats))
    if attn is not None:
        def layer(x, splits):
            h, n = attn.forward(x)
            out, aux = block.forward(n, splits)
            return h + out, aux
        res.update(measure_passes(torch, device, cuda, layer, x, splits, repeats, "layer_"))
    return res


def bench_moe_host(device, quick: bool) -> tuple[list[str], list[list]]:
    """Host issue time, GPU time and eager wall time of an EP rank's MoE block, forward and backward, plus the
    host's wait for the token counts, at expert counts 8 to 256, with grouped and sequential experts."""
    torch = require_torch()
    cuda = device.type == "cuda"
    rows: list[list] = []
    have_grouped = getattr(torch, "_grouped_mm", None) is not None and cuda
    if quick:
        layers, cases, repeats = {"tiny": (32, 24, 8, 2)}, (("tiny", 1, 16), ("tiny", 4, 16)), 2
        attn_shapes = {"tiny": (4, 2, 8)}
    else:
        layers, cases, repeats, attn_shapes = MOE_LAYERS, MOE_HOST_CASES, 5, MOE_ATTENTION
    impls = ("grouped", "sequential") if have_grouped else ("sequential",)
    for name, ep, T in cases:  # both expert implementations of a case before the next case (the budget may stop)
        for impl in impls:
            if Budget.spent():
                return MOE_HOST_COLUMNS, rows
            H, F, E, k = layers[name]
            el = E // ep
            if el * 3 * H * F * 2 * 2 > 24e9 or T * k * max(H, 2 * F) * 2 * 6 > 24e9:
                continue
            try:
                block = MoEBlock(torch, H, F, E, el, k, device, impl == "grouped")
                heads, kvh, hd = attn_shapes[name]
                attn = AttnBlock(torch, H, heads, kvh, hd, T, device)
                res = measure_case(torch, device, cuda, block, attn, T, H, repeats)
            except Exception as ex:  # noqa: BLE001 - not supported / out of memory here: say so, keep going
                print(f"moe_host {impl} {name} ep{ep} T{T}: {type(ex).__name__}: {ex}", file=sys.stderr)
                continue
            finally:
                block = attn = None
                if cuda:
                    torch.cuda.empty_cache()
            for ps, (wall, host, gpu, kern) in res.items():
                rows.append([impl, name, T, H, F, E, el, k, ep, ps, wall, host, gpu, kern])
    return MOE_HOST_COLUMNS, rows


# ---- moe_fp8_host: the per-expert FP8 current-scaling casts (and FP8 GEMMs) of Transformer Engine's GroupedLinear
MOE_FP8_HOST_COLUMNS = ["what", "model", "tokens", "hidden", "ffn", "experts", "local_experts", "top_k", "ep",
                        "wall_s", "host_s", "gpu_s", "kernels"]
# (model, ep, tokens per rank): the Megatron-Bridge Qwen3-30B-A3B layouts (EP 8: 16 local experts, 4096 and 8192
# tokens per micro-batch) and two other expert counts
MOE_FP8_HOST_CASES = (("qwen3-30b-a3b", 8, 4096), ("qwen3-30b-a3b", 8, 8192), ("olmoe-1b-7b", 8, 4096),
                      ("deepseek-v3", 8, 4096), ("qwen3-30b-a3b", 1, 4096))
FP8_MAX = 448.0  # largest float8_e4m3fn value


def current_cast(torch, x, fp8):
    """FP8 current scaling of one tensor as Transformer Engine's Float8CurrentScalingQuantizer runs it: an amax
    pass, the scale, and the cast with its transposed copy (columnwise data for the backward's GEMMs)."""
    amax = x.abs().amax().float()
    scale = FP8_MAX / amax.clamp(min=1e-12)
    q = (x.float() * scale).to(fp8)
    return q, q.t().contiguous(), scale.reciprocal()


def fp8_expert_pass(torch, what: str, x, splits, w_q, w_inv, fp8):
    """One forward of the local experts' gate+up inputs: "cast_one" casts all rows at once, "cast_per_expert"
    each expert's rows alone, "gemm_per_expert" casts each expert's rows and runs its FP8 GEMM (torch._scaled_mm)."""
    if what == "cast_one":
        return [current_cast(torch, x, fp8)]
    out = []
    for e, part in enumerate(torch.split(x, splits)):
        q, _, inv = current_cast(torch, part, fp8)
        if what == "gemm_per_expert":
            out.append(torch._scaled_mm(q, w_q[e].t(), scale_a=inv, scale_b=w_inv, out_dtype=torch.bfloat16))
        else:
            out.append(q)
    return out


def bench_moe_fp8_host(device, quick: bool) -> tuple[list[str], list[list]]:
    """Host issue time, GPU time and eager wall time of FP8 current-scaling casts of an EP rank's expert rows, all
    rows at once or per local expert, and of per-expert FP8 gate+up GEMMs after them (Hopper's GroupedLinear)."""
    torch = require_torch()
    cuda = device.type == "cuda"
    fp8 = getattr(torch, "float8_e4m3fn", None)
    rows: list[list] = []
    if fp8 is None:
        print("moe_fp8_host: this torch has no float8_e4m3fn", file=sys.stderr)
        return MOE_FP8_HOST_COLUMNS, rows
    if quick:
        layers, cases, repeats = {"tiny": (32, 24, 8, 2)}, (("tiny", 4, 16),), 2
    else:
        layers, cases, repeats = MOE_LAYERS, MOE_FP8_HOST_CASES, 5
    whats = ("cast_one", "cast_per_expert") + (("gemm_per_expert",) if cuda and hasattr(torch, "_scaled_mm") else ())
    for name, ep, T in cases:
        H, F, E, k = layers[name]
        el = E // ep
        R = T * k  # balanced dispatch: all T x k rows on this rank's experts
        splits = [R // el + (1 if e < R % el else 0) for e in range(el)]
        try:
            x = torch.randn(R, H, device=device, dtype=torch.bfloat16)
            w_q = (torch.randn(el, 2 * F, H, device=device) * 0.02).to(fp8)  # weights cast once per step (cached)
            w_inv = torch.tensor(1.0, device=device)
        except Exception as ex:  # noqa: BLE001 - out of memory here: say so, keep going
            print(f"moe_fp8_host {name} ep{ep} T{T}: {type(ex).__name__}: {ex}", file=sys.stderr)
            continue
        for what in whats:
            if Budget.spent():
                return MOE_FP8_HOST_COLUMNS, rows
            try:
                def issue(_, what=what):
                    return fp8_expert_pass(torch, what, x, splits, w_q, w_inv, fp8)
                for _ in range(2):  # warm-up
                    issue(None)
                sync(device)
                wall = statistics.median(_wall(device, lambda: None, issue) for _ in range(repeats))
                pairs = [_behind_spin(torch, device, cuda, lambda: None, issue, 0.2) for _ in range(repeats)]
                kern = _kernels(torch, lambda: issue(None)) if cuda else math.nan
            except Exception as ex:  # noqa: BLE001 - not supported here: say so, keep going
                print(f"moe_fp8_host {what} {name} ep{ep} T{T}: {type(ex).__name__}: {ex}", file=sys.stderr)
                continue
            rows.append([what, name, T, H, F, E, el, k, ep, wall, statistics.median(p[0] for p in pairs),
                         statistics.median(p[1] for p in pairs), kern])
        x = w_q = None
        if cuda:
            torch.cuda.empty_cache()
    return MOE_FP8_HOST_COLUMNS, rows
