"""`c3kit analyze --loss-kernel / --bias-grads / --grad-reduce-dtype / --train-metrics-dtype / --zero2` and
`--model FILE.toml`: the facts `c3kit validate` prices llm-foundry runs with, their ops, and bad input."""

import json

import pytest

from c3kit.cli.main import main
from c3kit.workload.model import get_model

# a small MPT-style model (biases, LayerNorm, GELU MLP, tied embeddings) in a model TOML file
MPT = """name = "mpt-test"
hidden = 2048
layers = 4
heads = 16
vocab = 50368
norm = "layernorm"
gated_mlp = false
tied_embeddings = true
bias = true
"""
LAYOUT = ["--hw", "H100-SXM", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--fsdp", "--seq", "2048",
          "--batch", "16", "--micro-batch", "1", "--recompute", "none"]


@pytest.fixture
def mpt(tmp_path) -> str:
    p = tmp_path / "mpt.toml"
    p.write_text(MPT)
    return str(p)


def _run(tmp_path, capsys, *args) -> dict:
    assert main(["analyze", *args, "--out", str(tmp_path / "o"), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _rows(doc) -> dict:
    return {r["name"]: r for r in doc["rows"]}


def test_the_defaults_are_the_layer_descriptions(tmp_path, capsys, mpt):
    c = _run(tmp_path, capsys, "--model", mpt, *LAYOUT)["config"]
    assert (c["loss_kernel"], c["bias_grads"], c["grad_reduce_dtype"], c["train_metrics_dtype"], c["zero2"]) == (
        "eager", False, "fp32", "fp32", False)


def test_bias_grads_add_one_reduction_per_biased_linear(tmp_path, capsys, mpt):
    base = _run(tmp_path, capsys, "--model", mpt, *LAYOUT)
    more = _run(tmp_path, capsys, "--model", mpt, *LAYOUT, "--bias-grads")
    added = set(_rows(more)) - set(_rows(base))
    assert more["config"]["bias_grads"] is True
    assert added == {"qkv.bgrad", "proj.bgrad", "fc1.bgrad", "fc2.bgrad"}, added
    assert more["totals"]["step_time"] > base["totals"]["step_time"]


def test_xentropy_loss_reads_the_bf16_logits_only(tmp_path, capsys, mpt):
    eager = _rows(_run(tmp_path, capsys, "--model", mpt, *LAYOUT))
    fused = _run(tmp_path, capsys, "--model", mpt, *LAYOUT, "--loss-kernel", "xentropy")
    assert fused["config"]["loss_kernel"] == "xentropy"
    rows = _rows(fused)
    assert 0 < rows["loss"]["compute_s"] < eager["loss"]["compute_s"]


def test_bf16_gradient_reduction_halves_the_reduce_scatter_and_the_gradients(tmp_path, capsys, mpt):
    fp32 = _run(tmp_path, capsys, "--model", mpt, *LAYOUT)
    bf16 = _run(tmp_path, capsys, "--model", mpt, *LAYOUT, "--grad-reduce-dtype", "bf16")
    assert bf16["config"]["grad_reduce_dtype"] == "bf16"
    rs32, rs16 = _rows(fp32)["layer.fsdp_rs"], _rows(bf16)["layer.fsdp_rs"]
    assert 0 < rs16["comm_s"] < rs32["comm_s"]
    assert bf16["memory"]["gradients"] == pytest.approx(fp32["memory"]["gradients"] / 2)


def test_bf16_training_metrics_are_cheaper_than_the_autocast_ones(tmp_path, capsys, mpt):
    fp32 = _rows(_run(tmp_path, capsys, "--model", mpt, *LAYOUT, "--train-metrics", "2"))
    bf16 = _run(tmp_path, capsys, "--model", mpt, *LAYOUT, "--train-metrics", "2", "--train-metrics-dtype", "bf16")
    assert bf16["config"]["train_metrics_dtype"] == "bf16"
    assert 0 < _rows(bf16)["train_metrics"]["compute_s"] < fp32["train_metrics"]["compute_s"]


def test_zero2_shards_the_gradients(tmp_path, capsys):
    args = ["--model", "Llama-3-8B", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--seq", "2048",
            "--batch", "16", "--micro-batch", "1", "--recompute", "none"]
    z1 = _run(tmp_path, capsys, *args, "--dist-opt")
    z2 = _run(tmp_path, capsys, *args, "--zero2")
    assert z2["config"]["zero2"] is True and z2["config"]["dist_optimizer"] is True
    assert z2["memory"]["gradients"] == pytest.approx(z1["memory"]["gradients"] / 8)
    assert not any("ZeRO-1" in c for c in z2["chosen"])  # asked for, not chosen by the search


def test_zero2_is_named_zero2_in_the_text_report(tmp_path, capsys):
    args = ["--model", "Llama-3-8B", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--seq", "2048",
            "--batch", "16", "--micro-batch", "1", "--recompute", "none", "--out", str(tmp_path / "o")]
    assert main(["analyze", *args, "--zero2"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "dp 8 (zero-2)" in first and "zero-1" not in first, first
    assert main(["analyze", *args, "--dist-opt"]) == 0
    assert "dp 8 (zero-1)" in capsys.readouterr().out.splitlines()[0]


def test_model_toml_file_is_the_model(tmp_path, mpt):
    m = get_model(mpt)
    assert (m.name, m.hidden, m.layers, m.heads, m.kv_heads, m.ffn_hidden, m.bias, m.norm) == (
        "mpt-test", 2048, 4, 16, 16, 8192, True, "layernorm")


@pytest.mark.parametrize("extra,needle", [
    (["--loss-kernel", "fused"], "unknown loss kernel 'fused': use one of eager, xentropy"),
    (["--grad-reduce-dtype", "fp16"], "unknown gradient reduce dtype 'fp16': use one of fp32, bf16"),
    (["--train-metrics", "2", "--train-metrics-dtype", "fp8"], "unknown training-metrics dtype 'fp8'"),
    (["--train-metrics-dtype", "bf16"], "use it with --train-metrics > 0"),
    (["--fp8-scaling", "delayed_cached", "--dtype", "fp8"], "delayed_cached"),
    (["--zero2"], "drop --zero2"),  # with --fsdp (LAYOUT)
])
def test_bad_facts_exit_2_and_write_nothing(tmp_path, capsys, mpt, extra, needle):
    out = tmp_path / "never"
    assert main(["analyze", "--model", mpt, *LAYOUT, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err, err
    assert not out.exists()


@pytest.mark.parametrize("args,needle", [
    (["--model", "Llama-3-8B", "--bias-grads"], "has no biases"),
    (["--model", "Llama-3-8B", "--zero2", "--no-dist-opt"], "drop --no-dist-opt"),
    (["--model", "missing.toml"], "no such model file"),
    (["--model", "BAD"], "not valid TOML"),
    (["--model", "NOLAYERS"], "missing 'layers'"),
])
def test_bad_models_and_layouts_exit_2(tmp_path, capsys, args, needle):
    (tmp_path / "bad.toml").write_text("hidden = [\n")
    (tmp_path / "nolayers.toml").write_text('name = "x"\nhidden = 1024\nheads = 8\n')
    files = {"BAD": str(tmp_path / "bad.toml"), "NOLAYERS": str(tmp_path / "nolayers.toml"),
             "missing.toml": str(tmp_path / "missing.toml")}
    out = tmp_path / "never"
    assert main(["analyze", *[files.get(a, a) for a in args], "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err, err
    assert not out.exists()


PP_LAYOUT = ["--hw", "A100-SXM-80G", "--gpus", "16", "--tp", "2", "--no-sp", "--pp", "4", "--dp", "2", "--seq", "2048",
             "--batch", "32", "--micro-batch", "1", "--recompute", "full"]


def test_pp_engine_reaches_the_step_and_deepspeed_changes_its_sends(tmp_path, capsys, mpt):
    base = _run(tmp_path, capsys, "--model", mpt, *PP_LAYOUT)
    ds = _run(tmp_path, capsys, "--model", mpt, *PP_LAYOUT, "--pp-engine", "deepspeed")
    assert (base["config"]["pp_engine"], ds["config"]["pp_engine"]) == ("megatron", "deepspeed")
    assert ds["totals"]["step_time"] != base["totals"]["step_time"]


def test_the_text_report_names_a_pp_engine_other_than_megatrons(tmp_path, capsys, mpt):
    assert main(["analyze", "--model", mpt, *PP_LAYOUT, "--pp-engine", "deepspeed", "--out", str(tmp_path / "o")]) == 0
    assert ", pp engine deepspeed" in capsys.readouterr().out.splitlines()[0]
    assert main(["analyze", "--model", mpt, *PP_LAYOUT, "--out", str(tmp_path / "o")]) == 0
    assert "pp engine" not in capsys.readouterr().out.splitlines()[0]


@pytest.mark.parametrize("extra, needle", [
    (["--pp-engine", "gpipe"], "pp_engine 'gpipe'"),
    (["--pp-engine", "deepspeed", "--vpp", "2"], "pp_engine 'deepspeed'"),
])
def test_bad_pp_engine_exits_2_and_writes_nothing(tmp_path, capsys, mpt, extra, needle):
    out = tmp_path / "bad"
    assert main(["analyze", "--model", mpt, *PP_LAYOUT, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_deepspeed_engine_with_sp_exits_2(tmp_path, capsys, mpt):
    args = [a if a != "--no-sp" else "--sp" for a in PP_LAYOUT]
    assert main(["analyze", "--model", mpt, *args, "--pp-engine", "deepspeed", "--out", str(tmp_path / "x")]) == 2
    assert "sequence parallelism" in capsys.readouterr().err
