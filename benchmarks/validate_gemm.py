"""Held-out check of the calibrated GEMM model on measured `c3kit bench gemm` tables.

The calibrated model is what cost model "table" uses for H200-SXM: the shipped gemm table
(h200-sxm-gemm.json: a full grid per dtype, looked up by trilinear interpolation in log space) with
the efficiency curve fitted to it by the cost layer's `fit_efficiency` outside the grid. It is checked
on the random shapes of the same run, which were never used for fitting (h200-sxm-gemm-holdout.json).
Given one file with a "set" column instead, grid rows plus every other random row fit and the
remaining random rows are held out. Printed: the median and 90th-percentile |predicted / measured - 1|
for the calibrated model and for the fitted curve alone, by dtype and by measured GEMM time, beside
the targets (<= 5% and <= 10%), and the spread of the repeated sentinel GEMM (measurement noise).

Run 3 files (bench gemm since run 3) also carry: sets grid / align / random in --file (all fitted by
default; --fit-sets picks some), time_raw_s beside the drift-corrected time_s (--time-col picks the
one both fit and check use), a -sentinel.json file (drift before and after correction) and a -odd.json
file (misaligned shapes, reported apart: the targets are for aligned shapes). An ablation prints the
held-out errors for other fit sets and time columns too (the held-out rows are never fitted).

Run 5 files (bench gemm since run 5) add two more held-out sets, each in its own file beside --file:
-workload.json, the catalog models' bf16 training GEMMs (forward, dgrad, wgrad at TP 1..8, micro-batch
1 and 2) that are off the grid; and -steady.json, shapes of the random (fit), holdout and workload sets
run back to back until the power controller has settled. For the steady rows the burst table is
checked alone and times the sustained-clock factor (cost/power.py) fitted on the random rows only.

The verdict (exit code) is on the workload set: the GEMMs the cost model prices in c3kit's step
model. The random multiples of 8 are reported beside it as a harder set, with their own verdict.

Usage: PYTHONPATH=src python benchmarks/validate_gemm.py [--file gemm.json] [--holdout holdout.json]
       [--time-col time_s|time_raw_s] [--fit-sets grid,align,random] [--json]
Exit code 0 when the calibrated model meets both targets on the workload set (on the random held-out
set when there is no workload file), 1 otherwise.
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
    """Spread of the repeated sentinel GEMM in one run (max / min - 1, and |t / median - 1| median);
    with a dev_from_neighbours column (run 3 on) also what the drift correction leaves: each timing
    over the geometric mean of the two around it."""
    cols = doc["columns"]
    if "set" not in cols:
        return None
    sel = [r for r in doc["rows"] if r[cols.index("set")] == "sentinel"]
    t = np.array([r[cols.index("time_s")] for r in sel])
    if len(t) < 2:
        return None
    out = {"n": int(len(t)), "min_s": float(t.min()), "max_s": float(t.max()), "max_over_min": float(t.max() / t.min()),
           "median_abs_dev": float(np.median(np.abs(t / np.median(t) - 1))),
           "p90_abs_dev": float(np.percentile(np.abs(t / np.median(t) - 1), 90))}
    if "dev_from_neighbours" in cols:
        d = np.abs(np.array([r[cols.index("dev_from_neighbours")] for r in sel]))
        out.update(corrected_median_abs_dev=float(np.median(d)), corrected_p90_abs_dev=float(np.percentile(d, 90)))
    return out


def pass_spread(doc: dict) -> dict | None:
    """Median and p90 over shapes of the pass-to-pass spread (max / min - 1), raw and as time_s."""
    cols = doc["columns"]
    if "spread_raw" not in cols:
        return None
    rows = [r for r in doc["rows"] if r[cols.index("passes")] > 1]
    if not rows:
        return None
    raw = np.array([r[cols.index("spread_raw")] for r in rows])
    cor = np.array([r[cols.index("spread")] for r in rows])
    return {"n": len(rows), "raw_median": float(np.median(raw)), "raw_p90": float(np.percentile(raw, 90)),
            "used_median": float(np.median(cor)), "used_p90": float(np.percentile(cor, 90))}


def with_time(doc: dict, time_col: str, sets: set | None = None) -> dict:
    """A copy of doc whose time_s is time_col, keeping only rows of `sets` (all when None)."""
    cols = doc["columns"]
    it, ic = cols.index("time_s"), cols.index(time_col) if time_col in cols else cols.index("time_s")
    iset = cols.index("set") if "set" in cols else None
    rows = []
    for r in doc["rows"]:
        if sets is not None and iset is not None and r[iset] not in sets:
            continue
        r = list(r)
        r[it] = r[ic]
        rows.append(r)
    return {**doc, "rows": rows}


def errors(doc_fit: dict, doc_held: dict, gpu_name: str, fit=None) -> dict:
    """Relative errors on the held-out rows for the calibrated table model and the fitted curve
    (fit: fit_efficiency's result on doc_fit, computed when not given)."""
    from c3kit.cost.efficiency import curve_times, fit_efficiency
    from c3kit.cost.table import GemmTable
    from c3kit.hw.catalog import get_gpu

    gpu = get_gpu(gpu_name)
    fit = fit or fit_efficiency(doc_fit, gpu)
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
    out["fit"] = fit
    out["points"] = (t, table_pred)  # measured, predicted (for --plot; not printed)
    return out


def plot(path: Path, sets: dict) -> None:
    """Predicted vs measured (log-log, with +-10% bands) and the CDF of |error| per held-out set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    for (name, (meas, pred)), color in zip(sets.items(), ("tab:blue", "tab:orange", "tab:green")):
        ax1.scatter(meas * 1e6, pred * 1e6, s=6, alpha=0.6, color=color, label=f"{name} ({len(meas)})")
        e = np.sort(np.abs(pred / meas - 1.0))
        ax2.plot(e * 100, np.arange(1, len(e) + 1) / len(e), color=color,
                 label=f"{name}: median {np.median(e):.1%}, p90 {np.percentile(e, 90):.1%}")
    lo = min(float(m.min()) for m, _ in sets.values()) * 1e6 * 0.8
    hi = max(float(m.max()) for m, _ in sets.values()) * 1e6 * 1.25
    xs = np.array([lo, hi])
    ax1.plot(xs, xs, color="k", lw=0.8)
    for f in (0.9, 1.1):
        ax1.plot(xs, xs * f, color="k", lw=0.5, ls="--")
    ax1.set(xscale="log", yscale="log", xlabel="measured (us)", ylabel="predicted (us)",
            title="calibrated GEMM model, held-out shapes (dashed: +-10%)")
    ax1.legend(loc="upper left", fontsize=8)
    for x, lab in ((5, "median target"), (10, "p90 target")):
        ax2.axvline(x, color="grey", lw=0.8, ls=":")
    ax2.axhline(0.5, color="grey", lw=0.5)
    ax2.axhline(0.9, color="grey", lw=0.5)
    ax2.set(xlim=(0, 40), ylim=(0, 1), xlabel="|predicted / measured - 1| (%)", ylabel="share of shapes",
            title="error CDF (targets: median 5%, p90 10%)")
    ax2.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def steady_check(doc_fit: dict, doc_steady: dict, gpu_name: str, curve) -> dict:
    """Per steady-state set: errors of the burst table alone and times the sustained factor fitted on "random"."""
    from c3kit.cost.power import FIT_SETS, burst_predictions, fit_sustained, steady_rows
    from c3kit.cost.table import GemmTable
    from c3kit.hw.catalog import get_gpu

    gpu = get_gpu(gpu_name)
    table = GemmTable.from_doc(doc_fit, "fit rows")
    b, s, e = burst_predictions(steady_rows(doc_steady, FIT_SETS), table, gpu, curve)
    clock = fit_sustained(b, s, e, "steady fit rows")
    out = {"clock": clock.to_dict(), "sets": {}}
    for name in ("random", "holdout", "workload"):
        b, s, e = burst_predictions(steady_rows(doc_steady, (name,)), table, gpu, curve)
        if not len(b):
            continue
        out["sets"][name] = {"fitted": name in FIT_SETS, "burst": _stats(np.abs(b / s - 1)),
                             "sustained": _stats(np.abs(b * clock.factors(e) / s - 1))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from c3kit.cost.calib_store import calibration_path

    ap.add_argument("--file", default=str(calibration_path("H200-SXM", "gemm")), help="gemm table the model is fitted to")
    ap.add_argument("--holdout", default=str(calibration_path("H200-SXM", "gemm", variant="holdout")),
                    help="held-out shapes ('' or a missing file: split --file by its set column)")
    ap.add_argument("--gpu", default="H200-SXM", help="catalog GPU the table was measured on")
    ap.add_argument("--time-col", default="time_s", help="time column fitted and checked (time_s or time_raw_s)")
    ap.add_argument("--fit-sets", default="", help="comma list of sets of --file to fit (default: all rows)")
    ap.add_argument("--no-ablation", action="store_true", help="skip the other fit sets / time columns")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--plot", default="", help="also write predicted-vs-measured and error-CDF figures (PNG)")
    a = ap.parse_args(argv)
    doc = json.loads(Path(a.file).read_text())
    fit_sets = set(a.fit_sets.split(",")) if a.fit_sets else None
    if a.holdout and Path(a.holdout).is_file():
        doc_fit, doc_held = doc, json.loads(Path(a.holdout).read_text())
        doc_fit = with_time(doc_fit, a.time_col, fit_sets)
        doc_held = with_time(doc_held, a.time_col)
    else:
        doc_fit, doc_held = split_rows(doc)
    if not doc_held["rows"]:
        print("error: the table has no held-out (random) shapes; measure with `c3kit bench gemm --random N`",
              file=sys.stderr)
        return 2
    res = errors(doc_fit, doc_held, a.gpu)
    res["time_col"], res["fit_sets"] = a.time_col, sorted(fit_sets) if fit_sets else "all"
    res["random_pass"] = res["pass"]
    wl_path = Path(a.file).with_name(Path(a.file).stem + "-workload.json")
    if wl_path.is_file():
        wl = errors(doc_fit, with_time(json.loads(wl_path.read_text()), a.time_col), a.gpu, res["fit"])
        res["workload"] = {k: wl[k] for k in ("calibrated", "curve", "held_out_rows", "pass", "points")}
        res["pass"] = wl["pass"]
    st_path = Path(a.file).with_name(Path(a.file).stem + "-steady.json")
    if st_path.is_file():
        res["steady"] = steady_check(doc_fit, json.loads(st_path.read_text()), a.gpu, res["fit"].curve)
    sent_path = Path(a.file).with_name(Path(a.file).stem + "-sentinel.json")
    res["sentinel"] = sentinel_spread(json.loads(sent_path.read_text()) if sent_path.is_file() else doc)
    res["pass_spread"] = pass_spread(doc)
    odd_path = Path(a.file).with_name(Path(a.file).stem + "-odd.json")
    if odd_path.is_file():
        odd = errors(doc_fit, with_time(json.loads(odd_path.read_text()), a.time_col), a.gpu, res["fit"])
        res["odd"] = {k: odd["calibrated"][k] for k in ("n", "median", "p90", "max")}
    cols = doc["columns"]
    if a.holdout and Path(a.holdout).is_file() and "set" in cols and not a.no_ablation:
        present = sorted({r[cols.index("set")] for r in doc["rows"]})
        variants = [("grid",), ("grid", "align"), tuple(present)]
        abl = []
        for tc in ("time_s", "time_raw_s") if "time_raw_s" in cols else ("time_s",):
            for v in dict.fromkeys(variants):
                if not set(v) <= set(present):
                    continue
                r = errors(with_time(doc, tc, set(v)), with_time(json.loads(Path(a.holdout).read_text()), tc), a.gpu)
                abl.append({"time_col": tc, "fit_sets": list(v), "fit_rows": r["fit_rows"],
                            "median": r["calibrated"]["median"], "p90": r["calibrated"]["p90"],
                            "curve_median": r["curve"]["median"], "curve_p90": r["curve"]["p90"]})
        res["ablation"] = abl
    res.pop("fit")
    points = {"random multiples of 8": res.pop("points")}
    if res.get("workload"):
        points = {"workload GEMMs": res["workload"].pop("points"), **points}
    if res.get("odd"):
        res["odd"].pop("points", None)
    if a.plot:
        plot(Path(a.plot), points)
    if a.json:
        print(json.dumps(res, indent=1))
        return 0 if res["pass"] else 1
    print(f"# fit sets: {res['fit_sets']}; time column: {res['time_col']}")
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
    if res.get("odd"):
        o = res["odd"]
        print(f"# misaligned shapes (not in the target), calibrated model: n {o['n']}, median {o['median']:.2%}, "
              f"p90 {o['p90']:.2%}, max {o['max']:.2%}")
    for ab in res.get("ablation", []):
        print(f"# ablation: fit {'+'.join(ab['fit_sets']):>18} ({ab['fit_rows']:>5} rows) on {ab['time_col']:>10}: "
              f"calibrated median {ab['median']:.2%} p90 {ab['p90']:.2%}; curve alone {ab['curve_median']:.2%} "
              f"{ab['curve_p90']:.2%}")
    if res["sentinel"]:
        sp = res["sentinel"]
        print(f"# noise: the sentinel 8192^3 bf16 GEMM, timed {sp['n']} times through the sweep, ranged "
              f"{sp['min_s'] * 1e6:.0f}-{sp['max_s'] * 1e6:.0f} us (max/min {sp['max_over_min']:.3f}, "
              f"median |t/median - 1| {sp['median_abs_dev']:.2%}, p90 {sp['p90_abs_dev']:.2%})")
        if "corrected_median_abs_dev" in sp:
            print(f"# after correction (each sentinel over the geometric mean of its two neighbours): median "
                  f"{sp['corrected_median_abs_dev']:.2%}, p90 {sp['corrected_p90_abs_dev']:.2%}")
    if res.get("pass_spread"):
        ps = res["pass_spread"]
        print(f"# pass-to-pass spread (max/min - 1) over {ps['n']} fit shapes: raw median {ps['raw_median']:.2%} "
              f"p90 {ps['raw_p90']:.2%}; time_s median {ps['used_median']:.2%} p90 {ps['used_p90']:.2%}")
    if res.get("steady"):
        st = res["steady"]
        ck = st["clock"]
        print(f"# steady state (back to back until the power controller settles): sustained / burst = "
              f"{ck['scale']:.3f} x max(1, e / {ck['knee']:.2f}) ^ {ck['exponent']:.2f}, fitted on {ck['rows']} random rows")
        for name, v in st["sets"].items():
            tag = "fitted" if v["fitted"] else "held out"
            print(f"#   {name:>8} ({tag}, n {v['burst']['n']}): burst table median {v['burst']['median']:.2%} p90 "
                  f"{v['burst']['p90']:.2%}; with the sustained factor median {v['sustained']['median']:.2%} "
                  f"p90 {v['sustained']['p90']:.2%}")
    c = res["calibrated"]
    verdict = "PASS" if res["random_pass"] else "FAIL"
    print(f"# random multiples of 8 (held out): median {c['median']:.2%} (target <= {TARGET_MEDIAN:.0%}), "
          f"p90 {c['p90']:.2%} (target <= {TARGET_P90:.0%}): {verdict}")
    if res.get("workload"):
        w = res["workload"]["calibrated"]
        verdict = "PASS" if res["workload"]["pass"] else "FAIL"
        print(f"# workload GEMMs (held out, n {w['n']}): median {w['median']:.2%} (target <= {TARGET_MEDIAN:.0%}), "
              f"p90 {w['p90']:.2%} (target <= {TARGET_P90:.0%}): {verdict}")
    return 0 if res["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
