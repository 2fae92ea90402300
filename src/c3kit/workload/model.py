"""Transformer model configurations: the shipped presets and name lookup (ModelConfig lives in
workload.config and is re-exported here)."""

from __future__ import annotations

import difflib
import tomllib
from functools import lru_cache
from importlib import resources

from c3kit.errors import WorkloadError
from c3kit.workload.config import NORMS, POSITIONS, ModelConfig, model_from_dict, read_text_file  # noqa: F401
from c3kit.workload.hf import load_hf_config


@lru_cache(maxsize=1)
def _presets() -> dict[str, tuple[ModelConfig, tuple[str, ...], float]]:
    text = resources.files("c3kit.workload").joinpath("data", "models.toml").read_text()
    doc = tomllib.loads(text)
    out: dict[str, tuple[ModelConfig, tuple[str, ...], float]] = {}
    for key, entry in doc.get("model", {}).items():
        m = model_from_dict(entry, f"models.toml [model.{key}]")
        out[m.name] = (m, tuple(entry.get("aliases", ())), float(entry.get("published_params", 0)))
    return out


def list_models() -> list[str]:
    """Names of the shipped model presets."""
    return list(_presets())


def published_params(name: str) -> float:
    """The parameter count the preset's source publishes (0 when none is given)."""
    m = get_model(name)
    return _presets()[m.name][2]


def get_model(name: str) -> ModelConfig:
    """A preset by name or alias (case-insensitive), a Hugging Face config.json when name ends in .json, or a model
    TOML file (load_model_toml) when it ends in .toml."""
    if str(name).lower().endswith(".json"):
        return load_hf_config(name)
    if str(name).lower().endswith(".toml"):
        return load_model_toml(name)
    table = {}
    for canon, (m, aliases, _) in _presets().items():
        for n in (canon, *aliases):
            table[n.lower()] = m
    key = str(name).strip().lower()
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(dict.fromkeys(table[c].name for c in close))}?" if close else ""
    raise WorkloadError(f"unknown model {name!r}{hint} (known: {', '.join(list_models())}; "
                        "or pass a path to a Hugging Face config.json)")


def load_model_toml(path) -> ModelConfig:
    """A model TOML file: ModelConfig's fields at the top level, as one [model.NAME] table of the shipped presets
    (name, hidden, layers, heads required; an optional [sources] table)."""
    from pathlib import Path

    p = Path(path)
    text = read_text_file(p, "model file", "a model file is UTF-8 TOML")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise WorkloadError(f"{p}: not valid TOML ({e})") from None
    if not isinstance(doc.get("sources", {}), dict):
        raise WorkloadError(f"{p}: 'sources' must be a table of field = source")
    return model_from_dict(doc, str(p))
