"""Model presets: parameter counts against published sizes, lookup, and bad input."""

import pytest

from c3kit.errors import WorkloadError
from c3kit.workload.model import ModelConfig, get_model, list_models, published_params

REQUIRED = ["Mega-GPT-2-8.3B", "T-NLG-17B", "GPT-3-175B", "MT-NLG-530B", "PaLM-540B", "Llama-3-8B", "Llama-3-70B",
            "Llama-3-405B", "Mixtral-8x7B", "GPT-22B", "GPT-175B", "GPT-530B", "GPT-1T"]


def test_all_required_presets_exist():
    assert set(REQUIRED) <= set(list_models())


@pytest.mark.parametrize("name", REQUIRED)
def test_param_count_within_2_percent_of_published(name):
    m = get_model(name)
    pub = published_params(name)
    assert pub > 0
    assert abs(m.param_count() / pub - 1) < 0.02


@pytest.mark.parametrize("name", REQUIRED)
def test_every_preset_has_a_source(name):
    assert get_model(name).source("all")


def test_hand_checked_shapes():
    m = get_model("Llama-3-70B")
    assert (m.hidden, m.layers, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.vocab) == \
        (8192, 80, 64, 8, 128, 28672, 128256)
    # attention 8192 * (8192 + 2 * 1024) + 8192 * 8192, MLP 3 * 8192 * 28672, RMSNorms 2 * 8192
    assert m.layer_params() == 8192 * 10240 + 8192 * 8192 + 3 * 8192 * 28672 + 2 * 8192 == 855_654_400
    assert m.param_count() == 80 * 855_654_400 + 2 * 128256 * 8192 + 8192 == 70_553_706_496
    g = get_model("Mega-GPT-2")
    assert (g.hidden, g.layers, g.heads, g.head_dim, g.ffn_hidden) == (3072, 72, 32, 96, 12288)
    t = get_model("T-NLG")
    assert (t.hidden, t.layers, t.heads, t.head_dim) == (4256, 78, 28, 152)
    p = get_model("PaLM")
    assert (p.kv_heads, p.head_dim, p.ffn_hidden, p.gated_mlp, p.tied_embeddings) == (1, 256, 73728, True, True)


def test_mixtral_active_parameters():
    m = get_model("mixtral")
    assert m.is_moe and (m.n_experts, m.top_k) == (8, 2)
    assert abs(m.active_param_count() / 12.9e9 - 1) < 0.02  # "13B active" (Mixtral paper)


def test_lookup_is_case_insensitive_and_takes_aliases():
    assert get_model("LLAMA-3-70b") is get_model("llama3-70b")
    assert get_model("gpt3").name == "GPT-3-175B"


def test_unknown_model_suggests_close_match():
    with pytest.raises(WorkloadError, match="did you mean Llama-3-70B"):
        get_model("llama-3-70")
    with pytest.raises(WorkloadError, match="unknown model 'zzzz'"):
        get_model("zzzz")


@pytest.mark.parametrize("field", ["hidden", "layers", "heads", "vocab", "max_seq"])
@pytest.mark.parametrize("value", [0, -4])
def test_zero_or_negative_sizes_raise(field, value):
    kw = dict(name="x", hidden=64, layers=2, heads=4)
    kw[field] = value
    with pytest.raises(WorkloadError, match=field):
        ModelConfig(**kw)


def test_inconsistent_config_raises():
    with pytest.raises(WorkloadError, match="kv_heads"):
        ModelConfig(name="x", hidden=96, layers=2, heads=6, kv_heads=4)
    with pytest.raises(WorkloadError, match="head_dim"):
        ModelConfig(name="x", hidden=100, layers=2, heads=3)
    with pytest.raises(WorkloadError, match="top_k"):
        ModelConfig(name="x", hidden=64, layers=2, heads=4, n_experts=2, top_k=3)
    with pytest.raises(WorkloadError, match="norm"):
        ModelConfig(name="x", hidden=64, layers=2, heads=4, norm="batchnorm")


def test_defaults_gpt_style():
    m = ModelConfig(name="x", hidden=64, layers=2, heads=4, vocab=100, max_seq=16)
    assert (m.kv_heads, m.head_dim, m.ffn_hidden) == (4, 16, 256)
    assert m.param_count() == 2 * (12 * 64 * 64 + 4 * 64) + 2 * 100 * 64 + 16 * 64 + 2 * 64


def test_to_dict_is_json_ready():
    import json

    d = get_model("Mixtral-8x7B").to_dict()
    assert d["n_experts"] == 8 and d["params"] == 46_702_792_704 and "all" in d["sources"]
    json.dumps(d)


@pytest.mark.parametrize("field,value", [("bias", "yes"), ("gated_mlp", 1), ("tied_embeddings", "false"),
                                         ("dropout", 0)])
def test_switches_must_be_true_or_false(field, value):
    with pytest.raises(WorkloadError, match=f"{field} must be true or false"):
        ModelConfig(name="x", hidden=64, layers=1, heads=4, **{field: value})


def test_model_toml_file_with_a_string_switch_is_refused(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text('name = "x"\nhidden = 64\nlayers = 1\nheads = 4\nbias = "yes"\n')
    with pytest.raises(WorkloadError, match="bias must be true or false, got 'yes'"):
        get_model(str(p))


@pytest.mark.parametrize("name", [5, "", "  ", None])
def test_name_must_be_a_non_empty_string(name):
    with pytest.raises(WorkloadError, match="model name must be a non-empty string"):
        ModelConfig(name=name, hidden=64, layers=1, heads=4)
