"""Realistic operator pairs: every TP/EP communication pair of a model's layer, and the eval scenario set."""

from __future__ import annotations

import random
from dataclasses import dataclass

from c3kit.errors import OverlapError, WorkloadError
from c3kit.overlap.problem import OverlapProblem
from c3kit.workload.model import get_model, list_models

@dataclass(frozen=True)
class Shape:
    """The sizes of a model that decide its communication pairs."""

    name: str
    hidden: int
    ffn: int
    q_dim: int
    kv_dim: int
    gated: bool
    experts: int
    top_k: int
    moe_ffn: int
    layers: int


def model_shape(name: str) -> Shape:
    """A model preset's shape (from workload.get_model)."""
    c = get_model(name)
    return Shape(c.name, c.hidden, c.ffn_hidden, c.q_dim, c.kv_dim, c.gated_mlp, c.n_experts, c.top_k,
                 c.moe_ffn_hidden, c.layers)


def model_names() -> list[str]:
    """Model presets available for scenarios."""
    return list(list_models())


@dataclass(frozen=True)
class Pair:
    """One communication pair of a layer: what it is, its problem, and how many times a step runs it."""

    label: str
    problem: OverlapProblem
    count: int


def model_pairs(name: str, tp: int = 8, ep: int = 0, tokens: int = 8192, dtype: str = "bf16", sp: bool = True,
                backward: bool = True) -> list[Pair]:
    """Every TP (and EP) communication pair of one layer x layers, forward (and backward dgrad).

    tokens = sequence x micro-batch on the TP group. With sequence parallelism (sp) the TP pairs are
    all-gather -> GEMM and GEMM -> reduce-scatter (Megatron-SP); without, GEMM -> all-reduce.
    MoE layers with ep > 1: dispatch all-to-all -> grouped GEMM (expert up projection) -> combine.
    """
    s = model_shape(name)
    if tp < 2 and ep < 2:
        raise OverlapError("tp or ep must be at least 2: with one GPU there is no communication to overlap")
    if tokens <= 0:
        raise OverlapError("tokens must be positive")
    pairs: list[Pair] = []
    L = s.layers
    if tp >= 2:
        qkv = s.q_dim + 2 * s.kv_dim
        up = s.ffn * (2 if s.gated else 1)
        for what, total in (("q_dim", s.q_dim), ("qkv", qkv), ("ffn", up), ("ffn_hidden", s.ffn)):
            if total % tp:
                raise OverlapError(f"{name}: {what} = {total} does not divide by tp = {tp}")
        fwd_in = "ag_gemm" if sp else None
        fwd_out = "gemm_rs" if sp else "gemm_ar"
        if tokens % tp:
            raise OverlapError(f"tokens = {tokens} does not divide by tp = {tp}")
        mk = lambda pat, n, k: OverlapProblem(pat, tokens, n, k, dtype, tp)  # noqa: E731
        if fwd_in:
            pairs.append(Pair("fwd qkv (AG->GEMM)", mk("ag_gemm", qkv // tp, s.hidden), L))
        pairs.append(Pair(f"fwd attn-out (GEMM->{'RS' if sp else 'AR'})", mk(fwd_out, s.hidden, s.q_dim // tp), L))
        if not s.experts > 1 or ep < 2:
            if fwd_in:
                pairs.append(Pair("fwd fc1 (AG->GEMM)", mk("ag_gemm", up // tp, s.hidden), L))
            pairs.append(Pair(f"fwd fc2 (GEMM->{'RS' if sp else 'AR'})", mk(fwd_out, s.hidden, s.ffn // tp), L))
        if backward:
            if fwd_in:
                pairs.append(Pair("bwd qkv dgrad (GEMM->RS)", mk("gemm_rs", s.hidden, qkv // tp), L))
                pairs.append(Pair("bwd attn-out dgrad (AG->GEMM)", mk("ag_gemm", s.q_dim // tp, s.hidden), L))
            else:
                pairs.append(Pair("bwd qkv dgrad (GEMM->AR)", mk("gemm_ar", s.hidden, qkv // tp), L))
            if not s.experts > 1 or ep < 2:
                if fwd_in:
                    pairs.append(Pair("bwd fc1 dgrad (GEMM->RS)", mk("gemm_rs", s.hidden, up // tp), L))
                    pairs.append(Pair("bwd fc2 dgrad (AG->GEMM)", mk("ag_gemm", s.ffn // tp, s.hidden), L))
                else:
                    pairs.append(Pair("bwd fc1 dgrad (GEMM->AR)", mk("gemm_ar", s.hidden, up // tp), L))
    if s.experts > 1 and ep >= 2:
        if s.experts % ep:
            raise OverlapError(f"{name}: {s.experts} experts do not divide by ep = {ep}")
        rows = tokens * s.top_k
        if rows % ep:
            raise OverlapError(f"tokens x top_k = {rows} does not divide by ep = {ep}")
        up = s.moe_ffn * (2 if s.gated else 1)
        pairs.append(Pair("fwd moe up (A2A->GroupedGEMM->A2A)",
                          OverlapProblem("moe", rows, up, s.hidden, dtype, ep, experts=s.experts), L))
        if backward:
            pairs.append(Pair("bwd moe down dgrad (A2A->GroupedGEMM->A2A)",
                              OverlapProblem("moe", rows, s.moe_ffn, s.hidden, dtype, ep, experts=s.experts), L))
    return pairs


@dataclass(frozen=True)
class Scenario:
    """One eval scenario: a pair on a GPU."""

    model: str
    label: str
    hw: str
    problem: OverlapProblem
    split: str  # "design" or "held-out"


EVAL_MODELS = ("Llama-3-8B", "Llama-3-70B", "Llama-3-405B", "GPT-3-175B", "Mixtral-8x7B", "Mega-GPT-2-8.3B",
               "T-NLG-17B", "MT-NLG-530B", "PaLM-540B")
EVAL_HW = ("MI300X", "H200")
EVAL_TOKENS = (1024, 2048, 4096, 8192, 16384)


def scenarios(hw: tuple[str, ...] = EVAL_HW, models: tuple[str, ...] = EVAL_MODELS,
              tps: tuple[int, ...] = (2, 4, 8), tokens: tuple[int, ...] = EVAL_TOKENS,
              dtypes: tuple[str, ...] = ("bf16", "fp8"), held_out: float = 0.5, seed: int = 0) -> list[Scenario]:
    """The eval scenario set: model pairs (with and without sequence parallelism) x TP/EP x tokens x dtype x
    hardware, deduplicated, split by model.

    The split holds out whole models (so held-out shapes are unseen families, not neighbours of design
    shapes): a seeded shuffle of the model list, `held_out` of them held out.
    """
    known = set(model_names())
    unknown = [m for m in models if m not in known]
    if unknown:
        raise OverlapError(f"unknown model {unknown[0]!r}: use one of {', '.join(sorted(known))}")
    avail = list(models)
    rng = random.Random(seed)
    order = sorted(avail)
    rng.shuffle(order)
    n_held = min(len(order) - 1, max(1, round(held_out * len(order)))) if len(order) > 1 else 0
    held = set(order[:n_held])
    out: list[Scenario] = []
    seen: set = set()
    for model in avail:
        for tp in tps:
            for t in tokens:
                for dt in dtypes:
                    try:
                        pairs = model_pairs(model, tp=tp, ep=tp, tokens=t, dtype=dt)
                        # without sequence parallelism the same layer's outputs are all-reduced
                        pairs += [pr for pr in model_pairs(model, tp=tp, ep=tp, tokens=t, dtype=dt, sp=False)
                                  if pr.problem.pattern == "gemm_ar"]
                    except (OverlapError, WorkloadError):
                        continue
                    for pr in pairs:
                        for h in hw:
                            key = (pr.problem, h)
                            if key in seen:
                                continue
                            seen.add(key)
                            out.append(Scenario(model, pr.label, h, pr.problem,
                                                "held-out" if model in held else "design"))
    return out
