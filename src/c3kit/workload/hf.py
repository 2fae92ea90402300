"""Import a Hugging Face config.json (llama, mistral, mixtral, qwen2 families) as a ModelConfig."""

from __future__ import annotations

import json
from pathlib import Path

from c3kit.errors import WorkloadError
from c3kit.workload.config import ModelConfig, read_text_file

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2")
_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


def _int(cfg: dict, key: str, origin: str, default: int | None = None) -> int:
    """A positive integer field of the config, or the default when absent."""
    if key not in cfg or cfg[key] is None:
        if default is None:
            raise WorkloadError(f"{origin}: missing key {key!r}")
        return default
    v = cfg[key]
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise WorkloadError(f"{origin}: key {key!r} must be a positive integer, got {v!r}")
    return v


def model_from_hf(cfg: dict, origin: str = "<config.json>", name: str | None = None) -> ModelConfig:
    """Build a ModelConfig from a parsed Hugging Face config dictionary."""
    if not isinstance(cfg, dict):
        raise WorkloadError(f"{origin}: expected a JSON object at the top level")
    mt = cfg.get("model_type")
    if mt is None:
        raise WorkloadError(f"{origin}: missing key 'model_type' (supported: {', '.join(SUPPORTED)})")
    if mt not in SUPPORTED:
        raise WorkloadError(f"{origin}: unsupported model_type {mt!r}: supported are {', '.join(SUPPORTED)}")
    for key in _REQUIRED:
        if key not in cfg:
            raise WorkloadError(f"{origin}: missing key {key!r}")
    hidden = _int(cfg, "hidden_size", origin)
    heads = _int(cfg, "num_attention_heads", origin)
    kv = _int(cfg, "num_key_value_heads", origin, heads)
    head_dim = _int(cfg, "head_dim", origin, hidden // heads if hidden % heads == 0 else 0)
    if head_dim == 0:
        raise WorkloadError(f"{origin}: hidden_size {hidden} is not divisible by num_attention_heads {heads} "
                            "and no 'head_dim' is given")
    ffn = _int(cfg, "intermediate_size", origin)
    n_experts = _int(cfg, "num_local_experts", origin, 1)
    top_k = _int(cfg, "num_experts_per_tok", origin, 2 if n_experts > 1 else 1)
    if mt == "mixtral" and n_experts == 1:
        raise WorkloadError(f"{origin}: model_type 'mixtral' needs 'num_local_experts'")
    tied = cfg.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise WorkloadError(f"{origin}: key 'tie_word_embeddings' must be true or false, got {tied!r}")
    o = Path(origin)
    label = name or cfg.get("_name_or_path") or (o.parent.name if o.name == "config.json" else o.stem) or mt
    try:
        return ModelConfig(
            name=str(label), hidden=hidden, layers=_int(cfg, "num_hidden_layers", origin), heads=heads,
            kv_heads=kv, head_dim=head_dim, ffn_hidden=ffn, vocab=_int(cfg, "vocab_size", origin),
            gated_mlp=True, norm="rmsnorm", n_experts=n_experts, top_k=top_k, moe_ffn_hidden=ffn if n_experts > 1 else 0,
            max_seq=_int(cfg, "max_position_embeddings", origin, 4096), tied_embeddings=tied, position="rope",
            dropout=False,  # Qwen2's QKV biases (< 0.01% of parameters) are not counted
            sources=(("all", f"Hugging Face config.json {origin} (model_type {mt})"),),
        )
    except WorkloadError as e:
        raise WorkloadError(f"{origin}: {e}") from None


def load_hf_config(path: str | Path, name: str | None = None) -> ModelConfig:
    """Read a Hugging Face config.json file into a ModelConfig."""
    p = Path(path)
    text = read_text_file(p, "config.json file", "config.json must be UTF-8 JSON")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise WorkloadError(f"{p}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    return model_from_hf(cfg, str(p), name)
