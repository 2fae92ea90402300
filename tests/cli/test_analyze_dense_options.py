"""`c3kit analyze --no-dp-overlap`, `--pp-p2p-overlap` and `--optimizer-impl`: what each changes, and bad input."""

import json

import pytest

from c3kit.cli.main import main

ARGS = ["--model", "Llama-3-8B", "--gpus", "16", "--tp", "2", "--pp", "2", "--vpp", "2", "--dp", "4", "--seq", "2048",
        "--batch", "32", "--recompute", "full", "--no-fsdp", "--no-dist-opt"]


def _run(tmp_path, capsys, *extra) -> dict:
    assert main(["analyze", *ARGS, *extra, "--out", str(tmp_path / "o"), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _exposed(res, role) -> float:
    return sum(r["exposed_s"] for r in res["rows"] if r["role"] == role)


def test_each_option_moves_its_own_rows(tmp_path, capsys):
    base = _run(tmp_path, capsys)
    after = _run(tmp_path, capsys, "--no-dp-overlap")
    assert after["config"]["dp_overlap"] is False and base["config"]["dp_overlap"] is True
    dp_comm = sum(r["comm_s"] for r in after["rows"] if r["role"] == "dp_grad")
    assert _exposed(after, "dp_grad") == pytest.approx(dp_comm)  # every gradient reduction exposed
    assert _exposed(base, "dp_grad") < dp_comm
    p2p = _run(tmp_path, capsys, "--pp-p2p-overlap")
    assert _exposed(base, "pp_fwd") > 0 and _exposed(p2p, "pp_fwd") == 0.0
    assert p2p["totals"]["step_time"] < base["totals"]["step_time"] < after["totals"]["step_time"]
    loop = _run(tmp_path, capsys, "--optimizer-impl", "unfused")
    names = {r["name"] for r in loop["rows"]}
    assert "optimizer_unfused" in names and "optimizer_unfused" not in {r["name"] for r in base["rows"]}
    assert loop["totals"]["step_time"] > base["totals"]["step_time"]


@pytest.mark.parametrize("extra,needle", [(["--optimizer-impl", "loop"], "optimizer_impl"),
                                          (["--no-dp-overlap", "--fsdp"], "fsdp")])
def test_bad_dense_options_exit_2(tmp_path, capsys, extra, needle):
    args = [a for a in ARGS if not (a == "--no-fsdp" and "--fsdp" in extra)]
    out = tmp_path / "never"
    assert main(["analyze", *args, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle.lower() in err.lower(), err
    assert not out.exists()
