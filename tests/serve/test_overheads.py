"""Engine terms of an iteration: capture sizes and padding, eager dispatch floor, host time; exact by hand."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.cost.opclass import op_calibration
from c3kit.errors import C3kitError
from c3kit.hw.catalog import get_gpu
from c3kit.serve.overheads import ENGINES, V0_CAPTURE_SIZES, EngineOverheads, eager_launch_s, get_engine
from c3kit.serve.pricing import StepPricer
from c3kit.workload.model import ModelConfig, get_model

HW = get_gpu("H200-SXM")
TINY = ModelConfig(name="tiny", hidden=256, layers=4, heads=4, kv_heads=2, ffn_hidden=512, vocab=1000,
                   gated_mlp=True, norm="rmsnorm", position="rope", max_seq=4096)


def test_v0_capture_sizes_and_graph_batches():
    v0 = ENGINES["vllm-v0"]
    assert V0_CAPTURE_SIZES[:5] == (1, 2, 4, 8, 16) and V0_CAPTURE_SIZES[-1] == 256 and len(V0_CAPTURE_SIZES) == 35
    assert [v0.graph_batch(0, d) for d in (1, 3, 5, 8, 9, 255, 256)] == [1, 4, 8, 8, 16, 256, 256]
    assert v0.graph_batch(0, 257) is None and v0.graph_batch(1, 4) is None and v0.graph_batch(0, 0) is None
    assert ENGINES["loop"].graph_batch(0, 77) == 77 and ENGINES["loop-eager"].graph_batch(0, 77) is None
    assert ENGINES["none"].graph_batch(0, 8) is None and not ENGINES["none"].active


def test_v0_host_time_is_the_published_gap_at_256_sequences():
    assert ENGINES["vllm-v0"].host_time(256) == pytest.approx(5.5e-3, rel=1e-12)
    assert ENGINES["vllm-v0"].host_time(8) == pytest.approx(5.5e-3 * 8 / 256, rel=1e-12)


def test_eager_launch_is_the_measured_h200_floor():
    s = eager_launch_s(HW)
    assert s == op_calibration("H200-SXM").floor_eager_s
    assert 1e-6 < s < 50e-6


def test_bad_engines():
    with pytest.raises(C3kitError, match="unknown engine"):
        get_engine("tgi")
    with pytest.raises(C3kitError):
        EngineOverheads("x", host_per_seq_s=-1.0)
    with pytest.raises(C3kitError):
        EngineOverheads("x", capture_sizes=(8, 4))


@pytest.fixture(scope="module")
def v0():
    return StepPricer(get_model("Llama-3-8B"), HW, cost_model="roofline", engine="vllm-v0")


@pytest.fixture(scope="module")
def bare():
    return StepPricer(get_model("Llama-3-8B"), HW, cost_model="roofline")


def test_padded_decode_batch_by_hand(v0, bare):
    b = v0.breakdown([], 5, 5 * 700)
    pad = bare.dense_time(8) + bare.head_time(8) - bare.dense_time(5) - bare.head_time(5)
    assert b.graph_pad == pytest.approx(pad, rel=1e-12) and b.graph_pad > 0
    assert b.eager_wait == 0.0
    assert b.host == pytest.approx(5 * 5.5e-3 / 256, rel=1e-12)
    assert b.total == pytest.approx(bare([], 5, 3500) + pad + b.host, rel=1e-12)


def test_none_engine_prices_kernels_alone(bare):
    b = bare.breakdown([(300, 0)], 4, 4000)
    assert (b.graph_pad, b.eager_wait, b.host) == (0.0, 0.0, 0.0)
    assert b.total == pytest.approx(b.dense + b.attn_prefill + b.attn_decode + b.lm_head, rel=1e-12)


def test_eager_floor_binds_on_a_tiny_model():
    p = StepPricer(TINY, HW, cost_model="roofline", engine="loop-eager")
    b = p.breakdown([(16, 0)], 0, 0)
    floor = p.kernels * eager_launch_s(HW)
    kernels_s = b.dense + b.attn_prefill + b.lm_head
    assert floor > kernels_s  # a tiny model is host-bound when eager
    assert b.eager_wait == pytest.approx(floor - kernels_s, rel=1e-9)
    assert b.total == pytest.approx(floor, rel=1e-9)
    g = StepPricer(TINY, HW, cost_model="roofline", engine="loop").breakdown([], 4, 400)
    assert g.eager_wait == 0.0 and g.graph_pad == 0.0  # decode replays a graph of its exact batch


@settings(max_examples=30, deadline=None)
@given(chunks=st.lists(st.tuples(st.integers(1, 300), st.integers(0, 2000)), max_size=3),
       decode=st.integers(0, 300), kv=st.integers(1, 3000))
def test_call_equals_breakdown_total_and_never_undercuts_the_kernels(v0, bare, chunks, decode, kv):
    if not chunks and decode == 0:
        decode = 1
    t = v0(chunks, decode, decode * kv)
    assert t == pytest.approx(v0.breakdown(chunks, decode, decode * kv).total, rel=1e-9)
    assert t >= bare(chunks, decode, decode * kv) * (1 - 1e-12)
