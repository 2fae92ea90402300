"""PIM memory model and PIMnast GEMV placement: hand-checked numbers and properties."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from c3kit.errors import PimError
from c3kit.pim.gemv import Gemv, Knobs, best_time, host_time, place, search
from c3kit.pim.model import get_pim, list_pims
from c3kit.pim.pimnast import gemv_table, get_opt, opt_family, summary, token_table

SOC = get_pim("lpddr5x-7500-pim")


def test_catalog_numbers_and_rooflines():
    assert {m.name for m in list_pims()} >= {"lpddr5x-7500-pim", "hbm-pim"}
    assert SOC.units == 128 and SOC.word_bytes == 32 and SOC.row_words == 64
    assert SOC.pim_bw == pytest.approx(128 * 32 / 4.2667e-9)
    assert SOC.bandwidth_boost == pytest.approx(8.0, rel=1e-4)
    assert SOC.row_efficiency == pytest.approx(64 * 4.2667 / (64 * 4.2667 + 39), rel=1e-9)
    assert SOC.row_roofline == pytest.approx(7.0, rel=1e-3)
    hbm = get_pim("hbm-pim")
    assert hbm.banks_per_unit == 2 and hbm.banks_per_channel == 16 and hbm.simd_bits == 256
    assert hbm.bandwidth_boost == pytest.approx(4.0, rel=1e-3)


def test_every_catalog_number_has_a_source():
    for mem in list_pims():
        for k in ("channels", "banks_per_channel", "simd_bits", "timing.tRP", "host.bw"):
            assert k in mem.sources, (mem.name, k)


def test_address_interleaving():
    assert SOC.locate(0) == {"channel": 0, "bank": 0, "unit": 0, "row": 0, "column": 0}
    assert SOC.locate(256)["channel"] == 1 and SOC.locate(8 * 256)["bank"] == 1
    # The 129th chunk is back in channel 0 bank 0, one chunk (8 words) further along its row.
    assert SOC.locate(128 * 256) == {"channel": 0, "bank": 0, "unit": 0, "row": 0, "column": 8}
    assert SOC.locate(8 * 128 * 256)["row"] == 1
    # A 16 x 16 INT8 tile stored as one chunk stays in one bank; a row-major matrix row of 4096 B does not.
    tile = {(SOC.locate(a)["channel"], SOC.locate(a)["bank"]) for a in range(5 * 256, 6 * 256)}
    matrix_row = {(SOC.locate(a)["channel"], SOC.locate(a)["bank"]) for a in range(0, 4096)}
    assert len(tile) == 1 and len(matrix_row) == 16
    assert get_pim("hbm-pim").locate(256 * 16)["unit"] == 0 and get_pim("hbm-pim").locate(256 * 32)["unit"] == 1
    with pytest.raises(PimError):
        SOC.locate(-1)


def test_hand_checked_placement():
    p = place(SOC, Gemv("g", 2048, 2048), Knobs(tile_m=16, split_k=1, degree=4, input_mode="registers"))
    assert (p.tile_k, p.row_blocks, p.k_tiles, p.items_per_unit, p.tiles_per_unit) == (16, 128, 128, 1, 128)
    t_mac = 1024 * 4.2667e-9
    t_open = 16 * 39e-9
    t_input = 8 * (8 * 32 / 15e9 + 18.13e-9 + 12e-9)
    t_output = 128 * 16 * 4 / 120e9
    assert p.t_mac == pytest.approx(t_mac)
    assert p.t_open == pytest.approx(t_open)
    assert p.t_input == pytest.approx(t_input)
    assert p.t_output == pytest.approx(t_output)
    assert p.time == pytest.approx(t_mac + t_open + t_input + t_output)
    assert p.host_time == pytest.approx((2048 * 2048 + 2 * 2048) / 120e9)
    assert p.padding == pytest.approx(0.0)
    assert p.commands == {"ACT": 16, "PRE": 16, "MAC": 1024, "WR": 64, "RD": 8192 // (32 * 8)}


def test_padding_and_split_k():
    # 144 row blocks of 16 over 128 units: two items per unit, 43.75 % of the work is padding.
    p = place(SOC, Gemv("qkv", 2304, 768), Knobs(16, 1, 2))
    assert p.items_per_unit == 2 and p.padding == pytest.approx(1 - 144 / 256)
    # Split-K 8 makes 1152 items = 9 per unit exactly.
    q = place(SOC, Gemv("qkv", 2304, 768), Knobs(16, 8, 3))
    assert q.items_per_unit == 9 and q.padding == pytest.approx(0.0)
    assert q.time < p.time


def test_search_beats_fixed_and_explains():
    g = Gemv("ff1", 3072, 768)
    best = search(SOC, g)
    assert best.time <= place(SOC, g, Knobs(16, 1, 1)).time
    assert "tile" in best.explanation and "roofline" in best.explanation
    assert best.time == pytest.approx(best_time(SOC, g))


def test_batch_halves_speedup_roughly():
    s = [search(SOC, Gemv("g", 12288, 12288, b)).speedup for b in (1, 2, 4)]
    assert s[0] > s[1] > s[2]
    assert s[1] == pytest.approx(s[0] / 2, rel=0.15) and s[2] == pytest.approx(s[0] / 4, rel=0.3)


def test_bad_inputs_raise():
    with pytest.raises(PimError):
        SOC.with_(in_regs=6)
    with pytest.raises(PimError):
        SOC.with_(banks_per_channel=0)
    with pytest.raises(PimError):
        Gemv("g", 0, 10)
    with pytest.raises(PimError):
        place(SOC, Gemv("g", 64, 64), Knobs(tile_m=3))
    with pytest.raises(PimError):
        place(SOC, Gemv("g", 64, 64, batch=4), Knobs(tile_m=16, degree=4))
    with pytest.raises(PimError):
        search(SOC, Gemv("g", 64, 64, batch=128))
    with pytest.raises(PimError):
        get_pim("no-such-pim")


def test_opt_family_study():
    models = [get_opt("125m"), get_opt("OPT-175B")]
    assert len(opt_family()) == 9
    g = gemv_table(SOC, models)
    t = token_table(SOC, models)
    assert (g.speedup <= g.roofline * (1 + 1e-9)).all()
    assert (t.token_speedup <= t.gemv_speedup + 1e-9).all()
    s = summary(g, t).set_index("metric")
    assert s.loc["boost_roofline", "ours"] == pytest.approx(8.0, rel=0.01)
    assert 4.0 < s.loc["avg_gemv_speedup", "ours"] < 7.0


shapes = st.tuples(st.integers(1, 20000), st.integers(1, 20000), st.sampled_from([1, 2, 4]))


@given(shapes, st.sampled_from(["lpddr5x-7500-pim", "hbm-pim"]), st.booleans())
def test_speedup_never_exceeds_roofline(s, name, overlap):
    m, k, b = s
    mem = get_pim(name)
    p = search(mem, Gemv("g", m, k, b), overlap_open=overlap)
    assert p.speedup <= p.roofline * (1 + 1e-9) <= p.boost_roofline * (1 + 1e-9)
    assert p.knobs.degree <= p.items_per_unit
    assert p.speedup <= mem.bandwidth_boost * (1 + 1e-9) or p.host_time > mem.host.time(m * k * mem.elem_bytes)


@given(shapes, st.sampled_from([1, 2, 4, 8, 16, 32]), st.sampled_from([1, 2, 4, 8]))
def test_more_banks_never_slow_a_gemv(s, banks, channels):
    m, k, b = s
    g = Gemv("g", m, k, b)
    small = SOC.with_(banks_per_channel=banks, channels=channels)
    assert best_time(small.with_(banks_per_channel=2 * banks), g) <= best_time(small, g) * (1 + 1e-12)
    assert best_time(small.with_(channels=2 * channels, host_bw=small.host.bw * 2), g) <= \
        best_time(small, g) * (1 + 1e-12) or math.isclose(best_time(small, g), 0)
