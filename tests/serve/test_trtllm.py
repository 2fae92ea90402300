"""trtllm-bench's default scheduler limits: hand-checked heuristic values, rounding invariants, the dataset's rows."""

import math
from importlib import resources

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from c3kit.serve.trtllm import bench_limits, finetune
from c3kit.serve.workload import ServeError
from c3kit.workload.model import get_model


def test_finetune_by_hand():
    # 3828 KV requests at 128/128: batch 256-rounded 3840; tokens 7656 -> 512-rounded 7680
    assert finetune(3828.4, 128, 128) == (3840, 7680)
    # 45 requests at 20000/2000: batch at least 64; tokens 45 * 11 = 495 -> at least 2048
    assert finetune(45.0, 20000, 2000) == (64, 2048)
    # caps: 4096 requests, 32768 tokens
    assert finetune(1e6, 2048, 128) == (4096, 32768)


def test_bench_limits_llama_8b_h200_by_hand():
    # KV bytes per token 2 * 32 * 8 * 128 * 1 B = 65536 B; memory 143771 MiB = 140.40 GiB, weights 8.03e9 B = 7.48 GiB
    # requests at 20000/2000 = 0.9 * 132.92 GiB / (65536 B * 22000) = 88.7 -> batch 96; tokens max(2048, 20000 + 96)
    m = get_model("Llama-3-8B")
    assert bench_limits(m, "H200-SXM", 1, 20000, 2000) == (96, 20096)
    assert bench_limits(m, "H200-SXM", 1, 20000, 2000, chunked=True) == (96, 2048)
    # a BF16 KV cache halves the requests: 44.4 -> 64
    assert bench_limits(m, "H200-SXM", 1, 20000, 2000, kv_bytes=2.0)[0] == 64


@given(st.floats(0.5, 1e5), st.integers(1, 30000), st.integers(1, 30000), st.integers(1, 4))
def test_finetune_rounds_up_within_its_caps(req, isl, osl, pp):
    bs, tok = finetune(req, isl, osl, pp)
    raw = min(req, 4096) / pp
    assert bs >= min(raw, 4096) and bs >= 64 and tok >= 2048
    assert tok >= min(raw * (1 + isl / osl), 32768) - 1e-6 and tok <= 32768
    assert bs % 32 == 0 and tok % 256 == 0


def test_bad_input():
    with pytest.raises(ServeError):
        finetune(0, 128, 128)
    with pytest.raises(ServeError, match="NVML"):
        bench_limits(get_model("Llama-3-8B"), "A100-SXM-80G", 1, 128, 128)


def test_dataset_trtllm_rows_use_the_bench_defaults():
    with resources.files("c3kit.serve").joinpath("data/published_serving.csv").open() as f:
        df = pd.read_csv(f)
    rows = df[df["engine"] == "TensorRT-LLM"]
    assert len(rows) >= 20
    for r in rows.itertuples():
        bs, tok = bench_limits(get_model(r.model), r.gpu, int(r.tp), int(r.prompt_len), int(r.output_len))
        assert (r.max_seqs, r.max_batched_tokens) == (bs, tok), r.id
        assert (r.chunked_prefill, r.mixed_batches, r.reserve_kv, r.kv_memory) == (0, 1, 1, "free"), r.id
        assert "GUARANTEED_NO_EVICT" in r.scheduler_source
    assert (df.loc[df["engine"] == "vLLM", ["mixed_batches", "reserve_kv"]] == 0).all().all()
    assert (df.loc[df["engine"] == "vLLM", "kv_memory"] == "total").all()
    assert math.isfinite(rows["value"].sum())
