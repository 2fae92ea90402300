"""benchmarks/async_tp_chunks.py: its cases are the dataset's GEMM cases, its table prices the shipped H200 rows,
and a missing file is one error line with exit 2."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cases_are_the_datasets_gemm_cases_once_each(load_benchmark):
    cases = load_benchmark("async_tp_chunks")._cases()
    names = [c[0] for c in cases]
    assert len(names) == len(set(names)) == 13
    assert ("kraken-rs-512", 512, 4096, 14336) in cases


def test_table_of_the_shipped_rows(load_benchmark):
    mod = load_benchmark("async_tp_chunks")
    doc = json.loads(mod.DEFAULT.read_text())
    lines = mod.table(doc)
    assert len(lines) == 1 + len(doc["rows"]) == 14
    # measured: eight chunks never beat the whole GEMM on one stream nor on two (call 27)
    for r in (dict(zip(doc["columns"], row)) for row in doc["rows"]):
        assert r["chunks_two_streams_s"] > r["whole_s"] and r["chunks_one_stream_s"] > r["whole_s"]


def test_missing_file_is_one_error_line(tmp_path, capsys, load_benchmark):
    assert load_benchmark("async_tp_chunks").main(["--file", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
