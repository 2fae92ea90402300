"""Bad input: one `error:` line on stderr, exit code 2, no traceback, nothing written."""

import os
import sys

import pytest

from c3kit.cli.main import main


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty current folder with a binary file, a non-UTF-8 file, a regular file and a foreign folder."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bin.json").write_bytes(bytes(range(256)) * 2)
    (tmp_path / "latin1.csv").write_bytes("param,value\nlaunch,3e-6 \xb5s\n".encode("latin-1"))
    (tmp_path / "latin1.json").write_bytes('{"model_type": "llama", "name": "caf\xe9"}'.encode("latin-1"))
    (tmp_path / "regular").write_text("x")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    return tmp_path


def _snapshot(root):
    return sorted((str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1) for p in root.rglob("*"))


def _refused(capsys, root, argv, *must_say):
    before = _snapshot(root)
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for word in must_say:
        assert word in lines[0], (word, lines[0])
    assert _snapshot(root) == before, "something was written"
    return lines[0]


@pytest.mark.parametrize("argv, says", [
    (["analyze", "--model", "bin.json", "--out", "r"], "not a text file"),
    (["analyze", "--model", "latin1.json", "--out", "r"], "not a text file"),
    (["study", "dma", "--calib", "bin.json", "--quick", "--out", "r"], "bin.json"),
    (["study", "dma", "--calib", "latin1.csv", "--quick", "--out", "r"], "latin1.csv"),
    (["pim", "amenability", "--traits", "bin.json"], "not a text file"),
    (["pim", "amenability", "--traits", "latin1.json"], "not a text file"),
    (["overlap", "--pattern", "gemm_rs", "--m", "8192", "--n", "8192", "--k", "8192", "--calib", "bin.json"],
     "not a text file"),
])
def test_binary_or_non_utf8_input_files(workdir, capsys, argv, says):
    _refused(capsys, workdir, argv, says)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and /sys are Linux folders")
@pytest.mark.parametrize("out", ["/proc/c3kit-report", "/sys/c3kit-report", "regular/sub", "regular"])
def test_unwritable_out_is_refused_before_the_run(workdir, capsys, out):
    _refused(capsys, workdir, ["analyze", "--out", out], "--out")
    assert not list(workdir.glob(".c3kit-*"))


@pytest.mark.parametrize("cmd", [["analyze"], ["scale"], ["validate"], ["study", "c3", "--quick"],
                                 ["pim", "gemv", "--model", "125m"]])
def test_empty_out_is_refused(workdir, capsys, cmd):
    _refused(capsys, workdir, [*cmd, "--out", ""], "--out is empty")


def test_out_on_a_folder_of_other_files_is_refused(workdir, capsys):
    _refused(capsys, workdir, ["analyze", "--out", "foreign"], "not a c3kit report")
    assert sorted(p.name for p in (workdir / "foreign").iterdir()) == ["notes.txt"]


def test_unwritable_trace_and_calibration_files(workdir, capsys):
    _refused(capsys, workdir, ["overlap", "--pattern", "gemm_rs", "--m", "64", "--n", "64", "--k", "64",
                               "--trace", "regular/t.json"], "--trace")
    _refused(capsys, workdir, ["overlap", "--pattern", "gemm_rs", "--m", "64", "--n", "64", "--k", "64",
                               "--trace", ""], "--trace is empty")
    _refused(capsys, workdir, ["bench", "gemm", "--shapes", "8x8x8", "--out", "regular/g.json"], "--out")


def test_hw_show_too_many_generations(workdir, capsys):
    _refused(capsys, workdir, ["hw", "show", "H200-SXM", "--project", "historical", "--generations", "1000"],
             "generations 1000")


def test_bench_gemm_zero_shape(workdir, capsys):
    _refused(capsys, workdir, ["bench", "gemm", "--shapes", "0x0x0", "--no-splits"], "must be positive")


def test_bench_comm_world_zero(workdir, capsys):
    pytest.importorskip("torch")
    _refused(capsys, workdir, ["bench", "comm", "--world", "0"], "--world 0")
    _refused(capsys, workdir, ["bench", "overlap", "--world", "-1"], "--world -1")


def test_bench_nccl_without_gpus(workdir, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has GPUs")
    _refused(capsys, workdir, ["bench", "comm", "--backend", "nccl"], "nccl")
    _refused(capsys, workdir, ["bench", "overlap", "--backend", "nccl"], "nccl")
    _refused(capsys, workdir, ["bench", "comm", "--backend", "mpi"], "--backend")


@pytest.mark.parametrize("argv, says", [
    (["analyze", "--hw", "A100-SXM", "--dtype", "fp8"], "no FP8"),
    (["analyze", "--fsdp", "--dist-opt"], "--dist-opt"),
    (["analyze", "--gpus", "1000000000000"], "at most"),
    (["analyze", "--dp", "1000000000000", "--tp", "8", "--pp", "1"], "at most"),
    (["scale", "--seq", "1,,2"], "--seq"),
    (["scale", "--rules", ""], "--rules"),
    (["study", "c3", "--gpus", ""], "--gpus"),
    (["study", "ficco", "--gpus", "MI300X,"], "--gpus"),
    (["study", "t3", "--tp", "8,"], "--tp"),
    (["analyze", "--no-such-option"], "No such option"),
    (["analyze", "--tp", "eight"], "--tp"),
    (["analyze", "--model", "Mixtral-8x7B", "--moe-experts", "batched"], "moe_experts"),
    (["analyze", "--model", "Mixtral-8x7B", "--moe-imbalance", "0.5"], "moe_imbalance"),
    (["analyze", "--moe-imbalance", "many"], "--moe-imbalance"),
])
def test_accepted_before_now_refused(workdir, capsys, argv, says):
    _refused(capsys, workdir, argv, says)


def test_nothing_left_in_the_temp_folder_after_a_failed_commit(workdir, capsys, monkeypatch):
    """A failure while moving the report in leaves neither the report nor its scratch folder."""
    import tempfile

    from c3kit import report

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report.os, "replace", boom)
    tmp_before = set(os.listdir(tempfile.gettempdir()))
    with pytest.raises(report.C3kitError, match="nothing written"):
        with report.Report(workdir / "r", "T") as rep:
            rep.text("x")
    assert not (workdir / "r").exists() and not list(workdir.glob(".c3kit-*"))
    assert not [n for n in set(os.listdir(tempfile.gettempdir())) - tmp_before if n.startswith(".c3kit-")]
