"""The published serving benchmarks file: complete, sourced, resolvable; one configuration simulates."""

import math
from importlib import resources

import pandas as pd
import pytest

from c3kit.hw.catalog import get_gpu
from c3kit.serve.workload import parse_lengths
from c3kit.workload.model import get_model


@pytest.fixture(scope="module")
def df():
    with resources.files("c3kit.serve").joinpath("data/published_serving.csv").open() as f:
        return pd.read_csv(f)


def test_every_row_is_complete_and_sourced(df):
    assert len(df) >= 20
    assert df["id"].is_unique
    assert df["source"].str.startswith("https://").all()
    assert (df["value"] > 0).all() and (df["tp"] >= 1).all() and (df["requests"] >= 1).all()
    assert set(df["scenario"]) <= {"offline", "batch", "poisson"}
    for r in df.itertuples():
        get_model(r.model)
        get_gpu(r.gpu)
        parse_lengths(str(r.prompt_len))
        parse_lengths(str(r.output_len), "output")
        assert r.scenario != "poisson" or math.isfinite(float(r.rate_rps))


def test_one_configuration_simulates(df):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
    import validate_serve

    r = next(df[df["id"] == "vllm-lat-8b-h200"].itertuples(index=False))
    m = validate_serve.simulate_row(r, 100)
    assert m.requests == 8
    assert 0 < validate_serve.ours(m, "e2e_mean_ms") < 10 * r.value


def test_vllm_rows_use_the_v0_scheduler_defaults_and_engine_terms(df):
    """vLLM V0 (Oct-Nov 2024): chunked prefill only above a 32K context, then 512 tokens; else max(len, 2048)."""
    from c3kit.serve.overheads import ENGINES

    ctx = {"Llama-3.1-8B": 131072, "Llama-3-70B": 8192, "Mixtral-8x7B": 32768}
    for r in df[df["engine"] == "vLLM"].itertuples():
        n = ctx[r.model_published]
        assert r.chunked_prefill == int(n > 32768), r.id
        assert r.max_batched_tokens == (512 if n > 32768 else max(n, 2048)), r.id
        assert r.max_seqs == 256 and r.engine_terms == "vllm-v0" and "V0" in r.scheduler_source
    assert set(df["engine_terms"]) <= set(ENGINES)
