"""The documented torchrun command (docs/runtime.md) runs the runtime ops on 2 CPU processes over gloo."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_torchrun_two_cpu_ranks():
    pytest.importorskip("torch")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(ROOT / "examples" / "runtime_torchrun.py")]
    doc = (ROOT / "docs" / "runtime.md").read_text()
    assert "torchrun --standalone --nproc-per-node 2 examples/runtime_torchrun.py" in doc
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("2 ranks, gloo")]
    assert line and "0 failures" in line[0] and "ranks with errors: 0" in line[0]
