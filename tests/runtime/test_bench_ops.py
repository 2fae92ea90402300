"""The op benchmark runs on a CPU with --quick and writes one calibration file per family through the store."""

import json

import pytest

pytest.importorskip("torch")

from c3kit.cost.calib_store import op_calibration_path  # noqa: E402
from c3kit.runtime.bench.ops import main  # noqa: E402


def test_quick_families_write_their_files(tmp_path):
    assert main(["--out", str(tmp_path), "--quick", "--only", "floor,gemm,decode"]) == 0
    for fam in ("floor", "gemm", "decode"):
        doc = json.loads(op_calibration_path("h200-sxm", fam, tmp_path).read_text())
        assert doc["kind"] == "ops-" + fam and doc["rows"]
        assert all(len(r) == len(doc["columns"]) for r in doc["rows"])
        assert {"machine", "torch", "date", "command"} <= set(doc["meta"])


def test_unknown_family_is_refused(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "new"), "--only", "floor,nope"]) == 2
    assert "unknown family 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
