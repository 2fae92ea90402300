"""The PIMnast study: OPT-family decode GEMVs and per-token latency on a PIM memory vs its host."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import pandas as pd

from c3kit.errors import PimError
from c3kit.pim.gemv import INPUT_MODES, Gemv, Knobs, Placement, place, search
from c3kit.pim.model import PimMemory

WEIGHT_GEMVS = ("qkv", "out", "ff1", "ff2")
PUBLISHED = {"max_gemv_speedup": 6.86, "avg_gemv_speedup": 5.8, "max_token_speedup": 5.0,
             "boost_roofline": 8.0, "row_roofline": 7.0}


@dataclass(frozen=True)
class OptModel:
    """One OPT decoder: d_model, layers, heads (FFN = 4 d_model)."""

    name: str
    hidden: int
    layers: int
    heads: int
    vocab: int = 50272

    @property
    def head_dim(self) -> int:
        """Elements per attention head."""
        return self.hidden // self.heads


@lru_cache(maxsize=1)
def _opt_doc() -> dict:
    return tomllib.loads(resources.files("c3kit.pim").joinpath("data/opt.toml").read_text())


def opt_family() -> list[OptModel]:
    """OPT-125M .. OPT-175B in size order."""
    d = _opt_doc()
    return [OptModel(n, v["hidden"], v["layers"], v["heads"], d["vocab"]) for n, v in d["models"].items()]


def get_opt(name: str) -> OptModel:
    """One OPT model by name (case-insensitive, with or without the 'OPT-' prefix)."""
    want = name.lower().removeprefix("opt-")
    for m in opt_family():
        if m.name.lower().removeprefix("opt-") == want:
            return m
    raise PimError(f"unknown OPT model {name!r}: use one of {', '.join(m.name for m in opt_family())}")


def layer_gemvs(model: OptModel, batch: int, context: int) -> list[tuple[Gemv, int]]:
    """(GEMV, how many per layer) for one decoder layer at this batch; attention is per head and sequence."""
    h = model.hidden
    att = model.heads * batch  # every sequence has its own KV cache: batch does not share those matrices
    return [(Gemv("qkv", 3 * h, h, batch), 1), (Gemv("out", h, h, batch), 1),
            (Gemv("ff1", 4 * h, h, batch), 1), (Gemv("ff2", h, 4 * h, batch), 1),
            (Gemv("attn_score", context, model.head_dim, 1), att),
            (Gemv("attn_context", model.head_dim, context, 1), att)]


def gemv_table(mem: PimMemory, models: list[OptModel], batches=(1, 2, 4), context: int = 1024,
               include_attention: bool = True, modes: tuple[str, ...] = INPUT_MODES) -> pd.DataFrame:
    """Best placement of every GEMV of every model at every batch, with rooflines (one row each)."""
    if context <= 0:
        raise PimError(f"context length {context}: must be at least 1 token")
    rows = []
    for model in models:
        for b in batches:
            if b <= 0:
                raise PimError(f"batch {b}: must be at least 1")
            for g, count in layer_gemvs(model, b, context):
                if not include_attention and g.name.startswith("attn"):
                    continue
                p = search(mem, g, modes=modes)
                rows.append({"model": model.name, **p.row(), "batch": b, "per_layer": count,
                             "explanation": p.explanation})
    return pd.DataFrame(rows)


def token_table(mem: PimMemory, models: list[OptModel], batches=(1, 2, 4), context: int = 1024,
                cache: dict | None = None, attention_on_pim: bool = True,
                modes: tuple[str, ...] = INPUT_MODES) -> pd.DataFrame:
    """Per-token decode latency on the host alone vs GEMVs on PIM with everything else on the host.

    With attention_on_pim=False the attention GEMVs (over the KV cache) stay on the host too.
    """
    host = mem.host
    eb = mem.elem_bytes
    rows = []
    cache = {} if cache is None else cache

    def best(g: Gemv) -> Placement:
        """The searched placement of g, memoised by shape."""
        key = (g.m, g.k, g.batch)
        if key not in cache:
            cache[key] = search(mem, g, modes=modes)
        return cache[key]

    for model in models:
        h = model.hidden
        for b in batches:
            host_g = pim_g = 0.0
            for g, count in layer_gemvs(model, b, context):
                p = best(g)
                host_g += count * p.host_time * model.layers
                on_pim = attention_on_pim or not g.name.startswith("attn")
                pim_g += count * (p.time if on_pim else p.host_time) * model.layers
            head = best(Gemv("lm_head", model.vocab, h, b))
            host_g += head.host_time
            pim_g += head.time
            # Non-GEMV work per layer (always on the host): 2 layer norms, softmax, activation, 2 residual
            # adds, KV-cache append; each reads and writes its activations and pays a kernel overhead.
            act = [2 * h, 2 * h, 2 * model.heads * context, 2 * 4 * h, 3 * h, 3 * h, 2 * h]
            other = model.layers * sum(host.time(a * b * eb) + host.op_overhead for a in act)
            other += host.time(2 * h * b * eb) + 2 * host.op_overhead  # final norm, embedding lookup
            rows.append({"model": model.name, "batch": b, "context": context, "attention_on_pim": attention_on_pim,
                         "host_gemv": host_g,
                         "pim_gemv": pim_g, "non_gemv": other, "host_token": host_g + other,
                         "pim_token": pim_g + other, "gemv_speedup": host_g / pim_g,
                         "token_speedup": (host_g + other) / (pim_g + other)})
    return pd.DataFrame(rows)


def ablation_table(mem: PimMemory, models: list[OptModel]) -> pd.DataFrame:
    """Mean / max / min batch-1 weight-GEMV speedup as the PIMnast knobs are switched on one by one."""
    naive = Knobs(min(mem.out_reg_bits // mem.acc_bits, mem.interleave_bytes // mem.elem_bytes), 1, 1, "registers")
    steps = [("fixed tile, no split-K, degree 1, input in registers", lambda g: place(mem, g, naive)),
             ("search tile, split-K, degree; input in registers", lambda g: search(mem, g, modes=("registers",))),
             ("search, input in commands only", lambda g: search(mem, g, modes=("commands",))),
             ("search everything", lambda g: search(mem, g))]
    rows = []
    for label, fn in steps:
        s = pd.Series([fn(g).speedup for m in models for g, _ in layer_gemvs(m, 1, 1) if g.name in WEIGHT_GEMVS])
        rows.append({"placement": label, "mean": s.mean(), "max": s.max(), "min": s.min()})
    return pd.DataFrame(rows)


def summary(gemvs: pd.DataFrame, tokens: pd.DataFrame) -> pd.DataFrame:
    """Our headline figures beside PIMnast's published ones, with the gap."""
    w = gemvs[(gemvs.batch == 1) & gemvs.gemv.isin(WEIGHT_GEMVS)]
    t1 = tokens[tokens.batch == 1]
    ours = {"max_gemv_speedup": w.speedup.max(), "avg_gemv_speedup": w.speedup.mean(),
            "max_token_speedup": t1.token_speedup.max(), "boost_roofline": w.boost_roofline.max(),
            "row_roofline": w.roofline.median()}
    rows = []
    for k, pub in PUBLISHED.items():
        rows.append({"metric": k, "ours": float(ours[k]), "published": pub,
                     "gap": float(ours[k]) - pub, "gap_pct": (float(ours[k]) - pub) / pub * 100})
    return pd.DataFrame(rows)
