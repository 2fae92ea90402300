"""The runtime ops on CPU ranks over gloo (world sizes 2 and 4): every schedule against fp64 references."""

import pytest

pytest.importorskip("torch", reason="the runtime needs PyTorch; CI installs the CPU wheel")

from c3kit.runtime import selftest  # noqa: E402
from c3kit.runtime.launch import run_local  # noqa: E402


def _values(results):
    bad = [r for r in results if not r["ok"]]
    assert not bad, "\n".join(f"{r['type']}: {r['error']}\n{r.get('trace', '')}" for r in bad)
    return [r["value"] for r in results]


@pytest.mark.parametrize("world,cases", [(2, 3), (4, 2)])
def test_every_op_schedule_and_dtype_matches_reference(world, cases):
    vals = _values(run_local(selftest.check_ops, world, "gloo", args=("cpu", "gloo", cases, 1234 + world),
                             timeout_s=30, join_timeout_s=150))
    for v in vals:
        # 3 ops x 4 schedules x 3 dtypes per case
        assert v["checks"] == 3 * 4 * 3 * cases
        assert v["failures"] == [], v["failures"][:5]
    worst = max(err for v in vals for err in v["worst"].values())
    assert worst < selftest.TOLERANCE["bf16"]


def test_shapes_that_do_not_divide_raise_clear_errors():
    for v in _values(run_local(selftest.check_errors, 2, "gloo", timeout_s=30, join_timeout_s=120)):
        assert v == []


def test_hung_peer_ends_in_timeout_error_within_seconds():
    vals = _values(run_local(selftest.hung_peer, 2, "gloo", args=(6.0,), timeout_s=2.0, join_timeout_s=60))
    rank0 = vals[0]
    assert rank0["outcome"].startswith("CommTimeoutError"), rank0
    assert rank0["elapsed_s"] < 10.0
