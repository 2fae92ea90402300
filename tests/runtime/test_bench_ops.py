"""The op benchmark runs on a CPU with --quick and writes one calibration file per family through the store."""

import json

import pytest

pytest.importorskip("torch")

from c3kit.cost.calib_store import op_calibration_path  # noqa: E402
from c3kit.runtime.bench.ops import main  # noqa: E402


def test_quick_families_write_their_files(tmp_path):
    assert main(["--out", str(tmp_path), "--quick", "--only", "floor,gemm,decode,decode_attention"]) == 0
    for fam in ("floor", "gemm", "decode", "decode_attention"):
        doc = json.loads(op_calibration_path("h200-sxm", fam, tmp_path).read_text())
        assert doc["kind"] == "ops-" + fam and doc["rows"]
        assert all(len(r) == len(doc["columns"]) for r in doc["rows"])
        assert {"machine", "torch", "date", "command"} <= set(doc["meta"])


def test_unknown_family_is_refused(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "new"), "--only", "floor,nope"]) == 2
    assert "unknown family 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_recipe_families_write_their_rows(tmp_path):
    assert main(["--out", str(tmp_path), "--quick", "--only", "fp8,moe,attn_backends,eager_ops,optimizer"]) == 0
    kinds = {}
    for fam in ("fp8", "moe", "attn_backends", "eager_ops", "optimizer"):
        doc = json.loads(op_calibration_path("h200-sxm", fam, tmp_path).read_text())
        assert all(len(r) == len(doc["columns"]) for r in doc["rows"])
        assert all(r[-1] > 0 for r in doc["rows"])
        kinds[fam] = {r[0] for r in doc["rows"]}
    assert {"bf16_mm", "cast_tensorwise", "cast_transpose", "amax"} <= kinds["fp8"]
    assert {"router_topk", "permute", "unpermute"} <= kinds["moe"]
    assert kinds["eager_ops"] == {"rmsnorm_eager", "rope_complex"}
    assert kinds["optimizer"] == {"adamw_fused", "clip_grad_norm"}
    assert kinds["attn_backends"] == {"unfused"}  # the CPU runs the unfused attention only


def test_unfused_attention_matches_sdpa():
    import torch

    from c3kit.runtime.bench.ops_recipes import _unfused

    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(_unfused(torch, q, k, v, 8 ** -0.5, True), ref, atol=1e-5)


def test_serve_loop_quick_writes_iterations(tmp_path):
    from c3kit.runtime.bench.serve_loop import COLUMNS
    from c3kit.runtime.bench.serve_loop import main as serve_main

    assert serve_main(["--out", str(tmp_path), "--quick"]) == 0
    from c3kit.cost.calib_store import serve_loop_path

    doc = json.loads(serve_loop_path("h200-sxm", tmp_path).read_text())
    assert doc["columns"] == COLUMNS and doc["kind"] == "serve-loop"
    phases = {r[COLUMNS.index("phase")] for r in doc["rows"]}
    assert phases == {"decode", "prefill"}
    assert all(r[-1] > 0 for r in doc["rows"])


def test_train_step_quick_writes_both_parts(tmp_path):
    from c3kit.cost.calib_store import measured_run_path
    from c3kit.runtime.bench.train_step import COLUMNS
    from c3kit.runtime.bench.train_step import main as train_main

    assert train_main(["--out", str(tmp_path), "--quick"]) == 0
    doc = json.loads(measured_run_path("h200-sxm", "train-step", tmp_path).read_text())
    assert doc["columns"] == COLUMNS and doc["kind"] == "train-step"
    parts = {(r[COLUMNS.index("impl")], r[COLUMNS.index("part")]) for r in doc["rows"]}
    assert parts == {("fused", "fwd_bwd"), ("eager", "fwd_bwd"), ("fused_adamw", "optimizer")}


