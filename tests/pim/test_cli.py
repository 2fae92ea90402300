"""`c3kit pim ...` end to end: JSON, reports, and bad input as one line with exit code 2."""

import json

import pytest

from c3kit.cli.main import main


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_gemv_json_and_report(capsys, tmp_path):
    d = _json(capsys, ["pim", "gemv", "--model", "125m", "--batch", "1", "--json"])
    assert {r["gemv"] for r in d["gemvs"]} >= {"qkv", "out", "ff1", "ff2", "attn_score", "attn_context"}
    assert {r["metric"] for r in d["summary"]} >= {"max_gemv_speedup", "avg_gemv_speedup", "max_token_speedup"}
    out = tmp_path / "rep"
    assert main(["pim", "gemv", "--model", "125m", "--batch", "1,2", "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"report.md", "gemvs.csv", "tokens.csv", "summary.csv", "gemv_speedup.png", "token_speedup.png"} <= names


def test_single_gemv(capsys):
    d = _json(capsys, ["pim", "gemv", "--m", "4096", "--k", "4096", "--json"])
    assert len(d["placements"]) == 3 and "roofline" in d["placements"][0]["explanation"]
    d = _json(capsys, ["pim", "gemv", "--m", "4096", "--k", "4096", "--batch", "1", "--tile-m", "16",
                       "--split-k", "2", "--degree", "2", "--json"])
    assert d["placements"][0]["split_k"] == 2


def test_amenability_and_jitq(capsys, tmp_path):
    d = _json(capsys, ["pim", "amenability", "--json"])
    assert {r["metric"] for r in d["summary"]} == {"baseline_avg_speedup", "optimized_avg_speedup"}
    traits = tmp_path / "t.json"
    traits.write_text(json.dumps({"touched_bytes": 1e9, "gpu_bytes": 1e9, "flops": 1e8, "pattern": "streaming",
                                  "bank_local": 1.0, "alu_ops": ["mac"], "cmds_per_open": 64}))
    assert _json(capsys, ["pim", "amenability", "--traits", str(traits), "--json"])["amenable"] is True
    d = _json(capsys, ["pim", "jitq", "--model", "1.3b", "--tokens", "512,4096", "--json"])
    assert {r["format"] for r in d["quantizers"]} == {"MX9", "MX6", "MX4"}
    assert all(r["max_error_over_bound"] <= 1 for r in d["quantizers"])
    for cmd in (["amenability"], ["jitq", "--model", "125m", "--tokens", "1024"]):
        out = tmp_path / cmd[0]
        assert main(["pim", *cmd, "--out", str(out)]) == 0
        assert (out / "report.md").exists() and any(p.suffix == ".png" for p in out.iterdir())


@pytest.mark.parametrize("argv", [
    ["pim", "gemv", "--in-regs", "6"],
    ["pim", "gemv", "--out-regs", "3"],
    ["pim", "gemv", "--banks-per-channel", "0"],
    ["pim", "gemv", "--channels", "0"],
    ["pim", "gemv", "--m", "64", "--k", "64", "--batch", "128"],
    ["pim", "gemv", "--m", "64", "--k", "64", "--batch", "4", "--tile-m", "16", "--degree", "4"],
    ["pim", "gemv", "--m", "64", "--k", "64", "--tile-m", "3"],
    ["pim", "gemv", "--m", "0", "--k", "64"],
    ["pim", "gemv", "--m", "64"],
    ["pim", "gemv", "--batch", "1,x"],
    ["pim", "gemv", "--model", "opt-7b"],
    ["pim", "gemv", "--pim", "nope"],
    ["pim", "amenability", "--primitive", "fft"],
    ["pim", "amenability", "--traits", "/no/such.json"],
    ["pim", "jitq", "--formats", "mx5"],
    ["pim", "jitq", "--mfu", "0"],
    ["pim", "jitq", "--accum", "0"],
])
def test_bad_input_is_one_line_exit_2(argv, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert not out.exists()
