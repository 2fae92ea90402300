"""Every GPU says, per op class, where its parameters come from; transfers are documented, never silent."""

import json

import pytest

from c3kit.cost.basis import OP_CLASSES, basis, source_gpu, transfers


def test_h200_is_measured_h100_transferred_a100_published_or_datasheet():
    h200, h100, a100 = basis("H200-SXM"), basis("H100-SXM"), basis("A100-SXM-80G")
    assert {h200[c] for c in ("gemm", "attention", "memory", "floor")} == {"measured"}
    assert {h100[c] for c in ("gemm", "attention", "memory", "floor")} == {"transferred from H200-SXM"}
    # A100: GEMMs, attention and bandwidth-bound ops from published microbenchmarks (cost/data/published_ops),
    # kernel floors, collectives and the H200-only GEMM classes from the datasheet
    pub = {"gemm", "attention", "memory", "fp8_cast"}
    assert {c for c, v in a100.items() if v == "published microbenchmark"} == pub
    assert {v for c, v in a100.items() if c not in pub} == {"datasheet"}
    assert set(basis("MI250X").values()) == {"datasheet"}
    assert set(h200) == set(OP_CLASSES)


def test_projection_names_its_base():
    b = basis("H200-SXM+2g(historical)")
    assert b["attention"] == "projected from H200-SXM"
    assert source_gpu("H200-SXM+2g(historical)", "memory") == "H200-SXM"


def test_every_transfer_says_why():
    for t in transfers().values():
        assert t.reason and t.source != t.gpu and set(t.classes) <= set(OP_CLASSES)


def test_transfer_keeps_compute_and_rescales_bandwidth():
    from c3kit import cost
    from c3kit.hw.catalog import get_gpu
    from c3kit.workload.ops import Attention, MemOp

    h100, h200 = get_gpu("H100-SXM"), get_gpu("H200-SXM")
    m = cost.CostModel(kind="efficiency")
    a = Attention("a", 1, 32, 8, 32768, 32768, 128)
    assert cost.time(a, h100, m) == pytest.approx(cost.time(a, h200, m))  # same die, same FLOP terms
    big = MemOp("n", 0.0, 0.0, (("residual_add", 1 << 28, 8192),))
    ratio = cost.time(big, h100, m) / cost.time(big, h200, m)
    assert ratio == pytest.approx(h200.hbm_bw / h100.hbm_bw, rel=0.01)  # bandwidth-bound: slower by 4.8 / 3.35


def test_analyze_json_carries_the_basis(capsys):
    from c3kit.cli.main import main

    assert main(["analyze", "--model", "llama-3-8b", "--hw", "A100-SXM-80G", "--gpus", "8", "--tp", "2",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["basis"]["attention"] == "published microbenchmark" and doc["basis"]["floor"] == "datasheet"
