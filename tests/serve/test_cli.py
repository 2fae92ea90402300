"""`c3kit serve` through the CLI: a run writes its report; bad input is one error line, exit 2, nothing written."""

import json

import pytest

from c3kit.cli.main import main

FAST = ["--requests", "60", "--prompt-len", "uniform:20:200", "--output-len", "uniform:5:40"]


def test_run_writes_report(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["serve", "--rates", "2,8", *FAST, "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["rate_rps"] for r in doc["runs"]] == [2.0, 8.0]
    assert doc["metrics"]["requests"] == 60
    for f in ("report.md", "summary.csv", "requests.csv", "iterations.csv", "latency_cdf.png", "capacity.png",
              "timeline.png", "trace.json", "metrics.json"):
        assert (out / f).is_file(), f
    trace = json.loads((out / "trace.json").read_text())
    assert any(e.get("ph") == "X" for e in trace["traceEvents"])


def test_slo_search(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["serve", "--slo", "ttft=500ms,tpot=50ms", *FAST, "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["best_rate_rps"] > 0 and doc["saturated_rps"] > 0


def test_trace_run(tmp_path, capsys):
    t = tmp_path / "t.csv"
    t.write_text("arrival_s,prompt_len,output_len\n0,100,10\n0.05,50,20\n0.2,300,5\n")
    assert main(["serve", "--trace", str(t), "--out", str(tmp_path / "o"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["requests"] == 3


@pytest.mark.parametrize("args", [
    ["--rate", "0"], ["--rate", "-3"], ["--rates", "1,0"], ["--rates", "1,x"], ["--prompt-len", "0"],
    ["--output-len", "-4"], ["--prompt-len", "normal:abc:1"], ["--slo", "ttft=fast"], ["--slo", "speed=1s"],
    ["--model", "Llama-3-70B", "--tp", "1"], ["--prompt-len", "2000000"], ["--trace", "MISSING.csv"],
    ["--requests", "0"], ["--max-seqs", "512", "--max-batched-tokens", "256"], ["--tp", "3"],
    ["--policy", "psychic"], ["--rate", "2", "--rates", "1,2"], ["--engine", "tgi"], ["--block-size", "0"],
])
def test_bad_input(tmp_path, capsys, args):
    out = tmp_path / "bad"
    assert main(["serve", *args, "--requests", "20", "--out", str(out)] if "--requests" not in args else
                ["serve", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert not out.exists()


def test_not_a_trace(tmp_path, capsys):
    t = tmp_path / "x.csv"
    t.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    out = tmp_path / "o"
    assert main(["serve", "--trace", str(t), "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert not out.exists()


def test_engine_terms_slow_the_same_workload(tmp_path, capsys):
    runs = {}
    for e in ("none", "vllm-v0"):
        assert main(["serve", "--rate", "1000", *FAST, "--engine", e, "--out", str(tmp_path / e), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["engine"] == e and f"engine terms {e}" in doc["setup"]
        runs[e] = doc["metrics"]
    assert runs["vllm-v0"]["throughput_rps"] < runs["none"]["throughput_rps"]


def test_scheduler_flags_reach_the_setup(tmp_path, capsys):
    args = ["serve", "--rate", "4", *FAST, "--no-chunked-prefill", "--mixed-batches", "--reserve-kv", "--block-size",
            "32", "--kv-of-free", "--json"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "blocks of 32" in doc["setup"] and "prompts beside decode" in doc["setup"]
    assert "KV reserved for whole requests" in doc["setup"]
    assert main(["serve", "--rate", "4", *FAST, "--json", "--out", str(tmp_path / "b")]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "blocks of 16" in plain["setup"] and "reserved" not in plain["setup"]
    # u * (total - weights) > u * total - weights: a share of what the weights leave holds more KV tokens
    assert doc["kv"]["blocks"] * 32 > plain["kv"]["blocks"] * 16
