"""Collective algorithms: hand-checked formulas, validity, auto choice, nccl-tests busbw, properties."""

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from c3kit import cost
from c3kit.cost.collectives import algbw, busbw, busbw_factor, collective_estimate, collective_time, valid_algos
from c3kit.errors import CostError
from c3kit.hw import get_gpu
from c3kit.workload.ops import Collective

H200 = get_gpu("H200-SXM")
MI300X = get_gpu("MI300X")
# per-step latency and per-call base latency of the catalog (NCCL / RCCL tuning models, see the [sources])
A_NV, L_NV = H200.scaleup.latency, H200.scaleup.launch
A_MI, L_MI = MI300X.scaleup.latency, MI300X.scaleup.launch
T3 = get_gpu("T3-SIM")
S = 1e9


def ar(n, s=S, span="intra", kind="all_reduce", per_node=0):
    return Collective("c", kind, s, n, group="tp" if span == "intra" else "dp", span=span, per_node=per_node)


def test_ring_all_reduce_formula_h200():
    n, a, b = 8, A_NV, 450e9
    assert collective_time(ar(8), H200, "ring") == pytest.approx(L_NV + 2 * (n - 1) * a + 2 * (n - 1) / n * S / b)


def test_ring_all_gather_and_reduce_scatter():
    for kind in ("all_gather", "reduce_scatter"):
        assert collective_time(ar(8, kind=kind), H200, "ring") == pytest.approx(L_NV + 7 * A_NV + 7 / 8 * S / 450e9)


def test_tree_all_reduce_formula():
    assert collective_time(ar(8), H200, "tree") == pytest.approx(L_NV + 2 * 3 * A_NV + 2 * S / 450e9)


def test_direct_on_mesh_uses_all_links():
    # MI300X: 7 links of 64 GB/s; all-gather over all links in one step
    assert collective_time(ar(8, kind="all_gather"), MI300X, "direct") == pytest.approx(L_MI + A_MI + 7 / 8 * S / 448e9)
    # a 4-GPU group on the mesh reaches only 3 of the 7 links
    assert collective_time(ar(4, kind="all_gather"), MI300X, "direct") == pytest.approx(L_MI + A_MI + 3 / 4 * S / 192e9)


def test_direct_all_reduce_is_best_of_one_and_two_shot():
    small = ar(8, s=8e3)
    one = A_NV + 7 * 8e3 / 450e9
    two = 2 * A_NV + 2 * 7 / 8 * 8e3 / 450e9
    assert collective_time(small, H200, "direct") == pytest.approx(L_NV + min(one, two))


def test_direct_not_valid_on_a_ring_topology():
    assert "direct" not in valid_algos(ar(8), T3)
    with pytest.raises(CostError, match="auto"):
        collective_time(ar(8), T3, "direct")


def test_t3_ring_reduce_scatter():
    # both ring directions, 2 x 75 GB/s, 500 ns per link
    assert collective_time(ar(8, kind="reduce_scatter"), T3, "ring") == pytest.approx(7 * 500e-9 + 7 / 8 * S / 150e9)


def test_auto_is_the_fastest_valid():
    for gpu in (H200, MI300X, T3):
        for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"):
            for s in (1e3, 1e6, 1e9):
                c = ar(8, s=s, kind=kind)
                t, algo = collective_estimate(c, gpu)
                assert t == min(collective_time(c, gpu, a) for a in valid_algos(c, gpu))
                assert algo in valid_algos(c, gpu)


def test_hierarchical_all_reduce_formula():
    c = ar(16, span="inter", per_node=8)  # two nodes of 8
    g, nodes, a_in, a_out = 8, 2, A_NV, 5e-6
    rs = min(7 * a_in + 7 / 8 * S / 450e9, a_in + 7 / 8 * S / 450e9)
    inter = min(2 * (nodes - 1) * a_out + 2 * (nodes - 1) / nodes * (S / g) / 50e9,
                2 * 1 * a_out + 2 * (S / g) / 50e9)
    assert collective_time(c, H200, "hierarchical") == pytest.approx(L_NV + 2 * rs + inter)


def test_flat_inter_ring_limited_by_nics_of_the_node():
    c = ar(16, span="inter", per_node=8)
    assert collective_time(c, H200, "ring") == pytest.approx(L_NV + 2 * 15 * 5e-6 + 2 * 15 / 16 * S / min(450e9, 8 * 50e9))


