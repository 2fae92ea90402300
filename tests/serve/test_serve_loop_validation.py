"""benchmarks/validate_serve_loop.py on a small synthetic file: the serve pricer's path, exact summaries, bad files."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import validate_serve_loop as vsl  # noqa: E402

from c3kit.hw.catalog import get_gpu  # noqa: E402
from c3kit.serve.pricing import StepPricer, price_iteration  # noqa: E402

SMALL = Path(__file__).parent / "data" / "serve_loop_small.json"


@pytest.fixture(scope="module")
def rows():
    return vsl.load(SMALL)


@pytest.fixture(scope="module")
def evaluated(rows):
    return vsl.evaluate(rows)


def test_model_of_a_row_has_the_rows_sizes(rows):
    m = vsl.model_of(rows[0])
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.vocab) == \
        (16, 2048, 32, 8, 64, 8192, 128256)
    assert m.gated_mlp and m.norm == "rmsnorm" and m.position == "rope"


def test_prediction_is_the_simulators_pricing_call(rows, evaluated):
    cm = vsl.cost_model()
    for r, e in zip(rows, evaluated):
        p = StepPricer(vsl.model_of(r), get_gpu("H200-SXM"), tp=1, cost_model=cm,
                       engine="loop" if r["graph"] else "loop-eager")
        b, q, kv = r["batch"], r["q_len"], r["kv_len"]
        if r["phase"] == "decode":
            want = p([], b, b * kv)
        else:
            want = p([(q, kv - q)] * b, 0, 0)
        assert e["predicted_s"] == pytest.approx(want, rel=1e-12)
        assert e["err"] == pytest.approx(e["predicted_s"] / r["time_s"] - 1, rel=1e-12)
        assert e["basis"] == "predicted independently"


def test_interpolated_price_is_close_to_the_exact_one(rows, evaluated):
    r, e = rows[3], evaluated[3]  # prefill 2 x 1024: interpolated token-wise part
    exact = price_iteration(vsl.model_of(r), "H200-SXM", [1024, 1024], [], cost_model=vsl.cost_model(), engine="loop")
    assert e["predicted_s"] == pytest.approx(exact.total, rel=0.02)


def test_predictions_do_not_depend_on_measured_times(rows, evaluated):
    doubled = [{**r, "time_s": 2 * r["time_s"]} for r in rows]
    again = vsl.evaluate(doubled)
    assert [a["predicted_s"] for a in again] == [e["predicted_s"] for e in evaluated]


def test_summary_by_hand():
    s = vsl.summary([{"err": 0.10}, {"err": -0.20}, {"err": 0.05}])
    assert s["n"] == 3
    assert s["median"] == pytest.approx(10.0)
    assert s["p90"] == pytest.approx(18.0)  # |e| sorted 5, 10, 20: 10 + 0.8 x (20 - 10)
    assert s["bias"] == pytest.approx(-5.0 / 3.0)
    assert s["worst"] == pytest.approx(-20.0)
    assert vsl.passes({"n": 3, "median": 8.0, "p90": 15.0}) and not vsl.passes({"n": 3, "median": 8.1, "p90": 1.0})


def test_groups_cover_phases_models_and_all(evaluated):
    g = vsl.groups(evaluated)
    assert g["decode"]["n"] == 3 and g["prefill"]["n"] == 3 and g["all"]["n"] == 6
    assert g["llama-3.1-8b-4L prefill"]["n"] == 1


def test_main_prints_and_writes(tmp_path, capsys):
    png, csv = tmp_path / "loop.png", tmp_path / "loop.csv"
    rc = vsl.main(["--file", str(SMALL), "--plot", str(png), "--csv", str(csv)])
    out = capsys.readouterr().out
    assert rc in (0, 1)
    assert "decode" in out and "prefill" in out and "median" in out and "p90" in out
    assert png.stat().st_size > 1000 and len(csv.read_text().splitlines()) == 7


@pytest.mark.parametrize("edit, msg", [
    (lambda d: d.update(columns=d["columns"][:-1]), "missing columns"),
    (lambda d: d["rows"][0].__setitem__(8, "train"), "phase"),
    (lambda d: d["rows"][0].__setitem__(13, 0.0), "positive"),
    (lambda d: d["rows"][2].__setitem__(10, 4096), "q_len"),
])
def test_bad_files_give_one_error_line_and_exit_2(tmp_path, capsys, edit, msg):
    doc = json.loads(SMALL.read_text())
    edit(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert vsl.main(["--file", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and msg in err[0]


def test_missing_and_non_json_files(tmp_path, capsys):
    assert vsl.main(["--file", str(tmp_path / "nope.json")]) == 2
    (tmp_path / "x.json").write_text("not json")
    assert vsl.main(["--file", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("error: ") for e in err)