def test_eager_rope_equals_rotate_half_on_paired_layout():
    import torch

    from c3kit.runtime.bench.train_step import _rope

    # complex RoPE rotates adjacent pairs; rotate-half rotates the two halves: same angles, permuted layout
    s, hd = 5, 8
    ang = torch.outer(torch.arange(s, dtype=torch.float32), torch.rand(hd // 2))
    x = torch.randn(1, s, 1, hd)
    got = _rope(torch, x, torch.polar(torch.ones_like(ang), ang)[:, None, :], "eager")
    halves = torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)
    emb = torch.cat((ang, ang), dim=-1)
    ref = _rope(torch, halves, (emb.cos()[:, None, :], emb.sin()[:, None, :]), "fused")
    assert torch.allclose(torch.cat((got[..., 0::2], got[..., 1::2]), dim=-1), ref, atol=1e-5)


def test_decode_kernel_and_optimizer_mix_families_write_their_rows(tmp_path):
    assert main(["--out", str(tmp_path), "--quick", "--only", "decode_kernels,optimizer_mix"]) == 0
    dec = json.loads(op_calibration_path("h200-sxm", "decode_kernels", tmp_path).read_text())
    assert {r[0] for r in dec["rows"]} == {"kv_write", "argmax", "embedding", "seq_mix", "seq_sum"}
    assert all(len(r) == len(dec["columns"]) and r[-1] > 0 for r in dec["rows"])
    opt = json.loads(op_calibration_path("h200-sxm", "optimizer_mix", tmp_path).read_text())
    labels = {r[1] for r in opt["rows"]}
    assert {"mix", "one"} <= labels and any(lbl.startswith("model:") for lbl in labels)
    # the same parameter count in every variant of one model
    assert len({r[3] for r in opt["rows"]}) == 1


def test_moe_train_family_times_both_expert_gemms_forward_and_backward(tmp_path):
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch build has no grouped GEMM")
    assert main(["--out", str(tmp_path), "--quick", "--only", "moe_train"]) == 0
    doc = json.loads(op_calibration_path("h200-sxm", "moe_train", tmp_path).read_text())
    got = {(r[0], r[8]) for r in doc["rows"]}
    assert got == {(k, p) for k in ("gate_up", "down") for p in ("fwd", "fwd_bwd")}
    assert all(r[-1] > 0 and len(r) == len(doc["columns"]) for r in doc["rows"])


def test_moe_grad_family_times_the_backward_parts_at_both_routings(tmp_path):
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch build has no grouped GEMM")
    assert main(["--out", str(tmp_path), "--quick", "--only", "moe_grad"]) == 0
    doc = json.loads(op_calibration_path("h200-sxm", "moe_grad", tmp_path).read_text())
    got = {(r[0], r[8], r[9]) for r in doc["rows"]}
    assert got == {(k, rt, p) for k in ("gate_up", "down") for rt in ("random", "balanced")
                   for p in ("fwd", "fwd_dgrad", "fwd_wgrad", "fwd_bwd", "grad_accumulate")}
    assert all(r[-1] > 0 and len(r) == len(doc["columns"]) for r in doc["rows"])


def test_act_chunked_family_times_strided_and_contiguous_swiglu(tmp_path):
    assert main(["--out", str(tmp_path), "--quick", "--only", "act_chunked"]) == 0
    doc = json.loads(op_calibration_path("h200-sxm", "act_chunked", tmp_path).read_text())
    got = {(r[0], r[1]) for r in doc["rows"]}
    assert got == {("swiglu_chunked", "fwd"), ("swiglu_chunked", "bwd"), ("swiglu", "fwd")}
    assert all(r[-1] > 0 and len(r) == len(doc["columns"]) for r in doc["rows"])



def test_decode_profile_writes_per_kernel_rows_per_step(tmp_path, load_benchmark):
    mod = load_benchmark("profile_decode_step")
    assert mod.main(["--out", str(tmp_path), "--quick", "--layers"]) == 0
    doc = json.loads((tmp_path / "h200-sxm-decode-profile-layers.json").read_text())
    assert doc["kind"] == "decode-profile-layers" and doc["rows"]
    # per step: the captured repeats are divided out (CPU events of LAYER_REPEAT steps counted once per step)
    assert all(r[5] > 0 and r[0].startswith("layer:") for r in doc["rows"])


def test_decode_cold_and_optimizer_burst_families(tmp_path):
    assert main(["--out", str(tmp_path), "--quick", "--only", "decode_cold,optimizer_burst"]) == 0
    cold = json.loads(op_calibration_path("h200-sxm", "decode_cold", tmp_path).read_text())
    # no L2 to empty and no CUDA graphs on the CPU: the family writes its columns and no rows there
    assert cold["columns"][:2] == ["op", "batch"] and cold["rows"] == []
    burst = json.loads(op_calibration_path("h200-sxm", "optimizer_burst", tmp_path).read_text())
    assert [r[1] for r in burst["rows"]] == ["after_burst", "after_idle", "steady"]
    assert all(r[0] == "adamw_fused" and r[-1] > 0 for r in burst["rows"])


def test_decode_fresh_and_optimizer_setup_families(tmp_path):
    assert main(["--out", str(tmp_path), "--quick", "--only", "decode_fresh,optimizer_setup"]) == 0
    fresh = json.loads(op_calibration_path("h200-sxm", "decode_fresh", tmp_path).read_text())
    assert fresh["columns"][:2] == ["op", "batch"] and fresh["rows"] == []
    setup = json.loads(op_calibration_path("h200-sxm", "optimizer_setup", tmp_path).read_text())
    assert [r[1] for r in setup["rows"]] == ["train_setup", "after_fwd_bwd", "random_grads", "fresh_zeros"]
    # one parameter count for every variant of the model
    assert len({r[3] for r in setup["rows"]}) == 1 and all(r[-1] > 0 for r in setup["rows"])


def test_gemm_pair_family_writes_alone_serial_and_concurrent_times(tmp_path):
    assert main(["--out", str(tmp_path), "--quick", "--only", "gemm_pair"]) == 0
    doc = json.loads(op_calibration_path("h200-sxm", "gemm_pair", tmp_path).read_text())
    rows = [dict(zip(doc["columns"], r)) for r in doc["rows"]]
    assert [r["kind"] for r in rows] == ["gemm+gemm", "gemm+add", "gemm+copy"]
    assert rows[0]["b_m"] == rows[0]["a_m"] > 0 and rows[1]["b_bytes"] > 0 and rows[1]["b_m"] == 0
    assert all(r[t] > 0 for r in rows for t in ("a_s", "b_s", "serial_s", "concurrent_s"))


def test_gemm_under_comm_family_writes_alone_and_under_times(tmp_path):
    from c3kit.runtime.bench.ops_undercomm import COLUMNS

    assert main(["--out", str(tmp_path), "--quick", "--only", "gemm_under_comm"]) == 0
    doc = json.loads(op_calibration_path("h200-sxm", "gemm_under_comm", tmp_path).read_text())
    assert doc["columns"] == COLUMNS and doc["rows"]
    for r in doc["rows"]:
        row = dict(zip(COLUMNS, r))
        assert row["comm"] in {"sm_copy", "ce_d2d", "h2d"} and 0 < row["duty"] <= 1
        assert row["gemm_alone_s"] > 0 and row["gemm_under_s"] > 0 and row["copy_alone_Bps"] > 0


def _family_rows(tmp_path, fam):
    """Run one family quick on the CPU; (columns, rows as dicts) of its file."""
    assert main(["--out", str(tmp_path), "--quick", "--only", fam]) == 0
    doc = json.loads(op_calibration_path("h200-sxm", fam, tmp_path).read_text())
    assert doc["kind"] == "ops-" + fam
    assert all(len(r) == len(doc["columns"]) for r in doc["rows"])
    return doc["columns"], [dict(zip(doc["columns"], r)) for r in doc["rows"]]


def test_attn_graph_family_times_forward_and_backward(tmp_path):
    from c3kit.runtime.bench.ops_graphed import ATTN_COLUMNS

    cols, rows = _family_rows(tmp_path, "attn_graph")
    assert cols == ATTN_COLUMNS
    assert {r["pass"] for r in rows} == {"fwd", "bwd"}
    assert all(r["mode"] == "host" and r["time_s"] > 0 and r["kv_heads"] < r["heads"] for r in rows)


@pytest.mark.parametrize("family", ["attn_graph_cudnn", "attn_graph_efficient"])
def test_attn_graph_backend_families_write_attn_graph_rows(tmp_path, family):
    from c3kit.runtime.bench.ops_graphed import ATTN_COLUMNS

    cols, rows = _family_rows(tmp_path, family)  # on the CPU the backend is PyTorch's default
    assert cols == ATTN_COLUMNS and {r["pass"] for r in rows} == {"fwd", "bwd"}


def test_norm_bwd_family_times_every_part_of_both_norms(tmp_path):
    from c3kit.runtime.bench.ops_graphed import NORM_COLUMNS

    cols, rows = _family_rows(tmp_path, "norm_bwd")
    assert cols == NORM_COLUMNS
    assert {(r["norm"], r["part"]) for r in rows} == {
        (n, p) for n in ("rmsnorm", "layernorm") for p in ("fwd", "bwd", "bwd_dx", "wgrad_reduce")}
    assert all(r["time_s"] > 0 for r in rows)


def test_grouped_wgrad_family_times_the_mm_loop(tmp_path):
    from c3kit.runtime.bench.ops_graphed import WGRAD_COLUMNS

    cols, rows = _family_rows(tmp_path, "grouped_wgrad")
    assert cols == WGRAD_COLUMNS
    assert [r["impl"] for r in rows] == ["mm_loop"]  # the grouped mm runs on CUDA only
    r = rows[0]
    assert r["flops"] == 2.0 * r["experts"] * r["tokens_per_expert"] * r["hidden"] * r["ffn"] and r["time_s"] > 0


def test_fp8_cast_parts_family_times_each_cast_kernel(tmp_path):
    import torch

    from c3kit.runtime.bench.ops_graphed import FP8_COLUMNS

    cols, rows = _family_rows(tmp_path, "fp8_cast_parts")
    assert cols == FP8_COLUMNS
    if not hasattr(torch, "float8_e4m3fn"):
        assert rows == []
        return
    assert {"amax", "scale", "cast", "transpose_cast"} <= {r["part"] for r in rows}
    assert all(r["time_s"] > 0 for r in rows)


def test_fp8_cast_parts_scale_maps_amax_to_the_e4m3_limit():
    import torch

    from c3kit.runtime.bench.ops_graphed import E4M3_MAX

    x = torch.tensor([[-3.0, 1.5], [0.5, 2.0]], dtype=torch.bfloat16)
    scale = E4M3_MAX / x.abs().max().float()
    assert float((x * scale).abs().max()) == E4M3_MAX == 448.0


def test_copy_rate_counts_only_chunks_that_end_inside_the_gemm_window():
    import math

    from c3kit.runtime.bench.ops_undercomm import _rate

    ends_ms = [0.0, 1.0, 2.0, 4.0]
    assert _rate(ends_ms, 1000) == 3 * 1000 / 4e-3
    assert _rate(ends_ms, 1000, lo=0.5, hi=2.5) == 1000 / 1e-3  # chunks ending at 1 and 2 ms
    assert math.isnan(_rate(ends_ms, 1000, lo=2.5, hi=3.5))  # fewer than two ends inside: no rate


def test_moe_fp8_host_family_casts_all_rows_and_per_expert(tmp_path):
    from c3kit.runtime.bench.ops_moe import MOE_FP8_HOST_COLUMNS

    assert main(["--out", str(tmp_path), "--quick", "--only", "moe_fp8_host"]) == 0
    doc = json.loads(op_calibration_path("h200-sxm", "moe_fp8_host", tmp_path).read_text())
    assert doc["kind"] == "ops-moe_fp8_host" and doc["columns"] == MOE_FP8_HOST_COLUMNS
    rows = [dict(zip(doc["columns"], r)) for r in doc["rows"]]
    # on the CPU: no FP8 GEMM, the two cast variants of the tiny case (16 tokens x top-2 over 2 local experts)
    assert [r["what"] for r in rows] == ["cast_one", "cast_per_expert"]
    assert all(r["local_experts"] == 2 and r["tokens"] == 16 and r["host_s"] > 0 and r["wall_s"] > 0 for r in rows)


def test_current_cast_scales_the_amax_to_the_fp8_maximum():
    torch = pytest.importorskip("torch")
    from c3kit.runtime.bench.ops_moe import FP8_MAX, current_cast

    x = torch.tensor([[1.0, -2.0], [0.5, 4.0]], dtype=torch.bfloat16)
    q, qt, inv = current_cast(torch, x, torch.float8_e4m3fn)
    assert float(inv) == pytest.approx(4.0 / FP8_MAX, rel=1e-6) and q.shape == (2, 2) and qt.shape == (2, 2)
    assert float(q.float().abs().max()) == FP8_MAX  # the amax element lands on 448 exactly
    assert torch.equal(qt.float(), q.float().t())


def test_memory_graph_family_times_both_passes_of_each_op(tmp_path):
    from c3kit.runtime.bench.ops_graphed import MEMGRAPH_COLUMNS

    cols, rows = _family_rows(tmp_path, "memory_graph")
    assert cols == MEMGRAPH_COLUMNS
    got = {(r["op"], r["pass"]) for r in rows}
    assert got == {("residual_add", "fwd"), *((op, ps) for op in ("gelu", "swiglu", "rmsnorm", "layernorm")
                                              for ps in ("fwd", "bwd"))}
    e = 64 * 256 * 2
    assert {r["op"]: r["bytes"] for r in rows if r["pass"] == "bwd"}["swiglu"] == 5 * e
    assert all(r["time_s"] > 0 for r in rows)


def test_l2_reuse_family_times_each_consumer_after_each_producer(tmp_path):
    from c3kit.runtime.bench.ops_graphed import L2REUSE_COLUMNS

    cols, rows = _family_rows(tmp_path, "l2_reuse")
    assert cols == L2REUSE_COLUMNS
    assert {(r["op"], r["producer"]) for r in rows} == {(op, p) for op in ("residual_add", "rmsnorm")
                                                        for p in ("gemm", "copy", "evict")}
    assert all(r["time_s"] == pytest.approx(r["pair_s"] - r["producer_s"]) for r in rows)



def test_steady_ops_family_times_every_case_burst_then_steady(tmp_path):
    from c3kit.runtime.bench.ops_steady import STEADY_COLUMNS, steady_cases

    cols, rows = _family_rows(tmp_path, "steady_ops")
    assert cols == STEADY_COLUMNS
    assert [r["mode"] for r in rows] == ["burst", "steady"] * len(steady_cases(True))
    assert {r["op"] for r in rows} == {"attention", "gemm", "rmsnorm", "block"}
    assert all(r["time_s"] > 0 for r in rows)
    assert all(r["hold_s"] == (0.0 if r["mode"] == "burst" else 0.01) for r in rows)


def test_steady_ops_full_case_list_pairs_each_attention_pass_and_keeps_the_reference_gemm():
    from c3kit.runtime.bench.ops_steady import steady_cases

    cases = steady_cases(False)
    assert cases[0] == ("gemm", "", "fwd", 8192, 0, 0, 0, 0, 8192)
    attn = [c for c in cases if c[0] == "attention"]
    assert len(attn) == 14 and {c[2] for c in attn} == {"fwd", "bwd"}
    assert all(c[3] >= c[4] for c in attn)  # at least one full sequence per case
