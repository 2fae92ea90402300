"""The shipped catalog: every entry loads, carries sources, and has hand-checked figures."""

import math

import pytest

from c3kit.errors import HardwareError
from c3kit.hw import get_gpu, list_gpus
from c3kit.hw.catalog import _SCALARS, gpu_from_dict

EXPECTED = {"A100-SXM-80G", "H100-SXM", "H200-SXM", "B200", "MI250X", "MI300X", "MI325X", "MI355X", "T3-SIM"}


def test_every_expected_entry_is_shipped():
    assert EXPECTED <= {g.name for g in list_gpus()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_entry_is_complete_and_sourced(name):
    g = get_gpu(name)
    assert g.peak_flops("bf16") > 0 and g.hbm_bw > 0 and g.hbm_bytes > 0
    for key in (*_SCALARS, "flops", "scaleup", "dma"):
        assert key in g.sources or any(s.startswith(key + ".") for s in g.sources), key
    assert all(isinstance(v, str) and len(v) > 10 for v in g.sources.values())


def test_hand_checked_figures():
    h200 = get_gpu("H200-SXM")
    assert h200.flops["bf16"] == 989.4e12 and h200.flops["fp8"] == 1978.9e12
    assert h200.hbm_bw == 4.8e12 and h200.scaleup.topology == "switch" and h200.scaleup.bw == 450e9
    mi300x = get_gpu("MI300X")
    assert mi300x.scaleup.topology == "mesh" and mi300x.scaleup.links_per_gpu == 7
    assert mi300x.dma.engines == 14
    assert math.isclose(mi300x.scaleup.peer_bw(), 64e9)
    t3 = get_gpu("T3-SIM")
    assert (t3.sms, t3.clock, t3.l2_bytes, t3.hbm_bw) == (80, 1.4e9, 16e6, 1e12)
    assert t3.scaleup.topology == "ring" and t3.scaleup.latency == 500e-9
    assert get_gpu("B200").flops["bf16"] == 2250e12
    assert get_gpu("MI250X").hbm_bytes == 64e9  # one GCD


def test_aliases_and_case():
    assert get_gpu("h200").name == "H200-SXM"
    assert get_gpu("a100").name == "A100-SXM-80G"


def test_unknown_name_suggests_close_match():
    with pytest.raises(HardwareError, match="did you mean.*H200-SXM"):
        get_gpu("H200-SMX")


def _doc():
    import tomllib
    from importlib import resources

    return tomllib.loads(resources.files("c3kit.hw").joinpath("data/h200-sxm.toml").read_text())


def test_entry_without_source_is_rejected():
    d = _doc()
    del d["sources"]["hbm_bw"]
    with pytest.raises(HardwareError, match="hbm_bw"):
        gpu_from_dict(d, "broken.toml")


def test_entry_missing_field_is_rejected():
    d = _doc()
    del d["hbm_bw"]
    with pytest.raises(HardwareError, match="hbm_bw"):
        gpu_from_dict(d, "broken.toml")


def test_toml_path_loads(tmp_path):
    src = _doc()
    p = tmp_path / "mine.toml"
    from importlib import resources

    p.write_text(resources.files("c3kit.hw").joinpath("data/h200-sxm.toml").read_text())
    assert get_gpu(str(p)).name == src["name"]


def test_bad_toml_path(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("name = ")
    with pytest.raises(HardwareError, match="not valid TOML"):
        get_gpu(str(p))


def test_empty_source_counts_as_missing():
    d = _doc()
    d["sources"]["clock"] = "  "
    with pytest.raises(HardwareError, match="clock"):
        gpu_from_dict(d, "broken.toml")


def test_unknown_dtype_in_flops():
    d = _doc()
    d["flops"]["bf8"] = 1e15
    with pytest.raises(HardwareError, match="bf8"):
        gpu_from_dict(d, "broken.toml")


@pytest.mark.parametrize("field,value", [("hbm_bw", -1.0), ("hbm_bw", "fast"), ("sms", 0)])
def test_bad_numbers(field, value):
    d = _doc()
    d[field] = value
    with pytest.raises(HardwareError):
        gpu_from_dict(d, "broken.toml")


def test_bad_topology():
    d = _doc()
    d["scaleup"]["topology"] = "torus"
    with pytest.raises(HardwareError, match="topology"):
        gpu_from_dict(d, "broken.toml")


def test_gpu_is_hashable_and_serializable():
    g = get_gpu("MI300X")
    assert {g: 1}[get_gpu("mi300x")] == 1
    d = g.to_dict()
    assert d["scaleup"]["links_per_gpu"] == 7 and d["dma"]["engines"] == 14


def test_torchtitan_grand_teton_h100_variant_as_its_source_states():
    # torchtitan docs/performance.md (eaea6f6a): 96GB HBM2e, 2.4 TB/s, 400 Gb/s per GPU, 500 W, SXM H100
    from c3kit.cost.basis import basis
    from c3kit.studies.validation import load_runs

    g = get_gpu("H100-SXM-96G-500W")
    assert (g.hbm_bytes, g.hbm_bw, g.scaleout_bw, g.gpus_per_node) == (96e9, 2.4e12, 50e9, 8)
    assert g.peak_flops("bf16") == get_gpu("H100-SXM").peak_flops("bf16")  # the SXM datasheet: an upper bound
    assert basis(g.name)["memory"] == "transferred from H200-SXM"
    runs = load_runs()
    h100 = runs[runs["source"].str.contains("Llama 3.1 on H100")]
    assert len(h100) == 18 and (h100["gpu"] == g.name).all()


def test_gpu_hash_is_kept_and_equal_gpus_hash_alike():
    """A GPU's hash is computed once and kept; an equal GPU built separately hashes alike; a changed one is unequal."""
    from c3kit.hw import get_gpu

    g = get_gpu("H200-SXM")
    h = hash(g)
    assert hash(g) == h and g.__dict__["_hash"] == h
    twin = g.with_(notes=g.notes)
    assert twin == g and hash(twin) == h
    assert g.with_(sms=g.sms - 1) != g
