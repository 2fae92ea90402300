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
    assert {"compute", "tp", "dp", "DMA engines"} <= threads  # the whole step (one stage here)
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


# --- the whole step with pipeline stages ---------------------------------------------------------------------

def _pp_graph(pp=2, m=4, dp=2):
    return build_step(get_model("Llama-3-8B"), Parallelism(tp=4, sp=True, dp=dp, pp=pp, micro_batch=1,
                                                           global_batch=m * dp), "train", 2048)


def test_step_trace_has_a_process_per_stage_with_expected_tracks():
    from c3kit.step.trace import step_trace

    doc = json.loads(json.dumps(step_trace(_pp_graph(pp=2), H200, policy=EngineOverlap("ring-dma"))))
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert sorted(procs.values()) == ["stage 0", "stage 1"]
    for pid in procs:
        threads = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name" and e["pid"] == pid}
        assert {"compute", "tp", "dp", "pp", "DMA engines"} <= threads
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert xs and all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs)
    assert any(e["name"].startswith("mb3 fwd L0 ") for e in xs) and any(e["name"] == "optimizer" for e in xs)


def test_step_trace_follows_1f1b_and_the_pipeline_dependencies():
    from c3kit.step.trace import step_trace

    m, pp = 4, 2
    doc = step_trace(_pp_graph(pp=pp, m=m), H200, policy=SerialOverlap())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["name"].startswith("mb")]

    def blocks(pid):
        seq = []
        for e in sorted((e for e in xs if e["pid"] == pid and e["tid"] == 1), key=lambda e: e["ts"]):
            key = tuple(e["name"].split()[:2])
            if not seq or seq[-1] != key:
                seq.append(key)
        return seq

    # stage 0: one warm-up forward, then forward and backward in turn; the last stage: no warm-up
    assert blocks(1) == [("mb0", "fwd"), ("mb1", "fwd"), ("mb0", "bwd"), ("mb2", "fwd"), ("mb1", "bwd"),
                         ("mb3", "fwd"), ("mb2", "bwd"), ("mb3", "bwd")]
    assert blocks(2)[:3] == [("mb0", "fwd"), ("mb0", "bwd"), ("mb1", "fwd")]

    def span(pid, mb, ph):
        sel = [e for e in xs if e["pid"] == pid and e["tid"] == 1 and e["name"].startswith(f"{mb} {ph} ")]
        return min(e["ts"] for e in sel), max(e["ts"] + e["dur"] for e in sel)

    # a stage's forward waits for the previous stage's, a backward for the next stage's
    assert span(2, "mb0", "fwd")[0] >= span(1, "mb0", "fwd")[1]
    assert span(1, "mb0", "bwd")[0] >= span(2, "mb0", "bwd")[1]
    sends = [e for e in doc["traceEvents"] if e["ph"] == "X" and "send fwd -> stage 1" in e["name"]]
    assert len(sends) == m


def test_step_trace_spans_at_least_the_projected_busy_time():
    from c3kit.step.project import project
    from c3kit.step.trace import step_trace

    g = _pp_graph(pp=2, m=4)
    doc = step_trace(g, H200, policy=SerialOverlap(), cost_model="efficiency")
    end = max(e["ts"] + e["dur"] for e in doc["traceEvents"] if e["ph"] == "X") * 1e-6
    res = project(g, H200, policy=SerialOverlap(), cost_model="efficiency")
    # 1F1B with equal stages: (m + pp - 1) micro-batch times, as the projection's step time has it (within the
    # pipeline sends the trace draws explicitly)
    assert end == pytest.approx(res.totals.step_time, rel=0.05)


def test_step_trace_refuses_interleaved_pipelines():
    from c3kit.errors import C3kitError
    from c3kit.step.trace import step_trace

    g = build_step(get_model("Llama-3-8B"), Parallelism(tp=4, sp=True, pp=2, vpp=2, micro_batch=1, global_batch=4),
                   "train", 2048)
    with pytest.raises(C3kitError, match="1F1B"):
        step_trace(g, H200)
