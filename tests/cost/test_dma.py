"""c3kit.cost.dma: hand-checked variant times, invariants, and bad input."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from c3kit.cost.dma import (VARIANTS_FOR, DMAParams, all_variants, best_variant, dma_collective_time, selector,
                            single_copy_time)
from c3kit.errors import CostError
from c3kit.hw.catalog import get_gpu

# round numbers so every time below can be checked by hand (microseconds)
P = DMAParams(engines=14, bw_per_engine=1e9, launch=1e-6, sync=0.5e-6, cmd_overhead=0.1e-6, copy_latency=0.2e-6,
              trigger=0.3e-6, peer_bw=1e9, fabric_bw=1e12)
US = 1e-6


def test_single_copy_is_the_sum_of_its_terms():
    t = single_copy_time(1000, P)
    # launch 1 + overhead 0.1 + latency 0.2 + 1000 B / 1 GB/s = 1 + sync 0.5
    assert t.total == pytest.approx(2.8 * US)
    assert t.copy == pytest.approx(1.2 * US)
    assert t.non_copy_share == pytest.approx(1 - 1.2 / 2.8)


def test_pcpy_hand_checked():
    # 8 ranks, S = 8000 B -> 1000 B per peer; 7 commands issued 1 us apart, one engine each;
    # the last finishes at 7 + 0.1 + 0.2 + 1 = 8.3 us and its sync (0.5 < launch) ends at 8.8 us
    t = dma_collective_time("all_gather", 8000, 8, P, "pcpy")
    assert t.commands == 7 and t.syncs == 7
    assert t.total == pytest.approx(8.8 * US)


def test_b2b_prelaunch_hand_checked():
    # one engine: trigger 0.3, first command 0.1 + 1 + latency 0.2, six more 1.1 each, one sync 0.5
    t = dma_collective_time("all_gather", 8000, 8, P, "b2b", prelaunch=True)
    assert t.syncs == 1
    assert t.total == pytest.approx((0.3 + 1.3 + 6 * 1.1 + 0.5) * US)


def test_bcst_and_swap_halve_commands():
    assert dma_collective_time("all_gather", 8000, 8, P, "bcst").commands == 4
    assert dma_collective_time("all_to_all", 8000, 8, P, "swap").commands == 4
    # pcpy+PL: all 7 start at the trigger; 7 syncs serialized after 0.3 + 1.3 = 1.6 us
    assert dma_collective_time("all_to_all", 8000, 8, P, "pcpy", True).total == pytest.approx((1.6 + 7 * 0.5) * US)


def test_fewer_engines_than_peers_queue_commands():
    p3 = DMAParams.with_overrides(P, engines=3)
    assert dma_collective_time("all_gather", 8e6, 8, p3).total > dma_collective_time("all_gather", 8e6, 8, P).total


def test_from_gpu_and_overrides():
    gpu = get_gpu("H200-SXM")
    p = DMAParams.from_gpu(gpu, launch=5e-6)
    assert p.engines == gpu.dma.engines and p.launch == 5e-6 and p.sync == gpu.dma.sync
    with pytest.raises(CostError, match="unknown DMA parameter"):
        DMAParams.from_gpu(gpu, lunch=1.0)


def test_calibration_file(tmp_path):
    f = tmp_path / "h200-sxm-dma.json"
    f.write_text(json.dumps({"meta": {}, "kind": "dma", "columns": ["param", "value"],
                             "rows": [["launch", 2e-6], ["sync", 1e-6]]}))
    p = DMAParams.from_calibration(f, get_gpu("H200-SXM"))
    assert (p.launch, p.sync) == (2e-6, 1e-6)
    f.write_text(json.dumps({"kind": "gemm", "columns": ["param", "value"], "rows": []}))
    with pytest.raises(CostError, match="expected 'dma'"):
        DMAParams.from_calibration(f, get_gpu("H200-SXM"))


@pytest.mark.parametrize("kwargs, msg", [
    (dict(kind="all_reduce"), "do not reduce"), (dict(variant="swap"), "does not apply"),
    (dict(variant="zap"), "unknown DMA variant"), (dict(ranks=1), "at least 2"), (dict(nbytes=0), "positive"),
])
def test_bad_input(kwargs, msg):
    args = dict(kind="all_gather", nbytes=1e6, ranks=8, params=P, variant="pcpy") | kwargs
    with pytest.raises(CostError, match=msg):
        dma_collective_time(**args)


def test_bad_params():
    with pytest.raises(CostError):
        DMAParams.with_overrides(P, engines=0)
    with pytest.raises(CostError):
        DMAParams.with_overrides(P, sync=-1)


def test_selector_merges_ranges():
    sizes = [2.0**e for e in range(10, 31)]
    sel = selector("all_gather", sizes, 8, P)
    assert sel[0][0] == sizes[0] and sel[-1][1] == sizes[-1]
    assert all(a[2] != b[2] for a, b in zip(sel, sel[1:]))


params = st.builds(DMAParams, engines=st.integers(1, 16), bw_per_engine=st.floats(1e9, 2e11),
                   launch=st.floats(1e-7, 2e-5), sync=st.floats(0, 2e-5), cmd_overhead=st.floats(0, 5e-6),
                   copy_latency=st.floats(0, 5e-6), trigger=st.floats(0, 1e-6), peer_bw=st.floats(1e10, 1e12),
                   fabric_bw=st.floats(1e10, 1e13))
sizes = st.floats(1e3, 1e9)


@given(params, sizes, sizes)
def test_non_copy_share_falls_with_size(p, a, b):
    lo, hi = min(a, b), max(a, b)
    assert single_copy_time(hi, p).non_copy_share <= single_copy_time(lo, p).non_copy_share + 1e-12


@given(params, sizes, st.sampled_from(list(VARIANTS_FOR)), st.integers(2, 16))
def test_best_never_slower_than_pcpy_and_terms_bound_total(p, s, kind, n):
    best = best_variant(kind, s, n, p)
    assert best.total <= dma_collective_time(kind, s, n, p).total
    for t in all_variants(kind, s, n, p):
        assert t.copy <= t.total + 1e-15
        assert t.total <= t.schedule + t.copy + t.sync_time + 1e-12


@given(params, sizes, st.sampled_from(list(VARIANTS_FOR)))
def test_prelaunch_helps_when_trigger_is_cheaper_than_a_launch(p, s, kind):
    for v in VARIANTS_FOR[kind]:
        if p.trigger <= p.launch:
            assert (dma_collective_time(kind, s, 8, p, v, True).total
                    <= dma_collective_time(kind, s, 8, p, v, False).total + 1e-12)


def test_dest_overhead_charges_two_destination_commands():
    # bcst+PL, 8 ranks, 1000 B chunks: 4 commands (3 of 2000 B to two peers, 1 of 1000 B), one engine each;
    # a two-destination command starts at 0.3 and takes 0.1 + 0.4 (extra destination) + 2 + 0.2 latency -> 3.0 us
    p = DMAParams.with_overrides(P, dest_overhead=0.4e-6)
    t = dma_collective_time("all_gather", 8000, 8, p, "bcst", True)
    # completions: 1.6 (single) and 3.0 x 3; syncs: 1.6 -> 2.1, then 3.0 -> 3.5 -> 4.0 -> 4.5
    assert t.total == pytest.approx(4.5 * US)
    assert t.total > dma_collective_time("all_gather", 8000, 8, P, "bcst", True).total


def test_fit_from_measured_single_copies(tmp_path):
    gpu = get_gpu("H200-SXM")
    truth = DMAParams.with_overrides(DMAParams.from_gpu(gpu), bw_per_engine=80e9)
    rows = [[s, single_copy_time(s, truth).total] for s in (4096, 2**20, 2**24, 2**28)]
    f = tmp_path / "h200-sxm-dma.json"
    f.write_text(json.dumps({"meta": {}, "kind": "dma", "columns": ["bytes", "seconds"], "rows": rows}))
    p = DMAParams.from_calibration(f, gpu)
    assert p.bw_per_engine == pytest.approx(80e9, rel=1e-6)
    # the fixed cost is reproduced (split in the catalog's proportions)
    assert single_copy_time(2**20, p).total == pytest.approx(single_copy_time(2**20, truth).total, rel=1e-6)
    with pytest.raises(CostError, match="two or more sizes"):
        DMAParams.fit_single_copies([(1e6, 1e-5)], gpu)
