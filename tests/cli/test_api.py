"""c3kit.analyze(): the CLI's defaults, the same numbers as `c3kit analyze`, memory per GPU everywhere."""

import inspect
import json

import pandas as pd
import pytest

import c3kit
from c3kit.cli.main import main

SMALL = dict(model="Llama-3-8B", gpus=8, tp=2, pp=2, seq=2048, batch=16)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The default `c3kit analyze --json` run once: (JSON document, report folder)."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("default") / "rep"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["analyze", "--out", str(out), "--json"]) == 0
    return json.loads(buf.getvalue()), out


def test_api_defaults_equal_the_cli_defaults(default_run):
    doc, _ = default_run
    res = c3kit.analyze()
    assert res.step_time == pytest.approx(doc["totals"]["step_time"], rel=1e-12)
    assert res.config_dict() == doc["config"] and res.cost_model == doc["cost_model"]
    assert res.to_dict()["memory"] == doc["memory"]


def test_cli_option_defaults_are_the_signature_defaults():
    from c3kit.cli.analyze_cmd import analyze as cmd

    api_defaults = {k: p.default for k, p in inspect.signature(c3kit.analyze).parameters.items()}
    for name, p in inspect.signature(cmd).parameters.items():
        if name in api_defaults:
            assert p.default.default == api_defaults[name], name


def test_api_and_cli_agree_on_a_given_layout(tmp_path, capsys):
    assert main(["analyze", "--model", "Llama-3-8B", "--gpus", "8", "--tp", "2", "--pp", "2", "--seq", "2048",
                 "--batch", "16", "--policy", "serial", "--power", "burst", "--out", str(tmp_path / "o"),
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    res = c3kit.analyze(**SMALL, policy="serial", power="burst")
    assert res.step_time == pytest.approx(doc["totals"]["step_time"], rel=1e-12)
    assert res.step_time != pytest.approx(c3kit.analyze(**SMALL).step_time, rel=1e-6)  # the options matter


def test_result_to_json_and_to_pandas():
    res = c3kit.analyze(**SMALL)
    doc = json.loads(res.to_json())
    assert doc["config"]["tp"] == 2 and doc["totals"]["step_time"] == pytest.approx(res.step_time)
    df = res.to_pandas()
    assert isinstance(df, pd.DataFrame) and {"role", "phase", "compute_s", "exposed_s"} <= set(df.columns)
    assert df["share"].sum() == pytest.approx(1.0, rel=1e-9) and len(df) == len(res.step.rows)
    mf = res.memory_frame()
    assert mf.set_index("kind").loc["total", "bytes"] == pytest.approx(res.memory.total)


def test_memory_is_the_workload_layers_report():
    from c3kit.workload.memory import memory_report

    res = c3kit.analyze(**SMALL)
    ref = memory_report(res.config.graph, res.config.hw)
    assert res.memory_dict()["total"] == pytest.approx(ref.total, rel=1e-12)
    assert res.memory_dict()["activations"] == pytest.approx(ref.activations, rel=1e-12)


def test_default_memory_hand_checked(default_run):
    # Llama-3-70B at TP 8, DP 2 with ZeRO-1: bf16 weights (2 B), fp32 gradients (4 B) and Adam (12 B over 2 ranks)
    doc, _ = default_run
    m = doc["memory"]
    assert doc["config"]["dp"] == 2 and doc["config"]["dist_optimizer"]
    assert m["gradients"] == pytest.approx(2 * m["weights"], rel=1e-12)
    assert m["optimizer"] == pytest.approx(3 * m["weights"], rel=1e-12)
    kinds = ("weights", "gradients", "optimizer", "activations", "kv_cache", "buffers")
    assert m["total"] == pytest.approx(sum(m[k] for k in kinds), rel=1e-12)
    assert m["capacity"] == 141e9 and m["fits"] and m["headroom"] == pytest.approx(141e9 - m["total"])


def test_memory_in_report_csv_and_figure(default_run):
    doc, out = default_run
    mem = pd.read_csv(out / "memory.csv").set_index("kind")
    assert mem.loc["total", "bytes"] == pytest.approx(doc["memory"]["total"])
    assert mem.loc["capacity", "bytes"] == pytest.approx(141e9)
    md = (out / "report.md").read_text()
    assert "memory.png" in md and "memory.csv" in md and "Memory per GPU" in md
    assert (out / "memory.png").stat().st_size > 1000


def test_memory_in_console(tmp_path, capsys):
    assert main(["analyze", "--model", "Llama-3-8B", "--phase", "decode", "--seq", "4096",
                 "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert "Memory per GPU" in text and "kv cache" in text and "capacity (H200-SXM)" in text
    res = c3kit.analyze("Llama-3-8B", phase="decode", seq=4096)
    assert res.memory.kv_cache > 0 and res.memory.gradients == 0 and res.memory.optimizer == 0


def test_api_bad_input_raises_c3kit_error():
    from c3kit.errors import C3kitError

    with pytest.raises(C3kitError, match="--dist-opt"):
        c3kit.analyze(fsdp=True, dist_opt=True)
    with pytest.raises(C3kitError, match="policy"):
        c3kit.analyze(policy="fast")


def test_report_links_only_files_that_exist(default_run):
    import re
    from pathlib import Path

    _, out = default_run
    md = (out / "report.md").read_text()
    repo = Path(__file__).resolve().parents[2]
    named = set(re.findall(r"[\w./-]+\.(?:md|csv|json|png|py|toml)", md))
    assert named, "the report names its files"
    for f in named:
        assert (out / f).exists() or (repo / f).exists(), f
    assert "|---|\n\n" not in md  # no table without rows


def test_moe_experts_and_imbalance_reach_the_step():
    kw = dict(model="Mixtral-8x7B", hw="H100-SXM", gpus=16, tp=8, pp=2, seq=256, compare_overlap=False)
    loop = {r.name: r.compute_s for r in c3kit.analyze(**kw, moe_experts="sequential").step.rows}
    one = {r.name: r.compute_s for r in c3kit.analyze(**kw).step.rows}
    # 8 local experts issued from a Python loop: more host time per layer pass than one grouped call
    assert loop["moe_host_bound"] > one.get("moe_host_bound", 0.0)
    kw.update(seq=4096, ep=8)  # the busiest expert-parallel rank's experts take 1.5x the balanced rows
    heavy = c3kit.analyze(**kw, moe_imbalance=1.5)
    assert heavy.config.par.moe_imbalance == 1.5 and heavy.step_time > c3kit.analyze(**kw).step_time
