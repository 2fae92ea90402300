"""Workload errors reach the user through the CLI as one line and exit code 2."""

from pathlib import Path

import pytest

from c3kit.cli.main import main

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("args,msg", [
    (["--model", "llama-3-7"], "did you mean Llama-3-70B"),
    (["--model", str(DATA / "malformed.json")], "malformed JSON at line 2"),
    (["--model", str(DATA / "gpt2_unsupported.json")], "unsupported model_type 'gpt2'"),
    (["--model", "T-NLG", "--tp", "8"], "28 attention heads are not divisible by tp 8: use tp in 1, 2, 4, 7, 14, 28"),
    (["--model", "Llama-3-70B", "--tp", "1", "--pp", "81", "--gpus", "81"], "80 layers cannot fill pp 81 stages"),
])
def test_bad_workload_input_exit_2(args, msg, capsys, tmp_path):
    assert main(["analyze", *args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()
