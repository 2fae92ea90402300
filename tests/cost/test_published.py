"""Published op-level microbenchmarks (cost/published.py): every row has a source, the GEMM curve reproduces the
published points it is levelled to, attention interpolates the published rates, labels say so."""

import math
import tomllib

import pytest
from hypothesis import given, settings, strategies as st

from c3kit import cost
from c3kit.cost import published as pub
from c3kit.cost.basis import basis
from c3kit.cost.default_curve import bf16_curve_for, default_curve_for
from c3kit.errors import CostError
from c3kit.hw import get_gpu
from c3kit.workload.ops import Attention, Gemm, MemOp

GPUS = ("A100-SXM-80G", "B200", "MI300X", "MI325X", "MI355X")
EFF = cost.CostModel(kind="efficiency")


def test_every_gpu_file_parses_and_every_row_names_its_source():
    files = sorted(f.name for f in pub.published_dir().iterdir() if f.name.endswith(".toml"))
    assert files == ["a100-sxm-80g.toml", "b200.toml", "h100-sxm.toml", "mi300x.toml", "mi325x.toml", "mi355x.toml"]
    for g in (*GPUS, "H100-SXM"):
        ops = pub.published_ops(g)
        assert ops is not None and ops.gpu == g
        gpu = get_gpu(g)
        for p in ops.gemm:
            # a repository file at a commit, or a web address, and never an end-to-end figure
            assert ("@" in p.source and len(p.source.split("@")[1].split()[0]) >= 7) or "https://" in p.source
            assert p.tflops * 1e12 < gpu.peak_flops(p.dtype)  # below the datasheet's dense peak
        for a in ops.attention:
            assert "@" in a.source and a.tflops * 1e12 < gpu.peak_flops("bf16")
        for m in ops.memory:
            assert "@" in m.source and m.gbps * 1e9 < gpu.hbm_bw
        for c in ops.collective:
            # below the link bandwidth; NVLS (in-switch reduction, H100's rows) below 2 (n-1)/n of it
            bound = 2 * (c.ranks - 1) / c.ranks if g == "H100-SXM" else 1.0
            assert "@" in c.source and c.busbw_gbps * 1e9 < bound * gpu.scaleup.bw
        for s in ops.sustained:
            assert ("@" in s.source and len(s.source.split("@")[1].split()[0]) >= 7) or "https://" in s.source
            assert s.tflops * 1e12 < gpu.peak_flops(s.rate_of)
        assert ops.retrieved >= "2026-12-03"


@pytest.mark.parametrize("name", GPUS)
def test_the_levelled_curve_reproduces_each_published_fit_point(name):
    gpu = get_gpu(name)
    curve, origin = default_curve_for(gpu)
    assert origin.startswith(f"published:{pub.published_ops(name).origin}+shape:")
    for p in pub.published_ops(name).fit_gemm():
        assert curve.gemm_time(p.m, p.n, p.k, p.dtype, gpu) == pytest.approx(p.seconds, rel=1e-3)


def test_only_the_level_moves_and_check_rows_set_nothing():
    h200 = bf16_curve_for(get_gpu("H200-SXM"))[0]
    a100 = get_gpu("A100-SXM-80G")
    curve = bf16_curve_for(a100)[0]
    assert curve.with_(peak_frac=dict(h200.peak_frac)) == h200  # tiles, K saturation, ... are the H200's
    ops = pub.published_ops("A100-SXM-80G")
    assert any(p.role == "check" for p in ops.gemm)
    assert pub.level_curve(h200, a100, ops.fit_gemm()) == curve
    # hand-check of the level: the one fit row is 271.2 TFLOP/s at 1024 x 10240 x 5120
    (p,) = ops.fit_gemm()
    assert 2 * 1024 * 10240 * 5120 / curve.gemm_time(1024, 10240, 5120, "bf16", a100) == pytest.approx(271.2e12, rel=1e-3)


def test_dtypes_without_a_published_row_keep_the_assumed_fraction():
    h200 = bf16_curve_for(get_gpu("H200-SXM"))[0]
    assert bf16_curve_for(get_gpu("MI325X"))[0].frac("fp8") == h200.frac("fp8")
    b200 = bf16_curve_for(get_gpu("B200"))[0]
    assert b200.frac("fp8") != h200.frac("fp8") and b200.frac("bf16") != h200.frac("bf16")


