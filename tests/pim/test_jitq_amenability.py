"""JIT-Q ledger and throughput; Inclusive-PIM amenability test and primitive models."""

import pytest

from c3kit.errors import PimError
from c3kit.pim import amenability as am
from c3kit.pim import jitq
from c3kit.pim.model import get_pim

HBM = get_pim("hbm-pim")


def test_ledger_hand_checked():
    lg = jitq.ledger(params_per_layer=100.0, layers=10, hidden=8, tokens=4, fmt="mx9", optimizer="adam",
                     gradients="fp32", recompute="full")
    assert (lg.master, lg.grads, lg.optimizer_state) == (4000.0, 4000.0, 8000.0)
    assert lg.copies == 2 * 1000 * 1.125
    assert lg.jit_buffer == 2 * 100 * 1.125
    assert lg.activations == 4 * 8 * 10 * 2.0
    assert lg.saved == pytest.approx((2250 - 225) / (16000 + 2250 + 640))


def test_ledger_bad_options():
    with pytest.raises(PimError):
        jitq.ledger(1, 1, 1, 1, optimizer="lion")
    with pytest.raises(PimError):
        jitq.ledger(0, 1, 1, 1)


def test_throughput_hidden_vs_falling_behind():
    s = jitq.TrainSetup(gpu_flops=500e12, gpu_bw=4.8e12, pim_boost=4.0, pim_row_efficiency=0.8)
    p = 12 * 4096 ** 2
    # PIM quantise time = P (4 B x 4 commands + 1.125 B) / (4.8e12 x 4 x 0.8).
    assert jitq.pim_quantize_time(p, jitq.get_format("mx9"), s) == pytest.approx(p * 17.125 / (4.8e12 * 3.2))
    big = jitq.throughput(p, 32, 4096, 8192, 2048, "mx9", s)
    small = jitq.throughput(p, 32, 4096, 64, 2048, "mx9", s)
    assert big["keeps_up"] and not small["keeps_up"]
    assert 0 < big["loss_vs_free_copies"] < 0.01 < small["loss_vs_free_copies"]


def test_amenability_verdicts():
    good = am.Traits("stream", 1e9, 1e9, 1e8, "streaming", 1.0, ("mac",), 64)
    v = am.test(good, HBM)
    assert v.amenable and v.failing == ()
    bad = am.Traits("gather", 1e9, 1e8, 1e12, "irregular", 0.2, ("exp",), 2)
    v = am.test(bad, HBM)
    assert not v.amenable
    assert set(v.failing) == {"bandwidth_bound", "low_cache_reuse", "broadcast_parallel", "bank_local",
                              "simple_alu", "row_locality"}
    with pytest.raises(PimError):
        am.Traits("x", 1, 1, 1, "random", 1.0, (), 1)


def test_primitive_models_and_optimizations():
    t = am.speedup_table(HBM)
    assert len(t) == 6 * 8
    base = t[~t.arch & ~t.sparsity & ~t.cache].set_index("primitive")
    full = t[t.arch & t.sparsity & t.cache].set_index("primitive")
    assert (full.speedup >= base.speedup * (1 - 1e-9)).all()
    assert base.loc["graph_push", "speedup"] < 1 and base.loc["spmm", "speedup"] < 1
    assert base.loc["reduction", "speedup"] <= HBM.row_roofline * 1.01
    assert full.speedup.max() <= HBM.bandwidth_boost * 1.01
    s = am.summary(t).set_index("metric")
    assert s.loc["optimized_avg_speedup", "ours"] > s.loc["baseline_avg_speedup", "ours"]
    with pytest.raises(PimError):
        am.evaluate(HBM, "fft")


def test_mapping_cost_hand_checked():
    mp = am.Mapping(items=128 * 10, cmds_per_item=2, opens_per_item=0.5, host_bytes=307.2e9 * 1e-6)
    r = am.pim_time(HBM, mp)
    assert r["t_stream"] == pytest.approx(10 * 2 * 3.333e-9)
    assert r["t_open"] == pytest.approx(5 * 28e-9)
    assert r["t_host"] == pytest.approx(1e-6)
    serial = am.pim_time(HBM, am.Mapping(128 * 10, 2, 0.5, 0.0, broadcast=False))
    assert serial["t_stream"] == pytest.approx(8 * r["t_stream"])
