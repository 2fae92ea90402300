"""`c3kit analyze --fsdp-sync`: FSDP gathering once per step (torchtitan with PP), and bad input."""

import json

import pytest

from c3kit.cli.main import main

ARGS = ["--model", "Llama-3-8B", "--gpus", "16", "--tp", "2", "--pp", "2", "--dp", "4", "--fsdp", "--seq", "2048",
        "--batch", "32", "--recompute", "full"]


def _run(tmp_path, capsys, *extra) -> dict:
    assert main(["analyze", *ARGS, *extra, "--out", str(tmp_path / "o"), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_once_per_step_removes_the_backward_gathers(tmp_path, capsys):
    micro = _run(tmp_path, capsys)
    step = _run(tmp_path, capsys, "--fsdp-sync", "step")
    assert micro["config"]["fsdp_sync"] == "micro" and step["config"]["fsdp_sync"] == "step"
    names = {r["name"]: r for r in step["rows"]}
    assert "layer.fsdp_ag.bwd" not in names and "stage.fsdp_rs" in names
    assert names["layer.fsdp_ag"]["runs"] == 16  # 16 layers on the stage, once per step
    m_names = {r["name"]: r for r in micro["rows"]}
    assert m_names["layer.fsdp_ag"]["runs"] == 16 * 8  # every one of the 8 micro-batches
    assert step["totals"]["comm"] < micro["totals"]["comm"]
    assert step["memory"]["weights"] > micro["memory"]["weights"]  # the stage's parameters stay gathered


@pytest.mark.parametrize("extra,needle", [(["--fsdp-sync", "layer"], "fsdp sync"),
                                          (["--no-fsdp", "--fsdp-sync", "step"], "--fsdp")])
def test_bad_fsdp_sync_exits_2(tmp_path, capsys, extra, needle):
    args = [a for a in ARGS if not (a == "--fsdp" and "--no-fsdp" in extra)]
    out = tmp_path / "never"
    assert main(["analyze", *args, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle.lower() in err.lower(), err
    assert not out.exists()


def test_recompute_modes_from_the_command_line(tmp_path, capsys):
    full = _run(tmp_path, capsys)["totals"]["compute"]
    op = _run(tmp_path, capsys, "--recompute", "op")
    layer = _run(tmp_path, capsys, "--recompute", "layer", "--recompute-every", "4")
    assert op["config"]["recompute"] == "op" and op["totals"]["compute"] < full
    assert layer["totals"]["compute"] < full
    assert {r["name"] for r in op["rows"]} >= {"re.qkv", "re.proj", "re.fc1"}
    out = tmp_path / "never"
    assert main(["analyze", *ARGS, "--recompute", "layer", "--recompute-every", "0", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: ") and not out.exists()
