"""The moe_host family: a Megatron-ordered MoE block whose host issue, GPU and eager wall times it records."""

import json

import pytest

torch = pytest.importorskip("torch")

from c3kit.cost.calib_store import op_calibration_path  # noqa: E402
from c3kit.runtime.bench.ops import FAMILIES, main  # noqa: E402
from c3kit.runtime.bench.ops_moe import MOE_HOST_COLUMNS, MoEBlock  # noqa: E402


def _reference(block, x):
    """Every token through its top-k experts one by one, weighted by its router probabilities."""
    scores = torch.softmax((x @ block.wr.t()).float(), dim=-1)
    probs, ids = torch.topk(scores, block.k, dim=-1)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(block.k):
            e = int(ids[t, j]) % block.el
            g, u = (x[t] @ block.w1[e].t()).chunk(2)
            out[t] += probs[t, j].to(x.dtype) * ((torch.nn.functional.silu(g) * u) @ block.w2[e].t())
    return out


@pytest.mark.parametrize("el", [8, 2])
def test_block_forward_matches_the_per_token_loop(el):
    torch.manual_seed(0)
    block = MoEBlock(torch, 16, 12, 8, el, 2, torch.device("cpu"), grouped=False)
    block.wr.data, block.w1.data, block.w2.data = (w.data.float() for w in (block.wr, block.w1, block.w2))
    x = torch.randn(10, 16)
    out, aux = block.forward(x)
    assert torch.allclose(out, _reference(block, x), atol=1e-5)
    assert float(aux.detach()) > 0


def test_counts_and_host_splits_agree():
    block = MoEBlock(torch, 16, 12, 8, 4, 2, torch.device("cpu"), grouped=False)
    x = torch.randn(32, 16, dtype=torch.bfloat16)
    _, local, counts, _ = block.route(x)
    assert counts.tolist() == torch.bincount(local, minlength=4).tolist() and sum(counts.tolist()) == 64


def test_attention_block_keeps_the_shape_and_is_causal():
    from c3kit.runtime.bench.ops_moe import AttnBlock

    torch.manual_seed(0)
    a = AttnBlock(torch, 16, 4, 2, 8, 6, torch.device("cpu"))
    a.wqkv.data, a.wo.data, a.n1.data, a.n2.data = (w.data.float() for w in (a.wqkv, a.wo, a.n1, a.n2))
    a.cos, a.sin = a.cos.float(), a.sin.float()
    x = torch.randn(6, 16)
    h, n = a.forward(x)
    assert h.shape == n.shape == x.shape
    y = x.clone()
    y[-1] += 1.0  # the last token changes nothing before it
    assert torch.allclose(a.forward(y)[0][:-1], h[:-1], atol=1e-5)


def test_quick_run_writes_sync_fwd_bwd_rows(tmp_path):
    assert "moe_host" in FAMILIES
    assert main(["--out", str(tmp_path), "--quick", "--only", "moe_host"]) == 0
    doc = json.loads(op_calibration_path("h200-sxm", "moe_host", tmp_path).read_text())
    assert doc["kind"] == "ops-moe_host" and doc["columns"] == MOE_HOST_COLUMNS
    rows = [dict(zip(doc["columns"], r)) for r in doc["rows"]]
    passes = ("sync", "fwd", "bwd", "layer_fwd", "layer_bwd")
    assert {(r["ep"], r["pass"]) for r in rows} == {(e, p) for e in (1, 4) for p in passes}
    assert all(r["wall_s"] > 0 for r in rows)
    assert all(r["host_s"] > 0 and r["gpu_s"] > 0 for r in rows if r["pass"] != "sync")
    assert {r["local_experts"] for r in rows} == {8, 2}
