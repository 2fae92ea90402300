"""benchmarks/async_tp_steps.py (a multi-GPU measurement the lead runs): its cases are the dataset's GEMM cases, and
outside torchrun it is one error line with exit 2."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("async_tp_steps", ROOT / "benchmarks" / "async_tp_steps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cases_are_the_datasets_gemm_cases():
    cases = _load()._cases(8)
    assert len(cases) == 13
    assert ("kraken-rs-512", "gemm_rs", 512, 4096, 14336) in cases
    assert all(m % 3 == 0 for _, _, m, _, _ in _load()._cases(3))


def test_outside_torchrun_one_error_line(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert _load().main(["--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error:")
    assert not (tmp_path / "x.json").exists()
