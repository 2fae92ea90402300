"""The copy-engine schedules' buffer layout, offsets and step order, on CPU ranks.

With C3KIT_EMULATE_SYMM_MEM=1 the symmetric-memory buffer is a shared-memory file per rank that
every peer maps, and its barrier a gloo barrier; the copy_ pulls then run the same code as on GPUs.
"""

import os

import pytest

pytest.importorskip("torch", reason="the runtime needs PyTorch; CI installs the CPU wheel")

from c3kit.runtime import selftest  # noqa: E402
from c3kit.runtime.comm import EMULATE_ENV  # noqa: E402
from c3kit.runtime.launch import run_local  # noqa: E402


@pytest.fixture
def emulate(monkeypatch):
    monkeypatch.setenv(EMULATE_ENV, "1")  # inherited by the spawned ranks


@pytest.mark.parametrize("world", [2, 3])
def test_copy_engine_ops_match_reference(emulate, world):
    res = run_local(selftest.check_ops, world, "gloo", args=("cpu", "copy-engine", 2, 99 + world), timeout_s=30,
                    join_timeout_s=120)
    assert all(r["ok"] for r in res), [r.get("error") for r in res]
    for r in res:
        v = r["value"]
        assert v["checks"] == 3 * 4 * 3 * 2  # AG, RS, MoE x schedules x dtypes x cases
        assert v["failures"] == [], v["failures"][:3]


def test_copy_engine_shapes_that_do_not_divide_raise_clear_errors(emulate):
    res = run_local(selftest.check_errors, 2, "gloo", args=("copy-engine",), timeout_s=30, join_timeout_s=120)
    assert [r.get("value") for r in res] == [[], []], [r.get("error") or r.get("value") for r in res]


def test_copy_engine_collectives_of_bench_comm_match_gloo(emulate):
    res = run_local(selftest.check_ce_collectives, 2, "gloo", timeout_s=30, join_timeout_s=120)
    assert [r.get("value") for r in res] == [[], []], [r.get("error") for r in res]


def test_without_emulation_copy_engine_needs_cuda():
    assert os.environ.get(EMULATE_ENV) != "1"
    res = run_local(selftest.check_ops, 2, "gloo", args=("cpu", "copy-engine", 1, 1, ("fp32",), ("serial",)),
                    timeout_s=30, join_timeout_s=120)
    fails = res[0]["value"]["failures"]
    assert fails and all("CUDA" in f["error"] for f in fails)
