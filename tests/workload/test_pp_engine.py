"""Pipeline engines (Parallelism.pp_engine): DeepSpeed's and Megatron-LM 2021's scatter/gather, hand-checked transfers,
meta sends and TP all-gathers."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c3kit.errors import WorkloadError
from c3kit.workload.graph import build_step
from c3kit.workload.model import get_model
from c3kit.workload.parallel import PP_ENGINE_SOURCES, PP_ENGINES, Parallelism

L70 = get_model("Llama-3-70B")
S = 4096 * 8192 * 2  # one micro-batch's activation (seq 4096, hidden 8192, bf16)


def nodes(g, prefix):
    return {n.name: n for n in g.nodes if n.name.startswith(prefix)}


def test_megatron_default_is_one_whole_exchange_per_phase():
    g = build_step(L70, Parallelism(tp=8, pp=4, global_batch=8), "train", seq=4096)
    assert set(nodes(g, "pp.")) == {"pp.fwd", "pp.bwd"}
    assert g.by_role("pp_fwd")[0].op.bytes == S and g.by_role("pp_fwd")[0].count == 8


def test_deepspeed_sends_slices_in_turn_with_meta_and_gathers():
    g = build_step(L70, Parallelism(tp=8, pp=4, global_batch=8, pp_engine="deepspeed"), "train", seq=4096)
    n = nodes(g, "pp.")
    assert set(n) == {"pp.fwd", "pp.fwd.meta", "pp.fwd.gather", "pp.fwd.gather_copies", "pp.bwd", "pp.bwd.meta",
                      "pp.bwd.gather", "pp.bwd.gather_copies"}
    f, b = n["pp.fwd"], n["pp.bwd"]
    assert f.op.kind == "send_recv" and f.op.bytes == S // 8 and f.count == 16 and f.op.span == "inter"
    assert b.op.bytes == S // 8 and b.count == 16 and b.phase == "bwd"
    assert n["pp.fwd.meta"].op.bytes == 8 * (1 + 3 + 2 + 8 + 1) == 120 and n["pp.fwd.meta"].count == 16
    fg, bg = n["pp.fwd.gather"], n["pp.bwd.gather"]
    assert fg.op.kind == "all_gather" and fg.op.bytes == S and fg.op.ranks == 8 and fg.op.span == "intra"
    assert fg.stream == "tp" and fg.scope == "micro" and fg.count == 8 and bg.count == 16
    c = n["pp.bwd.gather_copies"]  # zeros (a write), the list all_gather's copy-out and the clone (2 each)
    assert c.stream == "compute" and c.op.bytes == 5 * S and c.count == 16 and c.deps == (bg.id,)


def test_deepspeed_2020_sends_whole_gradients():
    g = build_step(L70, Parallelism(tp=8, pp=4, global_batch=8, pp_engine="deepspeed_2020"), "train", seq=4096)
    n = nodes(g, "pp.")
    assert set(n) == {"pp.fwd", "pp.fwd.meta", "pp.fwd.gather", "pp.fwd.gather_copies", "pp.bwd", "pp.bwd.gather",
                      "pp.bwd.gather_copies"}
    assert n["pp.bwd"].op.bytes == S and n["pp.bwd"].count == 16 and n["pp.bwd.gather"].count == 8


def test_without_tp_nothing_is_partitioned():
    g = build_step(L70, Parallelism(tp=1, pp=4, global_batch=8), "train", seq=4096)
    d = build_step(L70, Parallelism(tp=1, pp=4, global_batch=8, pp_engine="deepspeed"), "train", seq=4096)
    assert set(nodes(d, "pp.")) == {"pp.fwd", "pp.bwd"}
    assert d.by_role("pp_fwd")[0].op.bytes == g.by_role("pp_fwd")[0].op.bytes == S
    assert d.by_role("pp_fwd")[0].count == 2 * g.by_role("pp_fwd")[0].count


def test_bad_engine_and_layouts_are_refused():
    with pytest.raises(WorkloadError, match="pp_engine 'colossal'"):
        Parallelism(tp=8, pp=4, pp_engine="colossal")
    with pytest.raises(WorkloadError, match="vpp 1"):
        Parallelism(tp=8, pp=4, vpp=2, global_batch=8, pp_engine="deepspeed")
    with pytest.raises(WorkloadError, match="pp_p2p_overlap False"):
        Parallelism(tp=8, pp=4, global_batch=8, pp_engine="deepspeed", pp_p2p_overlap=True)


def test_every_engine_is_sourced():
    assert set(PP_ENGINE_SOURCES) == set(PP_ENGINES)
    assert all(PP_ENGINE_SOURCES[e].startswith("https://github.com/microsoft/DeepSpeed/blob/")
               for e in PP_ENGINES if e.startswith("deepspeed"))
    assert "46c74b4ca06a7794db1e2615544095535cdf12c2" in PP_ENGINE_SOURCES["megatron_2021"]


@settings(max_examples=15, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), m=st.integers(1, 6), eng=st.sampled_from(sorted(PP_ENGINES)))
def test_pipeline_bytes_per_micro_batch_never_exceed_two_whole_exchanges_per_phase(tp, m, eng):
    g = build_step(L70, Parallelism(tp=tp, pp=4, global_batch=m, pp_engine=eng), "train", seq=4096)
    for ph in ("fwd", "bwd"):
        sends = [n for n in g.nodes if n.role == f"pp_{ph}" and n.stream == "pp"]
        assert sum(n.op.bytes * n.count for n in sends) / m <= 2 * S + 2 * 120
        assert all(n.count % m == 0 for n in sends)


def test_megatron_2021_scatters_slices_and_gathers_them_without_sp():
    g = build_step(L70, Parallelism(tp=8, pp=4, vpp=2, global_batch=8, pp_engine="megatron_2021"), "train", seq=4096)
    n = nodes(g, "pp.")
    assert set(n) == {"pp.fwd", "pp.fwd.gather", "pp.fwd.gather_copies", "pp.bwd", "pp.bwd.gather",
                      "pp.bwd.gather_copies"}
    f = n["pp.fwd"]
    assert f.op.bytes == S // 8 and f.count == 16  # one exchange per micro-batch and virtual stage, not in turn
    assert n["pp.fwd.gather"].op.bytes == S and n["pp.fwd.gather"].count == 16
    assert n["pp.bwd.gather_copies"].op.bytes == 2 * S  # torch.empty, then the list all_gather's copy-out only


def test_megatron_2021_with_sp_sends_the_slice_as_it_is():
    a = build_step(L70, Parallelism(tp=8, sp=True, pp=4, global_batch=8, pp_engine="megatron_2021"), "train", seq=4096)
    b = build_step(L70, Parallelism(tp=8, sp=True, pp=4, global_batch=8), "train", seq=4096)
    assert set(nodes(a, "pp.")) == set(nodes(b, "pp.")) == {"pp.fwd", "pp.bwd"}
    assert a.by_role("pp_fwd")[0].op.bytes == b.by_role("pp_fwd")[0].op.bytes == S // 8


def test_deepspeed_engine_refuses_sequence_parallelism():
    with pytest.raises(WorkloadError, match="sequence parallelism"):
        Parallelism(tp=8, sp=True, pp=4, global_batch=8, pp_engine="deepspeed")
