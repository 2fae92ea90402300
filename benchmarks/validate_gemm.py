"""Held-out check of the calibrated GEMM model on measured `c3kit bench gemm` tables.

The calibrated model is what cost model "table" uses for H200-SXM: the shipped gemm table
(h200-sxm-gemm.json: a full grid per dtype, looked up by trilinear interpolation in log space) with
the efficiency curve fitted to it by the cost layer's `fit_efficiency` outside the grid. It is checked
on the random shapes of the same run, which were never used for fitting (h200-sxm-gemm-holdout.json).
Given one file with a "set" column instead, grid rows plus every other random row fit and the
remaining random rows are held out. Printed: the median and 90th-percentile |predicted / measured - 1|
for the calibrated model and for the fitted curve alone, by dtype and by measured GEMM time, beside
the targets (<= 5% and <= 10%), and the spread of the repeated sentinel GEMM (measurement noise).

Usage: PYTHONPATH=src python benchmarks/validate_gemm.py [--file gemm.json] [--holdout holdout.json] [--json]
Exit code 0 when the calibrated model meets both targets, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

TARGET_MEDIAN, TARGET_P90 = 0.05, 0.10


def split_rows(doc: dict) -> tuple[dict, dict]:
    """(fit document, held-out document): grid + even random rows for fitting, odd random rows held out."""
    cols = doc["columns"]
    iset = cols.index("set") if "set" in cols else None
    fit, held, nrand = [], [], 0
    for r in doc["rows"]:
        if iset is not None and r[iset] == "random":
            (fit if nrand % 2 == 0 else held).append(r)
            nrand += 1
        else:
            fit.append(r)
    mk = lambda rows: {**doc, "rows": rows}  # noqa: E731
    return mk(fit), mk(held)


TIME_CLASSES = ((0.0, 30e-6, "< 30 us"), (30e-6, 100e-6, "30-100 us"), (100e-6, 1e-3, "0.1-1 ms"),
                (1e-3, float("inf"), ">= 1 ms"))


def _stats(e) -> dict:
    e = np.asarray(e, dtype=float)
    if not len(e):
        return {"n": 0, "median": float("nan"), "p90": float("nan")}
    return {"n": int(len(e)), "median": float(np.median(e)), "p90": float(np.percentile(e, 90))}


def sentinel_spread(doc: dict) -> dict | None:
    """Spread of the repeated sentinel GEMM in one run (max / min - 1, and |t / median - 1| median)."""
    cols = doc["columns"]
    if "set" not in cols:
        return None
    t = np.array([r[cols.index("time_s")] for r in doc["rows"] if r[cols.index("set")] == "sentinel"])
    if len(t) < 2:
        return None
    return {"n": int(len(t)), "min_s": float(t.min()), "max_s": float(t.max()), "max_over_min": float(t.max() / t.min()),
            "median_abs_dev": float(np.median(np.abs(t / np.median(t) - 1)))}


def errors(doc_fit: dict, doc_held: dict, gpu_name: str) -> dict:
    """Relative errors on the held-out rows for the calibrated table model and the fitted curve."""
    from c3kit.cost.efficiency import curve_times, fit_efficiency
    from c3kit.cost.table import GemmTable
    from c3kit.hw.catalog import get_gpu

    gpu = get_gpu(gpu_name)
    fit = fit_efficiency(doc_fit, gpu)
    table = GemmTable.from_doc(doc_fit, "fit rows")
    held = GemmTable.from_doc(doc_held, "held-out rows")
    m, n, k, b, dts, t = held.arrays()
    curve_pred = curve_times(fit.curve, gpu, m, n, k, dts, b)
    table_pred = []
    for i in range(len(t)):
        v = table.lookup(int(m[i]), int(n[i]), int(k[i]), dts[i], int(b[i]), fit.curve, gpu)
        table_pred.append(curve_pred[i] if v is None else v)
    table_pred = np.asarray(table_pred)
    out = {"gpu": gpu.name, "fit_rows": len(doc_fit["rows"]), "held_out_rows": len(t),
           "fit_median_error_on_fit_rows": fit.median_error, "curve": fit.curve.to_dict()}
    for name, pred in (("calibrated", table_pred), ("curve", curve_pred)):
        e = np.abs(pred / t - 1.0)
        out[name] = {**_stats(e), "max": float(e.max()),
                     "by_dtype": {d: _stats([e[i] for i in range(len(t)) if dts[i] == d]) for d in sorted(set(dts))},
                     "by_time": {lab: _stats([e[i] for i in range(len(t)) if lo <= t[i] < hi])
                                 for lo, hi, lab in TIME_CLASSES}}
    out["pass"] = out["calibrated"]["median"] <= TARGET_MEDIAN and out["calibrated"]["p90"] <= TARGET_P90
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    calib = Path(__file__).resolve().parents[1] / "src/c3kit/cost/data/calib"
    ap.add_argument("--file", default=str(calib / "h200-sxm-gemm.json"), help="gemm table the model is fitted to")
    ap.add_argument("--holdout", default=str(calib / "h200-sxm-gemm-holdout.json"),
                    help="held-out shapes ('' or a missing file: split --file by its set column)")
    ap.add_argument("--gpu", default="H200-SXM", help="catalog GPU the table was measured on")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    a = ap.parse_args(argv)
    doc = json.loads(Path(a.file).read_text())
    if a.holdout and Path(a.holdout).is_file():
        doc_fit, doc_held = doc, json.loads(Path(a.holdout).read_text())
    else:
        doc_fit, doc_held = split_rows(doc)
    if not doc_held["rows"]:
        print("error: the table has no held-out (random) shapes; measure with `c3kit bench gemm --random N`",
              file=sys.stderr)
        return 2
    res = errors(doc_fit, doc_held, a.gpu)
    res["sentinel"] = sentinel_spread(doc)
    if a.json:
        print(json.dumps(res, indent=1))
        return 0 if res["pass"] else 1
    print(f"# {a.file}: measured {doc['meta'].get('date')} on {doc['meta'].get('gpu')} ({doc['meta'].get('command')})")
    print(f"# fit on {res['fit_rows']} rows, held out {res['held_out_rows']} random shapes (never fitted); "
          "error = |pred/meas - 1|")
    print(f"#{'model':>12} {'dtype':>6} {'n':>4} {'median':>8} {'p90':>8}")
    for name in ("calibrated", "curve"):
        r = res[name]
        print(f" {name:>12} {'all':>6} {res['held_out_rows']:>4} {r['median']:>8.2%} {r['p90']:>8.2%}")
        for d, v in r["by_dtype"].items():
            print(f" {name:>12} {d:>6} {v['n']:>4} {v['median']:>8.2%} {v['p90']:>8.2%}")
    print(f"#{'model':>12} {'time':>10} {'n':>4} {'median':>8} {'p90':>8}")
    for name in ("calibrated", "curve"):
        for lab, v in res[name]["by_time"].items():
            if v["n"]:
                print(f" {name:>12} {lab:>10} {v['n']:>4} {v['median']:>8.2%} {v['p90']:>8.2%}")
    if res["sentinel"]:
        sp = res["sentinel"]
        print(f"# noise: the sentinel 8192^3 bf16 GEMM, timed {sp['n']} times through the sweep, ranged "
              f"{sp['min_s'] * 1e6:.0f}-{sp['max_s'] * 1e6:.0f} us (max/min {sp['max_over_min']:.3f}, "
              f"median |t/median - 1| {sp['median_abs_dev']:.2%})")
    c = res["calibrated"]
    verdict = "PASS" if res["pass"] else "FAIL"
    print(f"# calibrated model: median {c['median']:.2%} (target <= {TARGET_MEDIAN:.0%}), "
          f"p90 {c['p90']:.2%} (target <= {TARGET_P90:.0%}): {verdict}")
    return 0 if res["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
