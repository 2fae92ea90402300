"""The held-out-gap families (fp8_mm, norm_width, decode_attn_small, cp_attention): case lists checked by hand and
as properties, and a quick CPU run of each writing its rows."""

import json

import pytest

pytest.importorskip("torch")

from c3kit.cost.calib_store import op_calibration_path  # noqa: E402
from c3kit.runtime.bench import ops_heldout as oh  # noqa: E402
from c3kit.runtime.bench.ops import FAMILIES, main  # noqa: E402

NEW = ("fp8_mm", "norm_width", "decode_attn_small", "cp_attention")


def test_fp8_mm_cases_are_per_rank_llama_layers_and_small_cubes():
    cases = oh.fp8_mm_cases()
    by_shape = {s: (m, n, k) for m, n, k, s in cases}
    assert len(cases) == 31 and len(by_shape) == 29  # 7 ranks x 4 layers, "cube" x 3
    # hand-checked: 70B at TP 8: (64/8 + 2 x 1) x 128 = 1280 QKV columns; down K = 28672 / 8
    assert by_shape["llama-70b tp8 qkv"][1:] == (1280, 8192)
    assert by_shape["llama-70b tp8 down"][1:] == (8192, 3584)
    assert by_shape["llama-405b tp8 gate_up"][1:] == (13312, 16384)  # 2 x 53248 / 8
    assert by_shape["llama-8b tp1 qkv"] == (4096, 6144, 4096)
    assert [c[:3] for c in cases[-3:]] == [(1024,) * 3, (1536,) * 3, (2048,) * 3]
    assert {m for m, *_ in cases[:-3]} == set(oh.FP8MM_TOKENS)
    assert all(n % 16 == 0 and k % 16 == 0 for _, n, k, _ in cases)  # _scaled_mm needs multiples of 16


def test_norm_width_cases_cover_every_width_before_the_extreme_token_counts():
    cases = oh.norm_width_cases()
    assert len(set(cases)) == len(oh.NORM_WIDTHS) * len(oh.NORM_TOKENS) == 36
    half = cases[:len(oh.NORM_WIDTHS) * 2]
    assert {W for _, W in half} == set(oh.NORM_WIDTHS) and {T for T, _ in half} == {8192, 16384}
    assert {5120, 8192} <= set(oh.NORM_WIDTHS)


def test_decode_small_cases_are_every_combination_and_a_short_prefix_covers_kv_and_batch():
    cases = oh.decode_small_cases()
    assert sorted(cases) == sorted((kv, b, h) for kv in oh.DECODE_SMALL_KV for b in oh.DECODE_SMALL_BATCH
                                   for h in oh.DECODE_SMALL_HEADS)
    assert {kv for kv, _, _ in cases[:20]} == set(oh.DECODE_SMALL_KV)
    assert {b for _, b, _ in cases[:30]} == set(oh.DECODE_SMALL_BATCH)
    assert max(oh.DECODE_SMALL_KV) == 2048 and min(oh.DECODE_SMALL_KV) == 128


def test_cp_roles_are_the_ring_shapes_of_one_chunk():
    assert oh.cp_roles(8) == [("diag", 16, 16, 1), ("kv_half", 16, 8, 0), ("q_half", 8, 16, 0),
                              ("full", 16, 16, 0), ("chunk", 8, 8, 0), ("chunk_diag", 8, 8, 1)]


def test_cp_cases_name_each_sequence_and_degree_once_and_stay_in_chunk_bounds():
    cases = oh.cp_cases()
    assert len(cases) == 5 * 6  # chunks 4k .. 64k, six roles each
    runs = [r for _, _, _, _, rr in cases[::6] for r in rr.split()]
    assert sorted(runs) == sorted(f"{S // 1024}k/cp{cp}" for S in oh.CP_SEQS for cp in oh.CP_DEGREES)
    assert cases[12][4] == "64k/cp2 128k/cp4 256k/cp8"  # chunk 16384 = S / (2 cp) for all three
    for role, q, kv, causal, rr in cases:
        for run in rr.split():
            S, cp = int(run.split("k/cp")[0]) * 1024, int(run.split("k/cp")[1])
            c = S // (2 * cp)
            assert {q, kv} <= {c, 2 * c} and (causal == 1) == (role in ("diag", "chunk_diag"))
    assert [q for role, q, *_ in cases if role == "chunk"] == [4096, 8192, 16384, 32768, 65536]  # smallest first


def test_new_families_are_registered():
    assert set(NEW) <= set(FAMILIES)


@pytest.mark.parametrize("fam, cols, key, keys", [
    ("fp8_mm", oh.FP8MM_COLUMNS, ("kind", "mode"), {("bf16_mm", "host")}),  # no FP8 kernels on the CPU
    ("norm_width", oh.NORM_WIDTH_COLUMNS, ("op", "pass"),
     {(op, p) for op in ("rmsnorm", "layernorm") for p in ("fwd", "bwd")}),
    ("decode_attn_small", oh.DECODE_SMALL_COLUMNS, ("backend", "pass"), {("default", "decode")}),
    ("cp_attention", oh.CP_COLUMNS, ("pass", "mode"), {("fwd", "host"), ("bwd", "host")}),
])
def test_quick_run_writes_the_family_rows(tmp_path, fam, cols, key, keys):
    assert main(["--out", str(tmp_path), "--quick", "--only", fam]) == 0
    doc = json.loads(op_calibration_path("h200-sxm", fam, tmp_path).read_text())
    assert doc["kind"] == "ops-" + fam and doc["columns"] == cols
    rows = [dict(zip(cols, r)) for r in doc["rows"]]
    assert {tuple(r[c] for c in key) for r in rows} == keys
    assert all(r["time_s"] > 0 for r in rows)


def test_time_op_on_the_cpu_times_with_the_host_clock():
    import torch

    t, how = oh.time_op(lambda: None, torch.device("cpu"))
    assert how == "host" and t >= 0


def test_bmm_attn_cases_pair_the_score_and_value_gemms():
    cases = oh.bmm_attn_cases()
    qk = {(g, m, hd) for kind, g, m, n, k, hd in cases if kind == "qk" and m == n and k == hd}
    pv = {(g, m, hd) for kind, g, m, n, k, hd in cases if kind == "pv" and n == hd and k == m}
    assert qk == pv and len(cases) == 2 * len(qk) == 76  # 5 seqs x 4 heads x 2 head dims, 2 over 2^31 dropped
    assert ("qk", 64, 8192, 8192, 128, 128) not in cases and ("qk", 32, 8192, 8192, 128, 128) in cases


def test_bmm_attn_quick_family_writes_its_rows(tmp_path):
    assert "bmm_attn" in FAMILIES
    assert main(["--out", str(tmp_path), "--quick", "--only", "bmm_attn"]) == 0
    doc = json.loads(op_calibration_path("h200-sxm", "bmm_attn", tmp_path).read_text())
    assert doc["columns"] == oh.BMM_ATTN_COLUMNS and [r[0] for r in doc["rows"]] == ["qk", "pv"]
    assert all(r[-1] > 0 for r in doc["rows"])
