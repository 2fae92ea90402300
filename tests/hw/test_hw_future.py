"""Future-hardware scaling rules: names, factors derived from the catalog, projection arithmetic."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from c3kit.errors import HardwareError
from c3kit.hw import get_gpu, list_rules, project
from c3kit.hw.future import AMD_CHAIN, HISTORICAL_CHAIN, RULES, ScalingRule, historical_factors


def test_historical_rule_matches_catalog_trend():
    derived = historical_factors([get_gpu(n) for n in HISTORICAL_CHAIN])
    rule = RULES["historical"].factors()
    for k, v in derived.items():
        assert rule[k] == pytest.approx(v, rel=1e-3), k


def test_amd_rule_matches_catalog():
    derived = historical_factors([get_gpu(n) for n in AMD_CHAIN])
    for k, v in RULES["historical-amd"].factors().items():
        assert v == pytest.approx(derived[k], rel=1e-3), k


def test_projection_name_and_values():
    h = get_gpu("H200-SXM")
    p = project(h, "historical", 2)
    assert p.name == "H200-SXM+2g(historical)"
    r = RULES["historical"]
    assert p.flops["bf16"] == pytest.approx(989.4e12 * r.compute ** 2)
    assert p.hbm_bw == pytest.approx(4.8e12 * r.mem_bw ** 2)
    assert p.hbm_bytes == pytest.approx(141e9 * r.mem_capacity ** 2)
    assert p.scaleup.bw == pytest.approx(450e9 * r.scaleup_bw ** 2)
    assert p.scaleout_bw == pytest.approx(50e9 * r.scaleout_bw ** 2)
    assert (p.sms, p.clock, p.l2_bytes, p.scaleup.latency) == (h.sms, h.clock, h.l2_bytes, h.scaleup.latency)
    assert "projection" in p.sources


def test_zero_generations_is_identity():
    h = get_gpu("MI300X")
    assert project(h, "balanced", 0) is h


def test_projected_name_resolves_through_get_gpu():
    assert get_gpu("B200+1g(comm-rich)").scaleup.bw == pytest.approx(900e9 * 3)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_generations(bad):
    with pytest.raises(HardwareError):
        project(get_gpu("H100"), "balanced", bad)


def test_unknown_rule_lists_valid_ones():
    with pytest.raises(HardwareError, match="historical"):
        project(get_gpu("H100"), "magic", 1)


def test_bad_rule_factor():
    with pytest.raises(HardwareError):
        ScalingRule("x", 0.0, 1, 1, 1, 1, "none")


def test_every_rule_documented():
    assert {r.name for r in list_rules()} >= {"historical", "compute-heavy", "balanced", "comm-rich"}
    assert all(r.source for r in list_rules())


@given(st.sampled_from(sorted(RULES)), st.integers(1, 4))
def test_projection_never_shrinks(rule, gens):
    h = get_gpu("H200-SXM")
    p = project(h, rule, gens)
    assert p.peak_flops("bf16") >= h.peak_flops("bf16")
    assert p.hbm_bw >= h.hbm_bw and p.scaleout_bw >= h.scaleout_bw and math.isfinite(p.hbm_bytes)
