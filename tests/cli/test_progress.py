"""Progress: long commands drive a progress bar from the lower layers' progress callbacks (done, total)."""

import contextlib
import json

import pytest

from c3kit.cli.main import main


class Recorder:
    """Stands in for cli.common.progress_bar and keeps every update."""

    def __init__(self):
        self.updates = []
        self.enabled = []

    @contextlib.contextmanager
    def __call__(self, what, enabled=True):
        self.enabled.append(enabled)
        yield lambda done, total=None, label=None: self.updates.append((done, total))


def _finished(rec: Recorder) -> None:
    assert rec.updates, "no progress reported"
    done = [d for d, _ in rec.updates]
    assert done == sorted(done), "progress went backwards"
    last_done, last_total = rec.updates[-1]
    assert last_total and last_done == last_total


@pytest.fixture
def rec(monkeypatch):
    r = Recorder()
    for mod in ("validate_cmd", "overlap_cmd", "study_cmd", "scale_cmd", "bench_cmd"):
        monkeypatch.setattr(f"c3kit.cli.{mod}.progress_bar", r)
    return r


def test_validate_reports_every_run(rec, tmp_path, capsys):
    from c3kit.studies.validation import load_runs

    assert main(["validate", "--out", str(tmp_path / "v")]) == 0
    _finished(rec)
    assert rec.updates[-1] == (len(load_runs()), len(load_runs())) and rec.enabled == [True]


def test_overlap_eval_reports_every_scenario(rec, capsys):
    assert main(["overlap", "eval", "--hw", "H200", "--models", "Llama-3-8B,Mixtral-8x7B", "--tokens", "1024",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    _finished(rec)
    assert rec.updates[-1][1] == doc["design"]["scenarios"] + doc["held-out"]["scenarios"]
    assert rec.enabled == [False]  # --json: no bar


def test_scale_reports_scenarios(rec, tmp_path, capsys):
    assert main(["scale", "--no-paper", "--hidden", "4096", "--layers", "32", "--seq", "2048", "--batch", "512",
                 "--rules", "historical", "--generations", "0", "--tp", "8", "--pp", "1", "--dp", "8",
                 "--out", str(tmp_path / "s")]) == 0
    _finished(rec)


def test_ficco_reports_every_scenario(monkeypatch):
    from c3kit.studies import ficco

    small = ficco._scenarios(("H200-SXM",), True)[:3]
    monkeypatch.setattr(ficco, "_scenarios", lambda gpus, quick: small)
    r = Recorder()
    with r("x") as update:
        ficco.run(("H200-SXM",), quick=True, progress=update)
    assert r.updates == [(1, 3), (2, 3), (3, 3)]


def test_study_all_reports_each_study(rec, monkeypatch, tmp_path, capsys):
    from c3kit.studies import all_studies

    def fake_run_all(progress=None, quick=False):
        for i, name in enumerate(all_studies.STUDIES):
            progress(name, i, len(all_studies.STUDIES))
        progress("done", len(all_studies.STUDIES), len(all_studies.STUDIES))
        return []

    monkeypatch.setattr(all_studies, "run_all", fake_run_all)
    assert main(["study", "all", "--out", str(tmp_path / "a")]) == 0
    _finished(rec)


def test_bench_overlap_relays_rank0_progress(rec, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "o.json"
    assert main(["bench", "overlap", "--world", "2", "--backend", "gloo", "--models", "tiny", "--tokens", "32",
                 "--iters", "1", "--out", str(out), "--json"]) == 0
    _finished(rec)
    assert rec.updates[-1] == (3, 3)  # tiny has experts: ag, rs and moe


def test_no_bar_on_a_pipe(capsys):
    """stderr is not a terminal under pytest: the real bar draws nothing."""
    from c3kit.cli.common import progress_bar

    with progress_bar("x") as update:
        update(1, 2)
        update(2, 2)
    assert capsys.readouterr().err == ""


def test_bench_gemm_quick_is_small_and_fp32_on_cpu(capsys):
    assert main(["bench", "gemm", "--quick", "--plan", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.split()[0] == "fp32" for line in lines[:-1])
    total = int(lines[-1].split()[1])
    assert 0 < total <= 100
    assert main(["bench", "gemm", "--quick", "--plan", "--dtypes", "bf16"]) == 0
    assert int(capsys.readouterr().out.splitlines()[-1].split()[1]) <= 100
