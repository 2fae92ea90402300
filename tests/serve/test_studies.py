"""The serving studies: their building blocks by hand, and each study's quick run through the CLI."""

import json
import math

import pytest

from c3kit import cost
from c3kit.cli.main import main
from c3kit.cost.dma import best_variant
from c3kit.hw.catalog import get_gpu
from c3kit.studies.serving import FusedGemmAllReduce, dma_timer, host_timer, pim_timer, run_named
from c3kit.studies.dma_latte import mi300x_params
from c3kit.workload.ops import Collective, Gemm, MemOp

MI = get_gpu("MI300X")


def test_fused_policy_by_hand():
    p = FusedGemmAllReduce(4)
    # GEMM 4 ms in 4 stages of 1 ms, all-reduce 6 ms = RS 3 ms (3 sends of 1 ms) + AG 3 ms:
    # sends finish at 2, 3, 4 ms -> RS done at 4 ms (= GEMM end), then the AG: 7 ms instead of 10 ms
    assert p.pair_time(4e-3, 6e-3, True) == pytest.approx(7e-3)
    assert p.pair_time(4e-3, 6e-3, False) == pytest.approx(6e-3)
    # a tiny all-reduce: the sends hide behind the GEMM (the last stage is reduced locally), then the AG
    assert p.pair_time(4e-3, 6e-6, True) == pytest.approx(4e-3 + 3e-6)
    with pytest.raises(Exception):
        FusedGemmAllReduce(1)


def test_dma_timer_picks_the_faster_engine():
    params, _ = mi300x_params()
    t = dma_timer(params, "efficiency")
    for size in (4e3, 64e6):
        op = Collective("ag", "all_gather", size, 8)
        sm = cost.time(op, MI, "efficiency")
        assert t(op, MI) == pytest.approx(min(sm, best_variant("all_gather", size, 8, params).total))
    ar = Collective("ar", "all_reduce", 16e3, 8)
    one_shot = best_variant("all_gather", 8 * 16e3, 8, params).total + cost.time(
        MemOp("x", 9 * 16e3, 7 * 16e3 / 2), MI, "efficiency")
    assert t(ar, MI) == pytest.approx(min(one_shot, cost.time(ar, MI, "efficiency")))
    g = Gemm("g", 64, 64, 64)
    assert t(g, MI) == cost.time(g, MI, "efficiency")


def test_pim_timer_never_slower_than_host():
    from c3kit.pim.model import get_pim

    mem = get_pim("hbm-pim")
    h = get_gpu("H200-SXM")
    host, pim = host_timer("efficiency"), pim_timer(mem, "efficiency", h.hbm_bw / mem.host.bw)
    for m in (1, 4, 8, 64):
        g = Gemm("fc1", m, 14336, 4096)
        assert pim(g, h) <= host(g, h)
    assert pim(Gemm("fc1", 1, 14336, 4096), h) < host(Gemm("fc1", 1, 14336, 4096), h)  # GEMV: PIM wins
    assert pim(Gemm("fc1", 64, 14336, 4096), h) == host(Gemm("fc1", 64, 14336, 4096), h)  # too many rows


def test_unknown_study():
    with pytest.raises(Exception, match="unknown serving study"):
        run_named("nope")


def test_fused_study_quick():
    (r,) = run_named("fused", quick=True)
    assert set(r.summary.columns) >= {"metric", "ours", "published", "basis"}
    assert (r.summary["basis"] == "predicted independently").all()
    assert r.headline["ttft_speedup_max"] > 1.0
    assert len(r.tables["serve_fused_engine"]) > 0


def test_study_cli_quick(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["serve", "study", "pim", "--quick", "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    s = doc["studies"][0]
    assert s["headline"]["token_speedup_soc"] > 1 and math.isfinite(s["headline"]["token_speedup_gpu"])
    assert (out / "report.md").is_file()
    assert main(["serve", "study", "bogus", "--out", str(tmp_path / "b")]) == 2
    assert not (tmp_path / "b").exists()
