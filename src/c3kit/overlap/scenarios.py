"""Realistic operator pairs: every TP/EP communication pair of a model's layer, and the eval scenario set."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from c3kit.errors import OverlapError, WorkloadError
from c3kit.overlap.problem import OverlapProblem
from c3kit.workload.model import get_model, list_models

def model_names() -> list[str]:
    """Model presets available for scenarios."""
    return list(list_models())


@dataclass(frozen=True)
class Pair:
    """One communication pair of a layer: what it is, its problem, and how many times a step runs it."""

    label: str
    problem: OverlapProblem
    count: int


# which GEMM of the layer description each labelled pair is: (GEMM name, pattern family) -> label
_LABELS = (
    ("qkv", "ag", "fwd qkv (AG->GEMM)"),
    ("proj", "out", "fwd attn-out (GEMM->{})"),
    ("fc1", "ag", "fwd fc1 (AG->GEMM)"),
    ("fc2", "out", "fwd fc2 (GEMM->{})"),
    ("qkv.dgrad", "out", "bwd qkv dgrad (GEMM->{})"),
    ("proj.dgrad", "ag", "bwd attn-out dgrad (AG->GEMM)"),
    ("fc1.dgrad", "out", "bwd fc1 dgrad (GEMM->{})"),
    ("fc2.dgrad", "ag", "bwd fc2 dgrad (AG->GEMM)"),
    ("expert_fc1", "moe", "fwd moe up (A2A->GroupedGEMM->A2A)"),
    ("expert_fc2.dgrad", "moe", "bwd moe down dgrad (A2A->GroupedGEMM->A2A)"),
)
_FAMILY = {"ag_gemm": "ag", "gemm_rs": "out", "gemm_ar": "out", "moe": "moe"}


def model_pairs(name: str, tp: int = 8, ep: int = 0, tokens: int = 8192, dtype: str = "bf16", sp: bool = True,
                backward: bool = True) -> list[Pair]:
    """Every TP (and EP) communication pair of one layer x layers, forward (and backward dgrad).

    tokens = sequence x micro-batch on the TP group. With sequence parallelism (sp) the TP pairs are
    all-gather -> GEMM and GEMM -> reduce-scatter (Megatron-SP); without, GEMM -> all-reduce.
    MoE layers with ep > 1: dispatch all-to-all -> grouped GEMM (expert up projection) -> combine.
    Shapes come from the layer description (c3kit.workload.layer): each TP rank routes its 1/tp of
    the tokens, so a MoE pair's m = tokens / tp x top_k rows per GPU.
    """
    from c3kit.workload.layer import comm_gemm_pairs, describe_tokens
    from c3kit.workload.parallel import Parallelism

    model = get_model(name)
    if tp < 2 and ep < 2:
        raise OverlapError("tp or ep must be at least 2: with one GPU there is no communication to overlap")
    if tokens <= 0:
        raise OverlapError("tokens must be positive")
    if tp >= 2 and tokens % tp:
        raise OverlapError(f"tokens = {tokens} does not divide by tp = {tp}")
    use_ep = ep if model.is_moe and ep >= 2 else 1
    if use_ep > 1 and model.n_experts % use_ep:
        raise OverlapError(f"{model.name}: {model.n_experts} experts do not divide by ep = {use_ep}")
    try:
        par = Parallelism(tp=max(tp, 1), sp=sp, ep=use_ep, dp=use_ep // math.gcd(max(tp, 1), use_ep))
        layer = describe_tokens(model, par, tokens, "train", dtype)
    except WorkloadError as e:
        raise OverlapError(str(e)) from None
    found = {(p.gemm.name, _FAMILY[p.pattern]): p for p in comm_gemm_pairs(layer)}
    pairs: list[Pair] = []
    for gemm, family, label in _LABELS:
        p = found.get((gemm, family)) or found.get(("expert_" + gemm, family))  # MoE with ep 1: TP-sharded experts
        if p is None or (not backward and label.startswith("bwd")):
            continue
        if p.pattern == "moe":
            if p.m % use_ep:
                raise OverlapError(f"tokens / tp x top_k = {p.m} does not divide by ep = {use_ep}")
            problem = OverlapProblem("moe", p.m, p.n, p.k, dtype, use_ep, experts=model.n_experts)
        else:
            problem = OverlapProblem(p.pattern, p.m, p.n, p.k, dtype, tp)
        pairs.append(Pair(label.format("RS" if p.pattern == "gemm_rs" else "AR"), problem, model.layers))
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