def test_a_projection_keeps_its_base_level_and_scales_its_peaks():
    base, proj = default_curve_for(get_gpu("B200"))[0], default_curve_for(get_gpu("B200+1g(historical)"))[0]
    assert dict(proj.peak_frac) == dict(base.peak_frac)
    assert basis("B200+1g(historical)")["gemm"] == "published microbenchmark, projected to B200+1g(historical)"


def test_basis_labels_per_gpu_and_class():
    assert basis("B200")["gemm"] == basis("B200")["gemm_fp8"] == "published microbenchmark"
    assert basis("B200")["attention"] == "published microbenchmark"  # cuDNN frontend's SDPA benchmark
    assert basis("B200")["memory"] == basis("B200")["fp8_cast"] == "published microbenchmark"  # CCCL nvbench rows
    assert basis("B200")["collective"] == basis("B200")["floor"] == "datasheet"  # all-reduce rows are checks
    for g in ("MI325X", "MI355X"):
        b = basis(g)
        assert b["gemm"] == "published microbenchmark" and b["gemm_fp8"] == b["attention"] == b["memory"] == "datasheet"
    mi = basis("MI300X")
    assert mi["gemm"] == mi["gemm_fp8"] == mi["memory"] == mi["fp8_cast"] == "published microbenchmark"
    assert mi["collective"] == "published microbenchmark"  # rccl-tests all-reduce rows of 1 GiB and more
    assert mi["attention"] == mi["floor"] == "datasheet"
    assert basis("H200-SXM")["gemm"] == "measured" and basis("H100-SXM")["gemm"] == "transferred from H200-SXM"
    est = cost.explain(Gemm("g", 4096, 4096, 4096, "bf16"), get_gpu("B200"), EFF)
    assert est.detail["curve"].startswith("published:b200.toml")


def test_attention_fraction_hand_checked():
    peak = get_gpu("A100-SXM-80G").peak_flops("bf16")
    f = lambda hd, causal, seq: pub.attention_fraction("A100-SXM-80G", peak, "flash2", hd, causal, seq)  # noqa: E731
    assert f(128, True, 4096) == pytest.approx(173e12 / peak)
    assert f(128, True, math.sqrt(2048 * 4096)) == pytest.approx((155 + 173) / 2 * 1e12 / peak)  # log-linear
    assert f(128, True, 128) == pytest.approx(99e12 / peak) and f(128, True, 1 << 20) == pytest.approx(189e12 / peak)
    assert f(96, True, 4096) == f(128, True, 4096)  # nearest head dim, ties to the larger
    assert f(80, False, 4096) == pytest.approx(171e12 / peak)  # head dim 64, not causal
    assert pub.attention_fraction("A100-SXM-80G", peak, "cudnn", 128, True, 4096) is None
    assert pub.attention_fraction("B200", peak, "efficient", 128, True, 4096) is None


