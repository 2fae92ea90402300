"""`c3kit study ...`: reports written all-or-nothing, one JSON document, bad input -> exit 2."""

import json

from c3kit.cli.main import main


def test_dma_report_and_json(tmp_path, capsys):
    out = tmp_path / "dma"
    assert main(["study", "dma", "--quick", "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["study"] == "dma" and doc["summary"]
    assert {"report.md", "dma_summary.csv", "dma_share.png"} <= {p.name for p in out.iterdir()}


def test_t3_table(tmp_path, capsys):
    assert main(["study", "t3", "--quick", "--out", str(tmp_path / "t3")]) == 0
    assert "T3-MCA" in capsys.readouterr().out


def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    for args in (["dma", "--ranks", "1"], ["dma", "--min-size", "lots"], ["dma", "--set", "launch"],
                 ["dma", "--set", "bogus=1"], ["t3", "--tp", "x"], ["t3", "--models", "nope"],
                 ["t3", "--cost-model", "magic"]):
        out = tmp_path / "o"
        assert main(["study", *args, "--out", str(out)]) == 2, args
        assert not out.exists()
        err = capsys.readouterr().err
        assert err.startswith("error:") and err.count("\n") == 1


def test_c3_ficco_all_quick(tmp_path, capsys):
    assert main(["study", "c3", "--quick", "--gpus", "MI300X", "--out", str(tmp_path / "c3")]) == 0
    assert (tmp_path / "c3" / "c3_fraction.png").is_file()
    assert main(["study", "ficco", "--quick", "--out", str(tmp_path / "f"), "--json"]) == 0
    capsys.readouterr()
    assert main(["study", "all", "--quick", "--out", str(tmp_path / "all"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["study"] for s in doc["studies"]] == ["dma", "t3", "c3", "ficco"]
    names = {p.name for p in (tmp_path / "all").iterdir()}
    assert {"dma_share.png", "t3_speedup.png", "c3_fraction.png", "ficco_speedup.png", "report.md"} <= names


def test_c3_ficco_bad_gpu_exit_2(tmp_path):
    for cmd in ("c3", "ficco"):
        assert main(["study", cmd, "--gpus", "nope", "--out", str(tmp_path / cmd)]) == 2
        assert not (tmp_path / cmd).exists()
