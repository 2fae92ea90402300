"""Workloads: length specs, Poisson arrivals, trace files."""

import json

import numpy as np
import pytest

from c3kit.serve.workload import DATASETS, ServeError, load_trace, parse_lengths, poisson


def test_fixed_and_uniform():
    rng = np.random.default_rng(0)
    assert (parse_lengths("128").sample(rng, 5) == 128).all()
    x = parse_lengths("uniform:10:20").sample(rng, 1000)
    assert x.min() >= 10 and x.max() <= 20


def test_dataset_means_are_the_published_ones():
    w = poisson(10.0, 200000, "sharegpt", "sharegpt", seed=3)
    assert w.prompt.mean() == pytest.approx(DATASETS["sharegpt"][0], rel=0.02)
    assert w.output.mean() == pytest.approx(DATASETS["sharegpt"][1], rel=0.02)


def test_poisson_rate_and_seed():
    w = poisson(5.0, 20000, "10", "10", seed=1)
    assert 1 / np.diff(w.arrival).mean() == pytest.approx(5.0, rel=0.03)
    w2 = poisson(50.0, 20000, "uniform:1:9", "10", seed=1)
    w3 = poisson(5.0, 20000, "uniform:1:9", "10", seed=1)
    assert (w2.prompt == w3.prompt).all()  # same seed: same lengths at every rate


@pytest.mark.parametrize("spec", ["0", "-5", "1.5", "abc", "uniform:5", "uniform:9:3", "normal:-1:2", "exp:0",
                                  "lognormal:x:1", "uniform:0:4"])
def test_bad_length_specs(spec):
    with pytest.raises(ServeError):
        parse_lengths(spec)


@pytest.mark.parametrize("rate", [0.0, -1.0, float("nan")])
def test_bad_rates(rate):
    with pytest.raises(ServeError):
        poisson(rate, 10, "10", "10")


def test_trace_csv_and_jsonl(tmp_path):
    c = tmp_path / "t.csv"
    c.write_text("arrival_s,prompt_len,output_len\n0.5,10,3\n0.1,20,4\n")
    w = load_trace(c)
    assert w.arrival.tolist() == [0.1, 0.5] and w.prompt.tolist() == [20, 10]
    j = tmp_path / "t.jsonl"
    j.write_text("\n".join(json.dumps({"arrival_s": a, "prompt_len": 5, "output_len": 2}) for a in (0, 1, 2)))
    assert load_trace(j).n == 3


@pytest.mark.parametrize("text", ["not,a,trace\n1,2,3\n", "arrival_s,prompt_len,output_len\n0,0,3\n",
                                  "arrival_s,prompt_len,output_len\n0,x,3\n", "arrival_s,prompt_len,output_len\n",
                                  "arrival_s,prompt_len,output_len\n-1,3,3\n", "\x00\x01\x02"])
def test_bad_traces(tmp_path, text):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(ServeError):
        load_trace(p)
