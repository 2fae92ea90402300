"""Hugging Face config.json import: each family, and malformed input."""

import json
from pathlib import Path

import pytest

from c3kit.errors import WorkloadError
from c3kit.workload.hf import load_hf_config, model_from_hf
from c3kit.workload.model import get_model

DATA = Path(__file__).parent / "data"


def test_llama_matches_preset():
    m = get_model(str(DATA / "llama3_8b.json"))
    p = get_model("Llama-3-8B")
    assert m.name == "meta-llama/Meta-Llama-3-8B"
    assert m.param_count() == p.param_count() == 8_030_261_248
    assert (m.kv_heads, m.ffn_hidden, m.max_seq, m.tied_embeddings, m.gated_mlp) == (8, 14336, 8192, False, True)


def test_mistral():
    m = load_hf_config(DATA / "mistral_7b.json")
    assert (m.hidden, m.layers, m.heads, m.kv_heads, m.vocab) == (4096, 32, 32, 8, 32000)
    assert abs(m.param_count() / 7.24e9 - 1) < 0.01  # Mistral 7B: 7.24B parameters


def test_mixtral_matches_preset():
    m = load_hf_config(DATA / "mixtral_8x7b.json")
    assert (m.n_experts, m.top_k, m.moe_ffn_hidden) == (8, 2, 14336)
    assert m.param_count() == get_model("Mixtral-8x7B").param_count()


def test_qwen2():
    m = load_hf_config(DATA / "qwen2_7b.json")
    assert (m.hidden, m.layers, m.heads, m.kv_heads, m.head_dim, m.vocab) == (3584, 28, 28, 4, 128, 152064)
    assert abs(m.param_count() / 7.62e9 - 1) < 0.01  # Qwen2-7B: 7.6B parameters


def test_name_from_file_stem_or_folder(tmp_path):
    assert load_hf_config(DATA / "mistral_7b.json").name == "mistral_7b"
    d = tmp_path / "my-model"
    d.mkdir()
    (d / "config.json").write_text((DATA / "mistral_7b.json").read_text())
    assert get_model(str(d / "config.json")).name == "my-model"


def test_malformed_json_names_file_and_position():
    with pytest.raises(WorkloadError, match=r"malformed\.json: malformed JSON at line 2"):
        get_model(str(DATA / "malformed.json"))


def test_unsupported_model_type():
    with pytest.raises(WorkloadError, match="unsupported model_type 'gpt2'"):
        load_hf_config(DATA / "gpt2_unsupported.json")


def test_missing_key_names_key():
    with pytest.raises(WorkloadError, match=r"missing_key\.json: missing key 'intermediate_size'"):
        load_hf_config(DATA / "missing_key.json")


def test_missing_file():
    with pytest.raises(WorkloadError, match="no such config.json"):
        get_model("/nonexistent/config.json")


@pytest.mark.parametrize("key,value", [("hidden_size", 0), ("num_hidden_layers", -1), ("vocab_size", "big"),
                                       ("num_key_value_heads", 3.5), ("tie_word_embeddings", "yes")])
def test_bad_values(key, value):
    cfg = json.loads((DATA / "llama3_8b.json").read_text())
    cfg[key] = value
    with pytest.raises(WorkloadError, match=key):
        model_from_hf(cfg, "cfg.json")


def test_not_an_object():
    with pytest.raises(WorkloadError, match="JSON object"):
        model_from_hf([1, 2], "cfg.json")


def test_missing_model_type():
    with pytest.raises(WorkloadError, match="model_type"):
        model_from_hf({"hidden_size": 8}, "cfg.json")