def test_b200_attention_rows_hand_checked():
    # cuDNN frontend's B200 CSV, 8192 tokens, 128 q / 8 kv heads, head dim 128, causal: forward 1.837 ms,
    # backward 5.849 ms; c3kit's FLOPs: forward 4 s^2 d h / 2, backward 2.5x: 3.5 x 2.199e12 / 7.686 ms
    ops = pub.published_ops("B200")
    for a in ops.attention:  # every row's rate is the one its two published times imply
        fwd = 4 * a.seq ** 2 * a.head_dim * a.heads / (2 if a.causal else 1)
        row = tomllib.loads((pub.published_dir() / "b200.toml").read_text())["attention"][ops.attention.index(a)]
        assert a.tflops == pytest.approx(3.5 * fwd / ((row["forward_ms"] + row["backward_ms"]) * 1e-3) / 1e12, abs=0.05)
        assert a.role == ("fit" if a.seq >= 8192 else "check")
    peak = get_gpu("B200").peak_flops("bf16")
    cudnn = lambda seq: pub.attention_fraction("B200", peak, "cudnn", 128, True, seq)  # noqa: E731
    assert cudnn(8192) == pytest.approx(1001.4e12 / peak) and 1001.4 == pytest.approx(
        3.5 * 2 * 8192 ** 2 * 128 * 128 / 7.686e-3 / 1e12, abs=0.05)
    assert cudnn(4096) == cudnn(512) == cudnn(8192)  # held at the shortest fit row below it
    assert cudnn(16384) == pytest.approx(1139.6e12 / peak)
    assert pub.attention_fraction("B200", peak, "flash2", 128, True, 8192) == pytest.approx(325.2e12 / peak)
    op = Attention("a", 2, 32, 8, 8192, 8192, 128, causal=True, backward=True, backend="cudnn")
    assert cost.time(op, get_gpu("B200"), EFF) == pytest.approx(op.flops / 1001.4e12, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(hd=st.sampled_from([64, 128]), causal=st.booleans(), a=st.integers(6, 17), b=st.integers(6, 17))
def test_attention_fraction_stays_within_the_published_rows_and_grows_with_length(hd, causal, a, b):
    peak = get_gpu("A100-SXM-80G").peak_flops("bf16")
    rows = [r.tflops for r in pub.published_ops("A100-SXM-80G").attention if r.head_dim == hd and r.causal == causal]
    lo, hi = sorted((2 ** a, 2 ** b))
    f_lo = pub.attention_fraction("A100-SXM-80G", peak, "flash2", hd, causal, lo)
    f_hi = pub.attention_fraction("A100-SXM-80G", peak, "flash2", hd, causal, hi)
    assert min(rows) * 1e12 / peak - 1e-12 <= f_lo <= f_hi <= max(rows) * 1e12 / peak + 1e-12


def test_attention_pricing_uses_the_published_rate_only_off_roofline():
    hw = get_gpu("A100-SXM-80G")
    op = Attention("a", 2, 16, 16, 8192, 8192, 128, causal=False, backward=True, backend="flash2")
    assert cost.time(op, hw, EFF) == pytest.approx(op.flops / 201e12, rel=1e-12)
    assert cost.time(op, hw, "roofline") == pytest.approx(op.flops / hw.peak_flops("bf16"), rel=1e-12)
    est = cost.explain(op, hw, EFF)
    assert est.detail["basis"] == "published microbenchmark" and est.detail["attn_eff"] == pytest.approx(201e12 / 312e12)


@pytest.mark.parametrize("row, msg", [
    ({"dtype": "bf16", "m": 1, "n": 1, "k": 1, "tflops": 1.0, "role": "fit"}, "lacks source"),
    ({"dtype": "bf16", "m": 1, "n": 1, "k": 1, "tflops": 1.0, "role": "tuned", "source": "x"}, "role 'tuned'"),
    ({"dtype": "bf16", "m": 1, "n": 1, "k": 1, "tflops": -3.0, "role": "fit", "source": "x"}, "positive"),
    ({"dtype": "bf16", "m": 1, "n": 1, "k": 1, "tflops": 3.0, "role": "fit", "source": " "}, "needs its source"),
])
def test_bad_rows_are_refused_with_what_is_wrong(row, msg):
    with pytest.raises(CostError, match=msg):
        pub.parse({"gpu": "X", "gemm": [row]}, "x.toml")


def test_bad_documents_are_refused():
    with pytest.raises(CostError, match="needs gpu"):
        pub.parse({"gemm": []}, "x.toml")
    with pytest.raises(CostError, match="needs retrieved"):
        pub.parse({"gpu": "X", "gemm": []}, "x.toml")
    with pytest.raises(CostError, match="needs retrieved"):
        pub.parse({"gpu": "X", "retrieved": "yesterday"}, "x.toml")
    assert pub.parse({"gpu": "X", "retrieved": "2026-12-04"}, "x.toml").retrieved == "2026-12-04"
    row = {"kernel": "Copy", "gbps": 1.0, "source": "s", "role": "fit", "retrieved": "2026-12-05"}
    ops = pub.parse({"gpu": "X", "retrieved": "2026-12-04", "memory": [row]}, "x.toml")
    assert ops.memory[0].retrieved == "2026-12-05" and ops.sources("memory") == ("s, retrieved 2026-12-05",)
    with pytest.raises(CostError, match="memory row 1: needs retrieved"):
        pub.parse({"gpu": "X", "retrieved": "2026-12-04", "memory": [{**row, "retrieved": "soon"}]}, "x.toml")
    att = tomllib.loads('[[attention]]\nkernel="k"\nbackends=["flash2"]\ndirection="fwd"\ncausal=true\n'
                        'head_dim=64\nseq=512\ntflops=1.0\nsource="s"\nrole="fit"\n')
    with pytest.raises(CostError, match="only direction 'fwd\\+bwd'"):
        pub.parse({"gpu": "X", **att}, "x.toml")
    h200 = bf16_curve_for(get_gpu("H200-SXM"))[0]
    too_fast = pub.GemmPoint("bf16", 8192, 8192, 8192, 5000.0, "s", "fit")
    with pytest.raises(CostError, match="imply peak fractions"):
        pub.level_curve(h200, get_gpu("A100-SXM-80G"), [too_fast])


def test_memory_fraction_hand_checked_and_used_off_roofline():
    # A100 rows (GB/s): 1610 1610 1700 1700 (Azure) and 1709.4 1676.2 1715.8 1724.8 (Tursa): median 1700
    a100 = get_gpu("A100-SXM-80G")
    assert pub.memory_fraction("A100-SXM-80G") == pytest.approx(1700e9 / 2.039e12)
    # MI300X: 4110 4260 4140 4090: median 4125 of 5.3 TB/s
    assert pub.memory_fraction("MI300X") == pytest.approx(4125e9 / 5.3e12)
    # B200 (CCCL nvbench, 2^28 elements, GB/s): relu F16 6553, relu F32 6705, add F16 6721: median 6705 of 8 TB/s
    assert pub.memory_fraction("B200") == pytest.approx(6705e9 / 8.0e12) == pytest.approx(0.838125)
    assert pub.memory_fraction("MI325X") is None
    op = MemOp("n", bytes=1.7e9)
    assert cost.time(op, a100, EFF) == pytest.approx(1e-3)
    assert cost.time(op, a100, "roofline") == pytest.approx(1.7e9 / 2.039e12)
    assert cost.explain(op, a100, EFF).detail["mem_eff"] == pytest.approx(1700e9 / 2.039e12)
    mi325 = get_gpu("MI325X")
    assert cost.time(op, mi325, EFF) == pytest.approx(1.7e9 / (mi325.hbm_bw * EFF.mem_eff))  # datasheet stays
    b200 = get_gpu("B200")
    assert cost.time(op, b200, EFF) == pytest.approx(1.7e9 / (8.0e12 * 0.838125))
    assert pub.memory_fraction("A100-SXM-80G+1g(historical)") == pub.memory_fraction("A100-SXM-80G")


def _scaleup_by_hand(rows, bw):
    """The median of (model at efficiency 1 / published) over 8-rank all-reduce rows on a switch of bw B/s:
    two-shot direct, 6.6 us launch + 2 x 0.6 us + 2 x 7/8 S / bw, against 2 x 7/8 S / busbw."""
    r = sorted((6.6e-6 + 1.2e-6 + 1.75 * s / bw) / (1.75 * s / (b * 1e9)) for s, b in rows)
    return 0.5 * (r[1] + r[2])


def test_collective_fit_rows_set_the_scaleup_efficiency_hand_checked():
    ops = pub.published_ops("A100-SXM-80G")
    fit = [(c.nbytes, c.busbw_gbps) for c in ops.collective if c.role == "fit"]
    assert fit == [(1 << 30, 228.1), (1 << 31, 230.22), (1 << 32, 230.48), (1 << 33, 231.58)]  # nccl-tests, Azure
    assert all(c.role == "check" for c in ops.collective if c.nbytes < 1 << 30)
    assert "collective" in pub.published_classes("A100-SXM-80G")
    frac = pub.scaleup_fraction("A100-SXM-80G")
    assert frac == pytest.approx(_scaleup_by_hand(fit, 300e9), rel=1e-9) and frac == pytest.approx(0.7682, abs=1e-4)
    # MI300X: a mesh, 7 links of 64 GB/s, each rank reaches every peer directly
    mi = [(c.nbytes, c.busbw_gbps) for c in pub.published_ops("MI300X").collective if c.role == "fit"]
    assert len(mi) == 4 and 0.6 < pub.scaleup_fraction("MI300X") < 0.75
    assert pub.scaleup_fraction("B200") is None and pub.scaleup_fraction("H100-SXM") is None
    row = {"kind": "send_recv", "ranks": 2, "bytes": 1 << 30, "busbw_gbps": 230.0, "source": "s", "role": "fit"}
    with pytest.raises(CostError, match="only all_reduce, all_to_all, all_gather, reduce_scatter rows set a scale-up"):
        pub.parse({"gpu": "X", "collective": [row]}, "x.toml")
    with pytest.raises(CostError, match="gbps must be positive"):
        pub.parse({"gpu": "X", "memory": [{"kernel": "Copy", "gbps": 0, "source": "s", "role": "fit"}]}, "x.toml")


def test_h100_nvls_rows_are_checks_and_would_not_fit_the_model():
    # NVLS reduces in the switch: 478.87 GB/s bus bandwidth at 8 GiB, above what ring / tree / direct reach on
    # 450 GB/s links, so the rows set nothing and H100 collectives stay on the datasheet basis
    ops = pub.published_ops("H100-SXM")
    ar = [c for c in ops.collective if c.kind == "all_reduce"]
    assert len(ar) == 14 and all(c.role == "check" for c in ar)
    # attention: FlashAttention (v1)'s rows price flash1 only (the class itself stays transferred)
    assert ops.classes() == frozenset({"collective_a2a", "collective_ag", "collective_rs", "attention"})
    top = max(ar, key=lambda c: c.nbytes)
    assert top.busbw_gbps * 1e9 > get_gpu("H100-SXM").scaleup.bw
    assert basis("H100-SXM")["collective"] == "datasheet" and basis("H100-SXM")["gemm"] == "transferred from H200-SXM"


def _direct_by_hand(rows, bw):
    """The median of (model at efficiency 1 / published) over 8-rank all-to-all, all-gather or reduce-scatter rows
    on a switch of bw B/s: direct, 6.6 us launch + 0.6 us + 7/8 S / bw, against 7/8 S / busbw."""
    r = sorted((6.6e-6 + 0.6e-6 + 0.875 * s / bw) / (0.875 * s / (b * 1e9)) for s, b in rows)
    mid = len(r) // 2
    return r[mid] if len(r) % 2 else 0.5 * (r[mid - 1] + r[mid])


@pytest.mark.parametrize("kind, top, second, at_128m, xla_128m, level", [
    # XLA's sm_90 table: one NCCL collective of 8 H100s, S = 16 MiB .. 2 GiB; busbw = algbw x 7/8
    ("all_to_all", 339.63, 335.96, 284.61, 325265917022, 0.7526),
    ("all_gather", 351.66, 344.11, 300.94, 343936367363, 0.7751),
    ("reduce_scatter", 329.08, 321.66, 285.38, 326151166407, 0.7249),
])
def test_h100_xla_rows_set_each_kinds_efficiency_hand_checked(kind, top, second, at_128m, xla_128m, level):
    ops = pub.published_ops("H100-SXM")
    rows = [(c.nbytes, c.busbw_gbps, c.role) for c in ops.collective if c.kind == kind]
    assert [r[0] for r in rows] == [1 << k for k in range(24, 32)]
    assert rows[-1] == (1 << 31, top, "fit") and rows[-2] == (1 << 30, second, "fit")
    assert all(role == "check" for s, _, role in rows if s < 1 << 30)
    assert rows[3][1] == at_128m == pytest.approx(xla_128m * 7 / 8 / 1e9, abs=0.005)  # 128 MiB, the table's throughput
    fit = [(s, b) for s, b, role in rows if role == "fit"]
    frac = pub.scaleup_fraction("H100-SXM", kind)
    assert frac == pytest.approx(_direct_by_hand(fit, 450e9), rel=1e-9) and frac == pytest.approx(level, abs=1e-4)
    assert basis("H100-SXM")[pub.FIT_KINDS[kind]] == "published microbenchmark"
    assert ops.sources(pub.FIT_KINDS[kind])[0].startswith("openxla/xla xla/service/gpu/model/collective_interpolator")


@pytest.mark.parametrize("kind, sizes, fit, xla_top, level", [
    # XLA's sm_100 table: one NCCL collective of 8 devices of one host; busbw = algbw x 7/8; S of 1 GiB and 2 GiB fit
    ("all_to_all", [27, 29, 30, 31], [(1 << 30, 601.25), (1 << 31, 587.96)], 671948734380, 0.6641),
    ("all_gather", [29, 30, 31], [(1 << 30, 590.78), (1 << 31, 616.43)], 704488436788, 0.6741),
    ("reduce_scatter", [29, 30, 31], [(1 << 30, 608.36), (1 << 31, 641.77)], 733454255330, 0.6981),
])
def test_b200_xla_rows_set_each_kinds_efficiency_hand_checked(kind, sizes, fit, xla_top, level):
    ops = pub.published_ops("B200")
    rows = [(c.nbytes, c.busbw_gbps, c.role) for c in ops.collective if c.kind == kind]
    assert [r[0] for r in rows] == [1 << k for k in sizes]
    assert [(s, b) for s, b, role in rows if role == "fit"] == fit
    assert all(role == "check" for s, _, role in rows if s < 1 << 30)
    assert fit[-1][1] == pytest.approx(xla_top * 7 / 8 / 1e9, abs=0.005)  # 2 GiB, the table's throughput
    frac = pub.scaleup_fraction("B200", kind)
    assert frac == pytest.approx(_direct_by_hand(fit, 900e9), rel=1e-9) and frac == pytest.approx(level, abs=1e-4)
    assert basis("B200")[pub.FIT_KINDS[kind]] == "published microbenchmark"
    assert ops.sources(pub.FIT_KINDS[kind]) == (
        "openxla/xla xla/service/gpu/model/collective_interpolator_data.h @ 040b3849aff88d770f0677110fb5efc58e366a95, "
        "retrieved 2026-12-04",)


def test_b200_all_reduce_rows_are_checks_and_it_stays_on_the_datasheet():
    ops = pub.published_ops("B200")
    ar = [(c.nbytes, c.busbw_gbps, c.role) for c in ops.collective if c.kind == "all_reduce"]
    # busbw = XLA's throughput x 2 x 7/8: 333722196805, 344699539776, 350752968723 B/s at 512 MiB, 1 GiB, 2 GiB
    assert ar == [(1 << 29, 584.01, "check"), (1 << 30, 603.22, "check"), (1 << 31, 613.82, "check")]
    assert pub.scaleup_fraction("B200") is None and ops.sources("collective") == ()
    assert pub.comm_eff(get_gpu("B200"), EFF, "all_reduce") == EFF.comm_eff


def test_h100_all_reduce_stays_on_the_datasheet():
    # only NVLS all-reduce rows (checks): no all-reduce level, so the all-reduce keeps comm_eff
    assert pub.scaleup_fraction("H100-SXM") is None and pub.published_ops("H100-SXM").sources("collective") == ()
    assert pub.comm_eff(get_gpu("H100-SXM"), EFF, "all_reduce") == EFF.comm_eff


def test_all_to_all_prices_at_its_own_level_else_the_all_reduce_level():
    from c3kit.workload.ops import Collective

    h100, a100, b200 = get_gpu("H100-SXM"), get_gpu("A100-SXM-80G"), get_gpu("B200")
    s = float(1 << 27)
    a2a = Collective("d", "all_to_all", s, 8, span="intra")
    ag = Collective("g", "all_gather", s, 8, span="intra")
    frac, f_ag = pub.scaleup_fraction("H100-SXM", "all_to_all"), pub.scaleup_fraction("H100-SXM", "all_gather")
    # direct on the NVSwitch: launch 6.6 us + 0.6 us + 7/8 S / (450 GB/s x the kind's own level)
    assert cost.time(a2a, h100, EFF) == pytest.approx(7.2e-6 + 0.875 * s / (450e9 * frac), rel=1e-12)
    assert cost.time(ag, h100, EFF) == pytest.approx(7.2e-6 + 0.875 * s / (450e9 * f_ag), rel=1e-12)
    # the all-reduce has no level of its own on H100 (NVLS checks only): two-shot direct at comm_eff
    ar = Collective("r", "all_reduce", s, 8, span="intra")
    assert cost.time(ar, h100, EFF) == pytest.approx(7.8e-6 + 1.75 * s / (450e9 * EFF.comm_eff), rel=1e-12)
    assert cost.explain(a2a, h100, EFF).detail["scaleup_eff"] == frac
    assert pub.comm_eff(h100, EFF, "all_to_all") == frac and pub.comm_eff(h100, EFF) == EFF.comm_eff
    assert cost.time(a2a, h100, "roofline") == pytest.approx(7.2e-6 + 0.875 * s / 450e9, rel=1e-12)
    # A100: no all-to-all rows, its all-reduce rows' level prices every kind, all-to-all included
    assert pub.scaleup_fraction("A100-SXM-80G", "all_to_all") == pub.scaleup_fraction("A100-SXM-80G")
    f_b200 = pub.scaleup_fraction("B200", "all_to_all")
    assert pub.comm_eff(b200, EFF, "all_to_all") == f_b200 and pub.comm_eff(b200, EFF) == EFF.comm_eff
    # the vectorized step model takes the same level per kind
    rows = pub.comm_eff_rows([h100, b200, a100], [0, 1, 0, 2], EFF, "all_to_all")
    assert list(rows) == [frac, f_b200, frac, pub.scaleup_fraction("A100-SXM-80G")]
    assert list(pub.comm_eff_rows([h100], [0], EFF)) == [EFF.comm_eff]


def test_published_scaleup_efficiency_prices_intra_node_collectives_only_off_roofline():
    from c3kit.workload.ops import Collective

    a100 = get_gpu("A100-SXM-80G")
    frac = pub.scaleup_fraction("A100-SXM-80G")
    s = float(1 << 28)
    ar = Collective("ar", "all_reduce", s, 8, span="intra")
    # two-shot direct on the NVSwitch: launch 6.6 us + 2 x 0.6 us + 2 x 7/8 S / (300 GB/s x frac)
    assert cost.time(ar, a100, EFF) == pytest.approx(7.8e-6 + 1.75 * s / (300e9 * frac), rel=1e-12)
    assert cost.explain(ar, a100, EFF).detail["scaleup_eff"] == frac
    assert cost.time(ar, a100, "roofline") == pytest.approx(7.8e-6 + 1.75 * s / 300e9, rel=1e-12)
    # across nodes a send / recv runs on the NIC alone: the model's comm_eff stays there
    p2p = Collective("p", "send_recv", s, 2, span="inter")
    assert cost.time(p2p, a100, EFF) == pytest.approx(6.6e-6 + 5e-6 + s / (25e9 * EFF.comm_eff), rel=1e-12)
    b200 = get_gpu("B200")  # all-reduce rows are checks only: the assumed comm_eff for its all-reduces
    assert cost.time(ar, b200, EFF) == pytest.approx(7.8e-6 + 1.75 * s / (900e9 * EFF.comm_eff), rel=1e-12)
    assert pub.comm_eff(a100, EFF) == frac and pub.comm_eff(b200, EFF) == EFF.comm_eff


def test_h100_flash_attention_rows_check_the_transfer_and_set_nothing():
    # FlashAttention-2's H100 figure (24 bars: 2 head dims x causal or not x 512..16k): checks of the H200-measured
    # flash2 rates the H100 takes by transfer; they set no rate and keep the transfer's label
    rows = [a for a in pub.published_ops("H100-SXM").attention if a.backends == ("flash2",)]
    assert len(rows) == 24 and all(a.role == "check" for a in rows)
    assert [a.tflops for a in rows if a.head_dim == 128 and a.causal] == [163, 221, 265, 294, 308, 328]
    h100 = get_gpu("H100-SXM")
    assert pub.attention_fraction("H100-SXM", h100.peak_flops("bf16"), "flash2", 128, True, 8192) is None
    assert basis("H100-SXM")["attention"] == "transferred from H200-SXM"
    for a in rows:  # the transferred rate sits at 0.72-0.99 of the published one (2023 flash-attn build)
        heads = 2048 // a.head_dim
        kw = dict(causal=a.causal, backend="flash2")
        f = Attention("a", 16384 // a.seq, heads, heads, a.seq, a.seq, a.head_dim, **kw)
        b = Attention("a", 16384 // a.seq, heads, heads, a.seq, a.seq, a.head_dim, backward=True, **kw)
        rate = (f.flops + b.flops) / (cost.time(f, h100, EFF) + cost.time(b, h100, EFF)) / 1e12
        assert 0.7 < rate / a.tflops < 1.0, (a.seq, a.head_dim, a.causal)


def test_a100_steady_state_rows_hand_checked():
    ops = pub.published_ops("A100-SXM-80G")
    rows = {(s.m, s.n, s.k, s.source.split()[0]): s for s in ops.sustained}
    azure = "Azure/AI-benchmarking-guide"
    assert rows[(8192, 8192, 8192, azure)].tflops == 253.7 and rows[(8192, 8192, 8192, azure)].role == "fit"
    assert rows[(1024, 1024, 1024, azure)].tflops == 119.4 and rows[(1024, 1024, 1024, azure)].role == "check"
    he = rows[(8192, 8192, 8192, "https://www.thonking.ai/p/strangely-matrix-multiplications")]
    assert he.tflops == 257.0 and he.role == "check" and he.retrieved == "2026-12-04"
    # the rule the file states: fit rows are the shapes whose every dimension is at least 4096
    assert all((min(s.m, s.n, s.k) >= 4096) == (s.role == "fit") for s in ops.sustained if s.source.startswith(azure))
    assert all(s.rate_of == "bf16" for s in ops.sustained)  # FP16 priced at the equal BF16 rate (datasheet)
    assert ops.sources(pub.SUSTAINED) == (
        "Azure/AI-benchmarking-guide Azure_Results/ND_A100_v4_results.md @ 3f6a4d7c08c6fb1996437ff8d3aeb17a60d3ffd2, "
        "retrieved 2026-12-03",)
    assert not any(s.source.startswith(azure) for s in ops.gemm)  # steady-state rows are no burst-curve checks
    assert "gemm_sustained" not in ops.classes()  # a clock factor, not a priced op class


@pytest.mark.parametrize("patch, msg", [
    ({"rate_of": "fp4"}, "rate_of must be one of"),
    ({"rate_of": None}, "lacks rate_of"),
    ({"role": "tuned"}, "role 'tuned'"),
    ({"tflops": 0.0}, "positive"),
])
def test_bad_sustained_rows_are_refused(patch, msg):
    row = {"dtype": "fp16", "rate_of": "bf16", "m": 8192, "n": 8192, "k": 8192, "tflops": 250.0, "source": "s",
           "role": "fit", **patch}
    row = {k: v for k, v in row.items() if v is not None}
    with pytest.raises(CostError, match=msg):
        pub.parse({"gpu": "X", "retrieved": "2026-12-04", "sustained_gemm": [row]}, "x.toml")


FA1_BARS = {  # FlashAttention (v1) bar labels per panel: (causal, head dim) -> TFLOP/s at 512 .. 16k
    "A100-SXM-80G": {(False, 64): [91, 92, 104, 108, 110, 110], (False, 128): [76, 72, 76, 80, 82, 83],
                     (True, 64): [58, 70, 77, 87, 92, 97], (True, 128): [55, 62, 69, 76, 80, 83]},
    "H100-SXM": {(False, 64): [157, 159, 161, 161, 166, 168], (False, 128): [127, 127, 128, 131, 137, 139],
                 (True, 64): [104, 123, 136, 138, 149, 156], (True, 128): [98, 109, 108, 126, 135, 137]},
}


@pytest.mark.parametrize("gpu, png", [("A100-SXM-80G", "flash2_a100_fwd_bwd_benchmark.png"),
                                      ("H100-SXM", "flash2_h100_fwd_bwd_benchmark.png")])
def test_flash1_rows_are_the_published_bars_with_their_source(gpu, png):
    ops = pub.published_ops(gpu)
    rows = [a for a in ops.attention if a.kernel == "FlashAttention (v1)"]
    got = {}
    for a in rows:
        assert a.backends == ("flash1",) and a.role == "fit" and a.direction == "fwd+bwd"
        assert a.source.startswith(f"Dao-AILab/flash-attention assets/{png} @ 0251105a2fb19d2957484b7f023cd8c115286ced")
        assert a.source.endswith("FlashAttention bars") and a.retrieved == "2026-12-04"
        got.setdefault((a.causal, a.head_dim), []).append((a.seq, a.tflops))
    assert {k: [t for _, t in sorted(v)] for k, v in got.items()} == FA1_BARS[gpu]
    assert all([s for s, _ in sorted(v)] == [512, 1024, 2048, 4096, 8192, 16384] for v in got.values())
    peak = get_gpu(gpu).peak_flops("bf16")
    assert pub.attention_fraction(gpu, peak, "flash1", 128, True, 8192) == pytest.approx(
        FA1_BARS[gpu][(True, 128)][4] * 1e12 / peak)
    assert pub.attention_labels(gpu)["flash1"] == pub.PUBLISHED


def test_triton_bars_check_the_flash1_class_and_set_nothing():
    """The A100 figure's 'FlashAttention Triton' bars (the kernel llm-foundry vendored): check rows of flash1, within
    0.8-1.2x of its FlashAttention (v1) rate at every published shape (its header: slightly slower overall)."""
    ops = pub.published_ops("A100-SXM-80G")
    tri = [a for a in ops.attention if a.kernel.startswith("FlashAttention Triton")]
    assert len(tri) == 24 and all(a.role == "check" and a.backends == ("flash1",) for a in tri)
    assert [a.tflops for a in tri if a.causal and a.head_dim == 128] == [50, 61, 68, 74, 78, 80]
    fig = "Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png @ 0251105a2fb19d2957484b7f023cd8c115286ced"
    assert ops.sources("attention") == (f"{fig}, retrieved 2026-12-03", f"{fig}, retrieved 2026-12-04")
    gpu = get_gpu("A100-SXM-80G")
    for a in tri:
        h = 2048 // a.head_dim
        f = Attention("a", 16384 // a.seq, h, h, a.seq, a.seq, a.head_dim, causal=a.causal, backend="flash1")
        b = Attention("a", 16384 // a.seq, h, h, a.seq, a.seq, a.head_dim, causal=a.causal, backward=True,
                      backend="flash1")
        rate = (f.flops + b.flops) / (cost.time(f, gpu, EFF) + cost.time(b, gpu, EFF)) / 1e12
        assert 0.8 < a.tflops / rate < 1.2, (a.seq, a.head_dim, a.causal)
