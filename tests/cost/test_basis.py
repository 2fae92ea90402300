"""Every GPU says, per op class, where its parameters come from; transfers are documented, never silent."""

import json

import pytest

from c3kit.cost.basis import DATASHEET, OP_CLASSES, basis, basis_sources, source_gpu, transfers
from c3kit.hw.catalog import list_gpus

# Every catalog GPU x op class (OP_CLASSES order: gemm, attention, memory, floor, collective, gemm_small_m,
# gemm_grouped, gemm_fp8, fp8_cast, collective_a2a, collective_ag, collective_rs). M measured, T transferred from H200-SXM, P published microbenchmark,
# D datasheet. Reviewed by hand against what exists: H200 has every op-level file but no multi-GPU comm file;
# H100 SXM takes all of the H200's (same die, same 700 W) and has published all-to-all, all-gather and
# reduce-scatter rows (XLA's sm_90 table),
# the 500 W H100 only the four classes its transfer
# lists; A100 has published GEMM (BF16), FlashAttention-2, BabelStream and nccl-tests rows; B200 BF16 and FP8 GEMM,
# cuDNN-frontend SDPA, CCCL nvbench streaming and XLA sm_100 all-to-all / all-gather / reduce-scatter rows (its
# all-reduce rows are checks); MI300X BF16 and FP8 GEMM, BabelStream and rccl-tests rows; MI325X / MI355X a
# BF16 GEMM row only; MI250X and the simulated T3 GPU nothing.
EXPECTED = {
    "H200-SXM": "MMMMDMMMMDDD",
    "H100-SXM": "TTTTDTTTTPPP",
    "H100-SXM-96G-500W": "TTTTDDDDDDDD",
    "A100-SXM-80G": "PPPDPDDDPPPP",
    "B200": "PPPDDDDPPPPP",
    "MI300X": "PDPDPDDPPPPP",
    "MI325X": "PDDDDDDDDDDD",
    "MI355X": "PDDDDDDDDDDD",
    "MI250X": "DDDDDDDDDDDD",
    "T3-SIM": "DDDDDDDDDDDD",
}
LABEL = {"M": "measured", "T": "transferred from H200-SXM", "P": "published microbenchmark", "D": "datasheet"}


def test_every_catalog_gpu_and_op_class_has_its_reviewed_basis():
    assert set(EXPECTED) == {g.name for g in list_gpus()}  # a new catalog GPU needs its row here
    for g, row in EXPECTED.items():
        assert basis(g) == {c: LABEL[x] for c, x in zip(OP_CLASSES, row, strict=True)}, g


def test_every_basis_names_its_source():
    for g in EXPECTED:
        labels, sources = basis(g), basis_sources(g)
        assert set(sources) == set(OP_CLASSES)
        for c in OP_CLASSES:
            src = sources[c]
            if labels[c] == "datasheet":
                assert src == DATASHEET
            elif labels[c] == "published microbenchmark":  # repository path @ commit, file, retrieval date
                assert " @ " in src and "cost/data/published_ops/" in src and "retrieved 2026-" in src
            else:
                assert src.startswith("cost/data/calib/h200-sxm-") and (labels[c] == "measured") == (
                    "transfers.toml" not in src)
    b = basis_sources("B200")
    assert b["attention"].startswith("NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/artifacts/"
                                     "sdpa_bf16_benchmark_results_NVIDIA_B200.csv @ cb560b92882357764b874dc3be2c469a488a94a7, "
                                     "retrieved 2026-12-04 (cost/data/published_ops/b200.toml)")
    assert basis_sources("A100-SXM-80G")["collective"] == (
        "Azure/AI-benchmarking-guide Azure_Results/ND_A100_v4_results.md @ 3f6a4d7c08c6fb1996437ff8d3aeb17a60d3ffd2, "
        "retrieved 2026-12-03 (cost/data/published_ops/a100-sxm-80g.toml)")
    assert basis_sources("H100-SXM")["attention"].startswith("cost/data/calib/h200-sxm-ops-attention.json by "
                                                             "cost/data/transfers.toml: same GH100 die")
    assert basis_sources("H200-SXM+2g(historical)")["gemm"] == "cost/data/calib/h200-sxm-gemm.json"


def test_published_calibration_doc_lists_every_source_and_basis():
    """docs/published-calibration.md's generated blocks are what benchmarks/published_ops.py makes from the files."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "published_ops.py"
    spec = importlib.util.spec_from_file_location("published_ops_script", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = mod.DOC.read_text()
    assert "<!-- generated:published-sources -->" in text and "<!-- generated:published-basis -->" in text
    assert mod.doc_text(text) == text, "stale: run python benchmarks/published_ops.py --write-doc"


def test_h200_is_measured_h100_transferred_a100_published_or_datasheet():
    h200, h100, a100 = basis("H200-SXM"), basis("H100-SXM"), basis("A100-SXM-80G")
    assert {h200[c] for c in ("gemm", "attention", "memory", "floor")} == {"measured"}
    assert {h100[c] for c in ("gemm", "attention", "memory", "floor")} == {"transferred from H200-SXM"}
    # A100: GEMMs, attention and bandwidth-bound ops from published microbenchmarks (cost/data/published_ops),
    # collectives (every kind, at the all-reduce rows' level) from published nccl-tests rows, kernel floors and
    # the H200-only GEMM classes from the datasheet
    pub = {"gemm", "attention", "memory", "fp8_cast", "collective", "collective_a2a", "collective_ag", "collective_rs"}
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
    assert doc["basis_sources"]["attention"].startswith("Dao-AILab/flash-attention assets/")
    assert doc["basis_sources"]["floor"] == DATASHEET
