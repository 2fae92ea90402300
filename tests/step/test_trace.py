"""`c3kit analyze --trace`: a valid Chrome trace of one layer with compute, TP/DP and DMA-engine tracks."""

import json

import pytest

from c3kit.cli.main import main
from c3kit.hw import get_gpu
from c3kit.step.policy import EngineOverlap, SerialOverlap
from c3kit.step.trace import layer_timeline
from c3kit.workload.graph import build_step
from c3kit.workload.model import get_model
from c3kit.workload.parallel import Parallelism

H200 = get_gpu("H200-SXM")


def graph(dp=1, fsdp=False):
    return build_step(get_model("Llama-3-8B"), Parallelism(tp=8, sp=True, dp=dp, fsdp=fsdp, global_batch=2 * dp),
                      "train", 2048)


def _threads(doc):
    return {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}


def test_cli_trace_is_valid_chrome_json_with_tracks(tmp_path, capsys):
    f = tmp_path / "layer.json"
    assert main(["analyze", "--model", "Llama-3-8B", "--gpus", "16", "--tp", "8", "--pp", "1", "--seq", "2048",
                 "--overlap", "ring-dma", "--trace", str(f), "--out", str(tmp_path / "o"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"] == str(f)
    doc = json.loads(f.read_text())
    threads = _threads(doc)
    assert {"compute (priority 0)", "tp (priority 0)", "dp (priority 0)", "DMA engines"} <= threads
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert xs and all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs)
    assert any("[ring-dma]" in e["name"] for e in xs)


def test_compute_is_sequential_and_the_layer_matches_the_projection():
    g = graph()
    tl = layer_timeline(g, H200, policy=SerialOverlap(), cost_model="efficiency")
    comp = tl.by_stream("compute")
    assert all(a.end <= b.start + 1e-15 for a, b in zip(comp, comp[1:]))
    # with nothing overlapped, the layer's span is its compute plus all its blocking collectives
    layer = [nd for nd in g.nodes if nd.scope == "layer"]
    from c3kit.step.project import node_times, step_timer

    t = node_times(g, H200, step_timer("efficiency"))
    idx = {nd.id: i for i, nd in enumerate(g.nodes)}
    expect = sum(t[idx[nd.id]] for nd in layer if nd.stream in ("compute", "tp"))
    assert max(iv.end for iv in comp) == pytest.approx(expect, rel=1e-9)


def test_overlap_shortens_the_layer():
    g = graph()
    serial = max(iv.end for iv in layer_timeline(g, H200, policy=SerialOverlap()).by_stream("compute"))
    auto = max(iv.end for iv in layer_timeline(g, H200, policy=EngineOverlap("auto")).by_stream("compute"))
    assert auto < serial


def test_trace_unwritable(tmp_path, capsys):
    assert main(["analyze", "--model", "Llama-3-8B", "--gpus", "8", "--tp", "8", "--seq", "2048", "--batch", "2",
                 "--trace", str(tmp_path / "no" / "dir" / "t.json"), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("error: cannot write trace")
