"""`c3kit analyze --tp-comm-overlap`: Transformer Engine's userbuffers TP overlap, and bad input."""

import json

import pytest

from c3kit.cli.main import main

ARGS = ["--model", "Llama-3-8B", "--hw", "H100-SXM", "--gpus", "8", "--tp", "4", "--pp", "1", "--dp", "2", "--seq",
        "2048", "--batch", "8", "--recompute", "none", "--dtype", "fp8"]


def _run(tmp_path, capsys, *extra) -> dict:
    assert main(["analyze", *ARGS, *extra, "--out", str(tmp_path / "o"), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_userbuffers_overlap_prices_the_tp_pairs_by_their_schedules(tmp_path, capsys):
    off = _run(tmp_path, capsys)
    on = _run(tmp_path, capsys, "--tp-comm-overlap", "ring_exchange")
    assert off["config"]["tp_comm_overlap"] == "none" and on["config"]["tp_comm_overlap"] == "ring_exchange"
    tp = {r["schedule"] for r in on["rows"] if r["stream"] == "tp" and r["phase"] != "-"}
    assert {"ring-dma-prio", "bulk-sm-prio"} <= tp
    assert not {"ring-dma-prio", "bulk-sm-prio"} & {r["schedule"] for r in off["rows"]}
    assert on["totals"]["exposed"] < off["totals"]["exposed"]
    assert on["totals"]["step_time"] < off["totals"]["step_time"]


@pytest.mark.parametrize("extra,needle", [(["--tp-comm-overlap", "always"], "tp_comm_overlap 'always'"),
                                          (["--no-sp", "--tp-comm-overlap", "pipeline"], "--sp")])
def test_bad_tp_comm_overlap_exits_2(tmp_path, capsys, extra, needle):
    out = tmp_path / "never"
    assert main(["analyze", *ARGS, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err, err
    assert "Traceback" not in err and not out.exists()
