"""`c3kit analyze --train-metrics / --flat-param-grads / --cp-impl`: framework ops in the per-op table, and bad input."""

import json

import pytest

from c3kit.cli.main import main

ARGS = ["--model", "Llama-3-8B", "--gpus", "8", "--tp", "1", "--pp", "1", "--dp", "8", "--fsdp", "--seq", "2048",
        "--batch", "16", "--micro-batch", "1", "--recompute", "none"]
CP = ["--model", "Llama-3-8B", "--gpus", "8", "--tp", "1", "--pp", "1", "--cp", "4", "--dp", "2", "--fsdp",
      "--seq", "16384", "--batch", "2", "--micro-batch", "1", "--recompute", "full"]


def _run(tmp_path, capsys, args, *extra) -> dict:
    assert main(["analyze", *args, *extra, "--out", str(tmp_path / "o"), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_framework_ops_show_in_the_table_and_cost_time(tmp_path, capsys):
    base = _run(tmp_path, capsys, ARGS)
    more = _run(tmp_path, capsys, ARGS, "--train-metrics", "2", "--flat-param-grads")
    names = {r["name"]: r for r in more["rows"]}
    assert "train_metrics" in names and "layer.grad_cat" in names
    assert names["train_metrics"]["runs"] == 2 and names["layer.grad_cat"]["runs"] == 32 * 2  # 2 micro-batches
    assert not {"train_metrics", "layer.grad_cat"} & {r["name"] for r in base["rows"]}
    assert more["totals"]["step_time"] > base["totals"]["step_time"]


def test_torch_cp_merges(tmp_path, capsys):
    ring = _run(tmp_path, capsys, CP)
    torch = _run(tmp_path, capsys, CP, "--cp-impl", "torch")
    rows = {r["name"]: r for r in torch["rows"]}
    assert {"attn.cp_merge", "re.attn.cp_merge", "attn.bwd.cp_merge", "attn.bwd.cp_dkv_last"} <= rows.keys()
    last = rows["attn.bwd.cp_dkv_last"]  # the last fp32 dK, dV pass, waited for after the loop: exposed
    assert last["stream"] == "cp" and last["comm_s"] > 0 and last["exposed_s"] == pytest.approx(last["comm_s"])
    assert rows["attn.bwd.cp_merge"]["compute_s"] > rows["attn.cp_merge"]["compute_s"] > 0
    assert not any(n.endswith(("cp_merge", "cp_dkv_last")) for n in (r["name"] for r in ring["rows"]))
    assert torch["totals"]["step_time"] > ring["totals"]["step_time"]


@pytest.mark.parametrize("extra,needle", [(["--train-metrics", "-1"], "train_metrics"),
                                          (["--cp-impl", "allgather"], "cp_impl")])
def test_bad_framework_ops_exit_2(tmp_path, capsys, extra, needle):
    out = tmp_path / "never"
    assert main(["analyze", *ARGS, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err, err
    assert not out.exists()
