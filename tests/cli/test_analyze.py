"""`c3kit analyze`: the default run, options, JSON output, and bad input (exit 2, nothing written)."""

import json

import pytest

from c3kit.cli.main import main


def test_default_run_writes_report(tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["analyze", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Llama-3-70B" in text and "tp 8" in text and "chosen automatically" in text
    for f in ("report.md", "time_per_op.png", "exposed_vs_hidden.png", "ops.csv", "by_role.csv", "totals.csv"):
        assert (out / f).is_file(), f
    md = (out / "report.md").read_text()
    assert "time_per_op.png" in md and "Llama-3-70B" in md


def test_json_is_one_document(tmp_path, capsys):
    out = tmp_path / "j"
    assert main(["analyze", "--model", "Llama-3-8B", "--gpus", "8", "--tp", "2", "--pp", "2", "--seq", "2048",
                 "--batch", "16", "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["tp"] == 2 and doc["config"]["pp"] == 2 and doc["config"]["dp"] == 2
    t = doc["totals"]
    assert t["step_time"] > 0 and 0 <= t["exposed"] <= t["comm"] and t["bubble"] > 0
    assert abs(sum(r["share"] for r in doc["rows"]) - 1) < 1e-9


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_inference_phases(tmp_path, capsys, phase):
    assert main(["analyze", "--model", "Llama-3-8B", "--phase", phase, "--seq", "4096", "--out",
                 str(tmp_path / phase), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["phase"] == phase and doc["totals"]["step_time"] > 0
    assert all(r["phase"] != "bwd" for r in doc["rows"])


def test_hf_config(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 8,
                               "num_attention_heads": 16, "num_key_value_heads": 8, "intermediate_size": 5632,
                               "vocab_size": 32000, "max_position_embeddings": 4096}))
    assert main(["analyze", "--model", str(cfg), "--seq", "2048", "--out", str(tmp_path / "o"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["step_time"] > 0


BAD = [
    (["--model", "llama-3-71b"], "did you mean"),
    (["--hw", "H300"], "unknown hardware"),
    (["--tp", "3"], "divisible"),
    (["--model", "Llama-3-8B", "--pp", "40", "--tp", "1", "--gpus", "40"], "layers"),
    (["--gpus", "12", "--tp", "8"], "divisible"),
    (["--gpus", "16", "--tp", "8", "--dp", "4"], "GPUs"),
    (["--seq", "0"], "positive"),
    (["--seq", "-5"], "positive"),
    (["--batch", "0"], "positive"),
    (["--micro-batch", "-1"], "positive"),
    (["--phase", "serve"], "phase"),
    (["--dtype", "fp13"], "dtype"),
    (["--recompute", "some"], "recompute"),
    (["--ep", "2"], "dense"),
    (["--policy", "magic"], "policy"),
    (["--gpus", "8", "--tp", "8", "--recompute", "none"], "GB"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, args, needle):
    out = tmp_path / "never"
    assert main(["analyze", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle.lower() in err.lower(), err
    assert not out.exists()


@pytest.mark.parametrize("text", ["{not json", json.dumps({"model_type": "llama"}), json.dumps([1, 2])])
def test_malformed_config_json(tmp_path, capsys, text):
    cfg = tmp_path / "config.json"
    cfg.write_text(text)
    out = tmp_path / "never"
    assert main(["analyze", "--model", str(cfg), "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert not out.exists()


def test_serial_policy_exposes_everything(tmp_path, capsys):
    assert main(["analyze", "--model", "Llama-3-8B", "--gpus", "16", "--tp", "8", "--pp", "1", "--seq", "2048", "--policy", "serial",
                 "--out", str(tmp_path / "s"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["exposed"] == pytest.approx(doc["totals"]["comm"])
    assert {s["stream"] for s in doc["streams"]} == {"tp", "dp"}
    assert all(s["hidden_frac"] == pytest.approx(0, abs=1e-12) for s in doc["streams"])


def test_attention_backend_option(tmp_path, capsys):
    import json

    from c3kit.cli.main import main

    out = tmp_path / "bad"
    assert main(["analyze", "--model", "llama-3-8b", "--hw", "H100-SXM", "--gpus", "8", "--attention-backend",
                 "flash3", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown attention backend 'flash3'")
    assert not out.exists()
    times = {}
    for b in ("cudnn", "unfused"):
        assert main(["analyze", "--model", "llama-3-8b", "--hw", "H100-SXM", "--gpus", "8", "--tp", "1", "--pp", "1",
                     "--fsdp", "--recompute", "none", "--attention-backend", b, "--out", str(tmp_path / b),
                     "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["attention"]["backend"] == b
        times[b] = doc["totals"]["step_time"] if "totals" in doc else doc["step_time"]
    assert times["unfused"] > times["cudnn"]


def test_attention_backend_default_is_said_in_help_and_api():
    import inspect

    from c3kit import api

    assert inspect.signature(api.analyze).parameters["attention_backend"].default is None
    r = api.analyze("llama-3-8b", "A100-SXM-80G", gpus=8, tp=1, pp=1, fsdp=True, recompute="none",
                    compare_overlap=False)
    assert r.attention() == {"backend": "flash2", "default": True, "basis": "published microbenchmark",
                             "default_source": r.attention()["default_source"]}


def test_norm_rope_option(tmp_path, capsys):
    import json

    from c3kit.cli.main import main

    out = tmp_path / "bad"
    assert main(["analyze", "--model", "llama-3-8b", "--gpus", "8", "--norm-rope", "triton", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown norm/RoPE code 'triton'")
    assert not out.exists()
    times = {}
    for code in ("fused", "eager"):
        assert main(["analyze", "--model", "llama-3-8b", "--gpus", "8", "--tp", "1", "--pp", "1", "--fsdp",
                     "--recompute", "none", "--norm-rope", code, "--out", str(tmp_path / code), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["norm_rope"] == code
        times[code] = doc["step_time"] if "step_time" in doc else doc["totals"]["step_time"]
    assert times["eager"] > times["fused"]


def test_context_parallel_run(tmp_path, capsys):
    # issue 13: --cp reaches the layout: gpus = tp x cp x pp x dp, ring-attention traffic on the cp stream
    assert main(["analyze", "--model", "Llama-3-8B", "--hw", "H100-SXM", "--gpus", "16", "--tp", "2", "--cp", "2",
                 "--pp", "1", "--seq", "16384", "--batch", "32", "--out", str(tmp_path / "cp"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    c = doc["config"]
    assert c["cp"] == 2 and c["dp"] == 4 and c["tp"] * c["cp"] * c["pp"] * c["dp"] == 16
    cp_rows = [r for r in doc["rows"] if r["stream"] == "cp"]
    assert cp_rows and sum(r["comm_s"] for r in cp_rows) > 0


def test_context_parallel_matches_the_layer_description():
    from c3kit import analyze
    from c3kit.hw import get_gpu
    from c3kit.step import project
    from c3kit.step.overheads import DEFAULT_OVERHEADS
    from c3kit.workload.graph import build_step
    from c3kit.workload.model import get_model
    from c3kit.workload.parallel import Parallelism

    res = analyze("Llama-3-8B", "H100-SXM", gpus=16, tp=2, cp=2, pp=1, dist_opt=True, seq=16384, batch=32,
                  recompute="none", compare_overlap=False)
    par = Parallelism(tp=2, sp=True, cp=2, dp=4, global_batch=32, dist_optimizer=True)
    assert res.config.par == par
    gpu = get_gpu("H100-SXM")
    g = build_step(get_model("Llama-3-8B"), par, "train", 16384, "bf16", gpu.gpus_per_node)
    from c3kit.api import with_power

    cm, _ = with_power("efficiency", "sustained")
    from c3kit.step.policy import DEFAULT_MODE, policy_for

    want = project(g, gpu, cost_model=cm, overheads=DEFAULT_OVERHEADS,
                   policy=policy_for(DEFAULT_MODE)).totals.step_time
    assert res.step.totals.step_time == want


def test_uneven_interleaved_split_through_the_cli(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 10,
                               "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 2816,
                               "vocab_size": 32000, "max_position_embeddings": 4096}))
    args = ["analyze", "--model", str(cfg), "--gpus", "4", "--tp", "1", "--pp", "4", "--vpp", "2", "--seq", "1024",
            "--batch", "8", "--recompute", "none"]
    assert main([*args, "--out", str(tmp_path / "even")]) == 2  # 10 layers do not divide by 8 stages
    assert "pp 4 x vpp 2" in capsys.readouterr().err
    assert main([*args, "--pp-split", "torchtitan", "--out", str(tmp_path / "tt"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["pp_split"] == "torchtitan" and doc["totals"]["bubble"] > 0


CP_BAD = [
    (["--cp", "0"], "positive"),
    (["--cp", "-2"], "positive"),
    (["--cp", "3", "--seq", "8192"], "load-balanced"),
    (["--gpus", "8", "--tp", "8", "--cp", "2"], "cp"),
    (["--cp", "2", "--phase", "decode"], "training only"),
    (["--pp-split", "zigzag"], "pipeline split"),
]


@pytest.mark.parametrize("args,needle", CP_BAD)
def test_bad_cp_exits_2_and_writes_nothing(tmp_path, capsys, args, needle):
    out = tmp_path / "never"
    assert main(["analyze", "--model", "Llama-3-8B", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle.lower() in err.lower(), err
    assert not out.exists()


def test_json_config_says_every_option_that_was_priced(tmp_path, capsys):
    assert main(["analyze", "--model", "Llama-3-8B", "--gpus", "8", "--tp", "2", "--cp", "2", "--cp-impl", "torch",
                 "--train-metrics", "2", "--seq", "8192", "--batch", "8", "--out", str(tmp_path), "--json"]) == 0
    cfg = json.loads(capsys.readouterr().out)["config"]
    assert (cfg["cp"], cfg["cp_impl"], cfg["train_metrics"], cfg["flat_param_grads"]) == (2, "torch", 2, False)
    assert cfg["moe_imbalance"] == 1.0 and cfg["moe_a2a_overlap"] is False
