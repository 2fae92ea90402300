"""benchmarks/async_tp_steps.py (a multi-GPU measurement the lead runs): its cases are the dataset's GEMM cases, and
outside torchrun it is one error line with exit 2."""


def test_cases_are_the_datasets_gemm_cases(load_benchmark):
    mod = load_benchmark("async_tp_steps")
    cases = mod._cases(8)
    assert len(cases) == 13
    assert ("kraken-rs-512", "gemm_rs", 512, 4096, 14336) in cases
    assert all(m % 3 == 0 for _, _, m, _, _ in mod._cases(3))


def test_outside_torchrun_one_error_line(load_benchmark, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert load_benchmark("async_tp_steps").main(["--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error:")
    assert not (tmp_path / "x.json").exists()