def test_strided_inter_group_uses_one_nic():
    c = ar(4, span="inter")  # e.g. DP 4 with TP 8: one GPU of the group per node
    assert collective_time(c, H200, "ring") == pytest.approx(L_NV + 2 * 3 * 5e-6 + 2 * 3 / 4 * S / 50e9)
    assert "hierarchical" not in valid_algos(c, H200)
    # unknown placement is treated as strided (one GPU per node)
    assert collective_time(ar(16, span="inter"), H200, "ring") == pytest.approx(L_NV + 2 * 15 * 5e-6 + 2 * 15 / 16 * S / 50e9)


def test_per_node_must_fit_the_node():
    with pytest.raises(CostError):
        collective_time(ar(32, span="inter", per_node=16), H200)


def test_trivial_collectives_cost_nothing():
    assert collective_time(ar(1), H200) == 0.0
    assert collective_time(ar(8, s=0), H200) == 0.0


def test_intra_group_larger_than_node_is_an_error():
    with pytest.raises(CostError, match="inter"):
        collective_time(ar(16), H200)


def test_unknown_algorithm():
    with pytest.raises(CostError, match="ring"):
        collective_time(ar(8), H200, "butterfly")
    with pytest.raises(CostError):
        cost.CostModel(algo="butterfly")


def test_busbw_factors():
    assert busbw_factor("all_reduce", 8) == 2 * 7 / 8
    assert busbw_factor("all_gather", 8) == busbw_factor("reduce_scatter", 8) == busbw_factor("all_to_all", 8) == 7 / 8
    assert busbw_factor("send_recv", 2) == 1.0
    with pytest.raises(CostError):
        busbw_factor("broadcast", 8)


def test_ring_busbw_approaches_link_bandwidth():
    c = ar(8, s=1e12)
    t = collective_time(c, H200, "ring")
    assert algbw(c, t) == pytest.approx(1e12 / t)
    assert busbw(c, t) == pytest.approx(450e9, rel=1e-4)


def test_algbw_needs_positive_time():
    with pytest.raises(CostError):
        algbw(ar(8), 0.0)


def test_comm_eff_scales_bandwidth():
    m = cost.CostModel(algo="ring", comm_eff=0.5)
    n = 8
    assert cost.time(ar(8), H200, m) == pytest.approx(L_NV + 2 * (n - 1) * A_NV + 2 * (n - 1) / n * S / 225e9)


@given(st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]),
       st.sampled_from([2, 4, 8]), st.floats(1, 1e10), st.floats(1.01, 8), st.sampled_from(["H200-SXM", "MI300X", "T3-SIM"]))
def test_more_scaleup_bandwidth_never_slower(kind, n, s, f, name):
    gpu = get_gpu(name)
    fast = gpu.with_(scaleup=dataclasses.replace(gpu.scaleup, bw=gpu.scaleup.bw * f))
    c = ar(n, s=s, kind=kind)
    t0, t1 = collective_time(c, gpu), collective_time(c, fast)
    assert 0 < t1 <= t0


@given(st.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"]),
       st.sampled_from([2, 4, 16, 32, 64]), st.floats(1, 1e10), st.floats(1.01, 8), st.sampled_from([0, 1, 2, 8]))
def test_more_nic_bandwidth_never_slower_across_nodes(kind, n, s, f, g):
    c = ar(n, s=s, span="inter", kind=kind, per_node=g if g and n % g == 0 and n > g else 0)
    t0 = collective_time(c, H200)
    t1 = collective_time(c, H200.with_(scaleout_bw=H200.scaleout_bw * f))
    assert 0 < t1 <= t0 and math.isfinite(t0)


@given(st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]), st.floats(1e3, 1e10))
def test_busbw_never_exceeds_the_fabric(kind, s):
    c = ar(8, s=s, kind=kind)
    t = collective_time(c, H200, "ring")
    assert busbw(c, t) <= 450e9 * (1 + 1e-9)


