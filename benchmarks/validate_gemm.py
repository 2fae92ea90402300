"""Held-out check of the calibrated GEMM model on a measured `c3kit bench gemm` table.

The table's rows are split once, deterministically: every grid shape and every other random shape
(in file order) are used for fitting; the remaining random shapes are held out. On the fitting rows
the cost layer's `fit_efficiency` fits the efficiency curve, and a GemmTable is built from the same
rows. The script prints the median and 90th-percentile |predicted / measured - 1| on the held-out
shapes for (a) the calibrated model (table lookup with the fitted curve; cost model "table") and
(b) the fitted curve alone (cost model "efficiency"), beside the targets (<= 5% and <= 10%).

Usage: PYTHONPATH=src python benchmarks/validate_gemm.py [--file calib.json] [--gpu H200-SXM] [--json]
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
        out[name] = {"median": float(np.median(e)), "p90": float(np.percentile(e, 90)), "max": float(e.max()),
                     "by_dtype": {d: {"n": int(sum(1 for x in dts if x == d)),
                                      "median": float(np.median([e[i] for i in range(len(t)) if dts[i] == d])),
                                      "p90": float(np.percentile([e[i] for i in range(len(t)) if dts[i] == d], 90))}
                                  for d in sorted(set(dts))}}
    out["pass"] = out["calibrated"]["median"] <= TARGET_MEDIAN and out["calibrated"]["p90"] <= TARGET_P90
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parents[1] / "src/c3kit/cost/data/calib/h200-sxm-gemm.json"
    ap.add_argument("--file", default=str(default), help="gemm calibration file (default: the shipped H200 one)")
    ap.add_argument("--gpu", default="H200-SXM", help="catalog GPU the table was measured on")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    a = ap.parse_args(argv)
    doc = json.loads(Path(a.file).read_text())
    doc_fit, doc_held = split_rows(doc)
    if not doc_held["rows"]:
        print("error: the table has no held-out (random) shapes; measure with `c3kit bench gemm --random N`",
              file=sys.stderr)
        return 2
    res = errors(doc_fit, doc_held, a.gpu)
    if a.json:
        print(json.dumps(res, indent=1))
        return 0 if res["pass"] else 1
    print(f"# {a.file}: measured {doc['meta'].get('date')} on {doc['meta'].get('gpu')} ({doc['meta'].get('command')})")
    print(f"# fit on {res['fit_rows']} rows, held out {res['held_out_rows']} random shapes; |pred/meas - 1|")
    print(f"#{'model':>12} {'dtype':>6} {'n':>4} {'median':>8} {'p90':>8}")
    for name in ("calibrated", "curve"):
        r = res[name]
        print(f" {name:>12} {'all':>6} {res['held_out_rows']:>4} {r['median']:>8.2%} {r['p90']:>8.2%}")
        for d, v in r["by_dtype"].items():
            print(f" {name:>12} {d:>6} {v['n']:>4} {v['median']:>8.2%} {v['p90']:>8.2%}")
    c = res["calibrated"]
    verdict = "PASS" if res["pass"] else "FAIL"
    print(f"# calibrated model: median {c['median']:.2%} (target <= {TARGET_MEDIAN:.0%}), "
          f"p90 {c['p90']:.2%} (target <= {TARGET_P90:.0%}): {verdict}")
    return 0 if res["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
