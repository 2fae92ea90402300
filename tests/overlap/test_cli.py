"""`c3kit overlap`: one op, a model, the trace file, JSON output, and bad input as exit code 2."""

import json

import pytest

from c3kit.cli.main import main

OP = ["overlap", "--pattern", "ag_gemm", "--m", "4096", "--n", "1024", "--k", "4096", "--hw", "H200"]


def test_one_op_json(capsys):
    assert main([*OP, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = [r["schedule"] for r in doc["results"]]
    assert "serial" in names and doc["chosen"] in names and doc["reasons"]
    times = [r["time"] for r in doc["results"]]
    assert times == sorted(times)
    assert doc["serial"] == pytest.approx(doc["t_comp"] + doc["t_comm"])


def test_one_op_table_and_trace(tmp_path, capsys):
    f = tmp_path / "t.json"
    assert main([*OP, "--trace", str(f)]) == 0
    out = capsys.readouterr().out
    assert "chosen (heuristic)" in out and "best (simulated)" in out
    trace = json.loads(f.read_text())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert xs and all(e["dur"] >= 0 for e in xs)
    assert any(e["ph"] == "C" for e in trace["traceEvents"])


def test_some_schedules_only(capsys):
    assert main([*OP, "--schedules", "serial,ring-dma-prio", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(r["schedule"] for r in doc["results"]) == ["ring-dma-prio", "serial"]


def test_model_mode(capsys):
    assert main(["overlap", "--model", "Llama-3-8B", "--tp", "8", "--tokens", "2048", "--hw", "MI300X", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["pairs"]) == 8 and all(p["count"] == 32 for p in doc["pairs"])
    assert doc["best_total"] <= doc["chosen_total"] * (1 + 1e-9) <= doc["serial_total"] * 1.5


def test_moe_model_mode(capsys):
    assert main(["overlap", "--model", "Mixtral-8x7B", "--tp", "2", "--ep", "8", "--tokens", "1024", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(p["problem"]["pattern"] == "moe" for p in doc["pairs"])


@pytest.fixture
def no_dma_gpu(tmp_path):
    from importlib import resources

    text = resources.files("c3kit.hw").joinpath("data").joinpath("h200-sxm.toml").read_text()
    lines = []
    in_dma = False
    for line in text.splitlines():
        if line.startswith("["):
            in_dma = line.strip() == "[dma]"
        if in_dma and line.startswith("engines"):
            line = "engines = 0"
        if line.startswith("name"):
            line = 'name = "H200-no-dma"'
        lines.append(line)
    f = tmp_path / "nodma.toml"
    f.write_text("\n".join(lines) + "\n")
    return str(f)


@pytest.mark.parametrize("args", [
    ["--pattern", "ag_gemm", "--m", "1001", "--n", "8", "--k", "8"],  # not divisible by gpus
    ["--pattern", "ag_gemm", "--m", "0", "--n", "8", "--k", "8"],
    ["--pattern", "gemm_rs", "--m", "64", "--n", "-8", "--k", "8"],
    ["--pattern", "nope", "--m", "64", "--n", "8", "--k", "8"],
    ["--pattern", "ag_gemm", "--m", "72", "--n", "8", "--k", "8", "--schedules", "ficco-dma"],  # 72 % 64
    ["--pattern", "ag_gemm", "--m", "64", "--n", "8", "--k", "8", "--schedules", "warp-drive"],
    ["--pattern", "moe", "--m", "64", "--n", "8", "--k", "8"],  # no experts
    ["--pattern", "ag_gemm", "--m", "64", "--n", "8", "--k", "8", "--gpus", "16"],  # bigger than a node
    ["--m", "64"],  # no pattern
    ["--model", "Llama-3-8B", "--tp", "3"],
    ["--model", "No-Such-Model"],
    ["--pattern", "ag_gemm", "--m", "64", "--n", "8", "--k", "8", "--hw", "Z100"],
])
def test_bad_input_is_exit_2(args, capsys):
    assert main(["overlap", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1


def test_dma_schedule_without_dma_engines_is_exit_2(no_dma_gpu, capsys):
    args = ["overlap", "--pattern", "ag_gemm", "--m", "4096", "--n", "1024", "--k", "1024", "--hw", no_dma_gpu]
    assert main([*args, "--schedules", "ficco-dma"]) == 2
    assert "DMA engines" in capsys.readouterr().err
    assert main([*args, "--json"]) == 0  # without naming one, the DMA schedules are simply not candidates
    doc = json.loads(capsys.readouterr().out)
    assert all(r["engine"] != "dma" for r in doc["results"])


def test_eval_on_a_small_scenario_set(capsys):
    args = ["overlap", "eval", "--models", "Llama-3-8B,Mixtral-8x7B", "--tokens", "4096", "--hw", "H200", "--json"]
    assert main(args) == 0
    rep = json.loads(capsys.readouterr().out)
    for split in ("design", "held-out"):
        s = rep[split]
        assert s["scenarios"] > 0 and 0 <= s["optimal_share"] <= s["within_1pct_share"] <= 1
        assert 0 < s["worst_ratio"] <= s["mean_ratio"] <= 1
    assert rep["held_out_models"] and rep["ms_per_operator"] > 0


def test_eval_bad_options():
    assert main(["overlap", "eval", "--models", "Nope-1B"]) == 2
    assert main(["overlap", "eval", "--held-out", "1.5"]) == 2
    assert main(["overlap", "eval", "--tokens", "x"]) == 2