def test_small_collectives_pay_the_library_base_latency_once():
    # NCCL's tuning model: 6.6 us per call + 0.6 us per ring LL step on NVLink; ring all-reduce on 8
    # H200 at 1 KB ~ 15 us (measured NCCL, CUDA graph, 2-16 KiB: 16.8-17.2 us, sglang PR #22734)
    assert L_NV == pytest.approx(6.6e-6) and A_NV == pytest.approx(0.6e-6)
    assert collective_time(ar(8, s=1024), H200, "ring") == pytest.approx(15e-6, rel=0.01)
    # RCCL: 12 us per call + 0.8 us per step; all-to-all (direct, one step) on 8 MI300X at 1 KB
    assert collective_time(ar(8, s=1024, kind="all_to_all"), MI300X, "direct") == pytest.approx(12.8e-6, rel=0.01)
    # the base latency is the same for every algorithm, so it never changes the auto choice
    zero = H200.with_(scaleup=dataclasses.replace(H200.scaleup, launch=0.0))
    for kind in ("all_reduce", "all_gather", "all_to_all"):
        t, algo = collective_estimate(ar(8, s=1024, kind=kind), H200)
        t0, algo0 = collective_estimate(ar(8, s=1024, kind=kind), zero)
        assert algo == algo0 and t == pytest.approx(t0 + L_NV)


# --- measured collective tables (cost/data/collectives/<gpu>.csv) ---------------------------------------

def test_measured_time_hits_the_published_points():
    from c3kit.cost.collectives import measured_time

    # XLA sm_90 table: all-gather of S = 8 MiB at 134432820512 B/s, reduce-scatter of 16 MiB at 204560280920 B/s
    assert measured_time("all_gather", 8, 8 * 2**20, "H100-SXM") == pytest.approx(8 * 2**20 / 134432820512, rel=1e-6)
    assert measured_time("reduce_scatter", 8, 16 * 2**20, "H100") == pytest.approx(16 * 2**20 / 204560280920, rel=1e-6)


def test_measured_time_interpolates_between_points_and_floors_below():
    from c3kit.cost.collectives import measured_time

    lo, hi = measured_time("all_gather", 8, 8 * 2**20, "H100-SXM"), measured_time("all_gather", 8, 16 * 2**20, "H100-SXM")
    mid = measured_time("all_gather", 8, 12 * 2**20, "H100-SXM")
    assert lo < mid < hi
    assert measured_time("all_gather", 8, 1024, "H100-SXM") == measured_time("all_gather", 8, 2**20, "H100-SXM")
    top = measured_time("all_gather", 8, 2**31, "H100-SXM")
    assert measured_time("all_gather", 8, 2**32, "H100-SXM") == pytest.approx(2 * top)


def test_measured_time_none_where_nothing_was_measured():
    from c3kit.cost.collectives import measured_time

    assert measured_time("all_gather", 4, 2**24, "H100-SXM") is None  # only 8-rank groups were measured
    assert measured_time("all_to_all", 8, 2**24, "H100-SXM") is None
    assert measured_time("all_gather", 8, 2**24, "MI300X") is None
    assert measured_time("all_gather", 8, 0, "H100-SXM") is None


def test_scaleup_efficiency_scales_the_fabric_and_eff_the_nics():
    h200 = get_gpu("H200-SXM")
    s = float(1 << 30)
    ar = Collective("ar", "all_reduce", s, 8, span="intra")
    # two-shot direct: launch 6.6 us + 2 x 0.6 us + 2 x 7/8 S / (450 GB/s x su_eff); eff plays no part inside a node
    assert collective_time(ar, h200, "direct", 0.3, 0.5) == pytest.approx(7.8e-6 + 1.75 * s / (450e9 * 0.5), rel=1e-12)
    assert collective_estimate(ar, h200, "auto", 0.8, None) == collective_estimate(ar, h200, "auto", 0.8, 0.8)
    p2p = Collective("p", "send_recv", s, 2, span="inter")  # the NIC alone: su_eff plays no part
    assert collective_time(p2p, h200, "ring", 0.5, 0.9) == pytest.approx(6.6e-6 + 5e-6 + s / (50e9 * 0.5), rel=1e-12)
    with pytest.raises(CostError, match="must be positive"):
        collective_estimate(ar, h200, "auto", 0.8, 0.0)


@given(su=st.floats(0.1, 1.0), eff=st.floats(0.1, 1.0), kb=st.integers(1, 1 << 20))
def test_a_faster_fabric_is_never_slower(su, eff, kb):
    h = get_gpu("H100-SXM")
    for span, ranks in (("intra", 8), ("inter", 16)):
        c = Collective("c", "all_gather", kb * 1024.0, ranks, span=span, per_node=8 if span == "inter" else 0)
        assert collective_time(c, h, "auto", eff, min(1.0, su * 1.5)) <= collective_time(c, h, "auto", eff, su) * (1 + 1e-12)
