"""`c3kit bench comm` and `c3kit bench overlap` on two CPU ranks over gloo (plumbing, files, tables)."""

import json

import pytest

pytest.importorskip("torch", reason="bench needs PyTorch; CI installs the CPU wheel")

from c3kit.cli.main import main  # noqa: E402
from c3kit.runtime.bench.comm import busbw_factor, default_sizes  # noqa: E402


def test_nccl_tests_factors_and_sizes():
    assert busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert busbw_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("all_to_all", 1) == 1.0
    assert default_sizes() == [1024 * 4**i for i in range(11)]  # 1 KiB .. 1 GiB


def test_bench_comm_gloo_writes_comm_file(tmp_path, capsys):
    out = tmp_path / "cpu-comm.json"
    assert main(["bench", "comm", "--world", "2", "--backend", "gloo", "--sizes", "1KB,16KB", "--iters", "2",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["kind"] == "comm" and doc["meta"]["ranks"] == "2"
    ix = {c: i for i, c in enumerate(doc["columns"])}
    kinds = {r[ix["collective"]] for r in doc["rows"]}
    assert kinds == {"all_gather", "reduce_scatter", "all_reduce", "all_to_all"}
    for r in doc["rows"]:
        f = 1.0 if r[ix["collective"]] == "all_reduce" else 0.5
        assert r[ix["busbw"]] == pytest.approx(r[ix["algbw"]] * f)
    assert "busbw(GB/s)" in capsys.readouterr().out


def test_bench_overlap_gloo_every_schedule(tmp_path):
    out = tmp_path / "cpu-overlap.json"
    assert main(["bench", "overlap", "--world", "2", "--backend", "gloo", "--models", "tiny", "--tokens", "32",
                 "--iters", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    ix = {c: i for i, c in enumerate(doc["columns"])}
    got = {(r[ix["op"]], r[ix["schedule"]]) for r in doc["rows"]}
    for op in ("ag", "rs", "moe"):
        for s in ("serial", "ring", "ficco", "auto", "ideal", "serial-nccl-cublas"):
            assert (op, s) in got


def test_bench_multi_bad_input():
    assert main(["bench", "comm", "--world", "2", "--backend", "gloo", "--collectives", "broadcast"]) == 2
    assert main(["bench", "overlap", "--world", "2", "--backend", "gloo", "--models", "gpt-9"]) == 2
    assert main(["bench", "comm", "--world", "2", "--backend", "nccl"]) == 2  # no GPUs here
