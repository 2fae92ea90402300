"""How the H200's power controller moves GEMM timings, and which timing protocol is steadiest.

Two parts, one device call (results to --out as JSON, a summary table printed last):

1. transient: after an idle second, back-to-back 8192^3 bf16 GEMMs, then 1024^3 (graph replays), then
   8192^3 again, then 4096^3; every GEMM (or replay) between device events, and the SM clock probed
   with spin kernels every few calls without stopping the stream (timescale of the clock changes).
2. protocols: the same shapes timed in 4 shuffled passes under each protocol; per protocol the
   pass-to-pass spread (max / min - 1) and |t / median - 1| over shapes, the median SM clock, and the
   same spread after scaling each timing by its probed clock (how much of the spread the clock explains).
   p0 = run 3's (0.5 ms samples, no warm-up); wN = N ms of the same GEMM untimed first, then 3 samples;
   pre20 = 20 ms of 8192^3 first (the GPU always starts from its loaded clock), then 3 2-ms samples.

Usage (device): PYTHONPATH=src python benchmarks/gemm_power_probe.py --out $OUT/power-probe.json
CPU check: PYTHONPATH=src python benchmarks/gemm_power_probe.py --out /tmp/pp.json --quick
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

from c3kit.runtime.bench.timing import enqueue_clock_probe, probe_clock_hz

PROTOCOLS = {"p0": dict(sample_s=0.5e-3, warm_s=0.0, pre_s=0.0), "w5": dict(sample_s=2e-3, warm_s=5e-3, pre_s=0.0),
             "w25": dict(sample_s=4e-3, warm_s=25e-3, pre_s=0.0), "pre20": dict(sample_s=2e-3, warm_s=0.0, pre_s=20e-3)}


def transient(torch, dev, quick: bool) -> list[dict]:
    """Segments of back-to-back GEMMs: per call (or replay) its start offset, seconds and the clock nearby."""
    out = []
    big = 1024 if quick else 8192
    segs = [("idle", 0, 1.0), ("big", big, 1.2), ("small", 1024 if not quick else 256, 0.6), ("big", big, 0.6),
            ("idle", 0, 0.3), ("mid", 4096 if not quick else 512, 0.6)]
    t0 = None
    for name, n, dur in segs:
        if name == "idle":
            torch.cuda.synchronize()
            time.sleep(dur)
            continue
        sets = [(torch.randn(n, n, dtype=torch.bfloat16, device=dev), torch.randn(n, n, dtype=torch.bfloat16, device=dev))
                for _ in range(3)]
        c = torch.empty(n, n, dtype=torch.bfloat16, device=dev)
        for a, b in sets:
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
        calls_per = 1
        fn = None
        if name == "small":
            calls_per = 64
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                g.capture_begin()
                for i in range(calls_per):
                    torch.mm(sets[i % 3][0], sets[i % 3][1], out=c)
                g.capture_end()
            torch.cuda.current_stream().wait_stream(s)
            fn = g.replay
        # estimate one unit
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for i in range(3):
            fn() if fn else torch.mm(sets[i % 3][0], sets[i % 3][1], out=c)
        e1.record()
        e1.synchronize()
        unit = e0.elapsed_time(e1) * 1e-3 / 3
        units = min(20000, max(10, int(dur / max(unit, 1e-9))))
        every = max(1, units // 60)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(units)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(units)]
        probes = []
        if t0 is None:
            t0 = torch.cuda.Event(enable_timing=True)
            t0.record()
        for i in range(units):
            starts[i].record()
            fn() if fn else torch.mm(sets[i % 3][0], sets[i % 3][1], out=c)
            ends[i].record()
            if i % every == every - 1:
                probes.append((i, enqueue_clock_probe()))  # between two GEMMs, outside both timings
        torch.cuda.synchronize()
        clk = {i: probe_clock_hz(p) for i, p in probes}
        for i in range(units):
            out.append({"seg": name, "n": n, "calls": calls_per, "at_s": t0.elapsed_time(starts[i]) * 1e-3,
                        "time_s": starts[i].elapsed_time(ends[i]) * 1e-3 / calls_per, "clock_hz": clk.get(i)})
        del sets, c
    return out


def protocol_shapes(quick: bool, n: int) -> list[tuple[int, int, int, str]]:
    """Random multiples of 8 (log-uniform, as the held-out set) in bf16, a few fp32, and grid points."""
    rng = random.Random("power-probe")
    ranges = ((64, 256), (64, 256), (64, 256)) if quick else ((64, 32768), (256, 32768), (256, 16384))

    def draw():
        return [max(a, int(round(math.exp(rng.uniform(math.log(a), math.log(b))) / 8) * 8)) for a, b in ranges]

    shapes = [(*draw(), "bf16") for _ in range(n)]
    shapes += [(*[min(v, 8192) for v in draw()], "fp32") for _ in range(max(2, n // 6))]
    shapes += [(s, s, s, "bf16") for s in ((256, 1024, 4096, 8192) if not quick else (64, 128))]
    return shapes


def protocols(torch, dev, shapes, passes: int, quick: bool, log) -> dict:
    """Per protocol and shape: timings and probed clocks over passes."""
    from c3kit.runtime.bench.gemm import Pools, Shape, time_views
    from c3kit.runtime.bench.timing import sm_clock_hz

    sh = [Shape(m, n, k, d, "probe") for m, n, k, d in shapes]
    pre = Shape(*(1024 if quick else 8192,) * 3, "bf16", "pre")
    pools = Pools(sh + [pre], dev)
    pa, pb, pc = pools.views(pre.m, pre.n, pre.k, pre.dtype)
    res = {p: {i: [] for i in range(len(sh))} for p in PROTOCOLS}
    for p in range(passes):
        for name, cfg in PROTOCOLS.items():
            t_pass = time.perf_counter()
            order = list(range(len(sh)))
            random.Random(f"{p}-{name}").shuffle(order)
            for i in order:
                s = sh[i]
                a, b, c = pools.views(s.m, s.n, s.k, s.dtype)
                if cfg["pre_s"]:
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    torch.mm(pa[0], pb[0], out=pc)
                    e1.record()
                    e1.synchronize()
                    for j in range(max(1, int(cfg["pre_s"] / (e0.elapsed_time(e1) * 1e-3)))):
                        torch.mm(pa[j % len(pa)], pb[j % len(pb)], out=pc)
                t, how = time_views(a, b, c, dev, 200e-6, cfg["sample_s"], warm_s=cfg["warm_s"])
                res[name][i].append((t, sm_clock_hz(dev), how))
            log(f"# pass {p + 1} {name}: {time.perf_counter() - t_pass:.1f} s")
    return res


def summarize(shapes, res) -> dict:
    """Spread statistics per protocol, raw and clock-scaled."""
    out = {}
    for name, per in res.items():
        spread, dev_, spread_c, clks = [], [], [], []
        for i, ms in per.items():
            ts = [t for t, _, _ in ms]
            cs = [c for _, c, _ in ms]
            if len(ts) < 2:
                continue
            med = statistics.median(ts)
            spread.append(max(ts) / min(ts) - 1)
            dev_ += [abs(t / med - 1) for t in ts]
            clks += [c for c in cs if c == c]
            if all(c == c for c in cs):
                tc = [t * c for t, c in zip(ts, cs)]
                spread_c.append(max(tc) / min(tc) - 1)
        q = lambda v, p: float(sorted(v)[min(len(v) - 1, int(p * len(v)))]) if v else float("nan")  # noqa: E731
        out[name] = {"shapes": len(spread), "spread_median": q(spread, 0.5), "spread_p90": q(spread, 0.9),
                     "absdev_median": q(dev_, 0.5), "absdev_p90": q(dev_, 0.9),
                     "clock_median_hz": q(clks, 0.5), "clock_p10_hz": q(clks, 0.1), "clock_p90_hz": q(clks, 0.9),
                     "clock_scaled_spread_median": q(spread_c, 0.5), "clock_scaled_spread_p90": q(spread_c, 0.9)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", type=int, default=90)
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    log = lambda s: print(s, flush=True)  # noqa: E731
    from c3kit.runtime.bench.gemm import warm_up

    warm_up(dev, 1.0 if a.quick else 3.0)
    t0 = time.perf_counter()
    tr = transient(torch, dev, a.quick)
    log(f"# transient: {len(tr)} timings in {time.perf_counter() - t0:.1f} s")
    shapes = protocol_shapes(a.quick, a.shapes if not a.quick else 8)
    res = protocols(torch, dev, shapes, a.passes, a.quick, log)
    summ = summarize(shapes, res)
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "cuda": torch.version.cuda, "command": " ".join(sys.argv),
           "script": "benchmarks/gemm_power_probe.py", "protocols": PROTOCOLS, "shapes": shapes,
           "transient": tr, "timings": {p: {str(i): v for i, v in per.items()} for p, per in res.items()},
           "summary": summ}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc))
    # transient digest: per segment, clock and time at start / after 50 ms / at the end
    for seg in dict.fromkeys((r["seg"], r["n"]) for r in tr):
        rs = [r for r in tr if (r["seg"], r["n"]) == seg]
        at0 = rs[0]["at_s"]
        pts = []
        for frac in (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8):
            sel = [r for r in rs if r["at_s"] - at0 >= frac * (rs[-1]["at_s"] - at0)][:5]
            ck = [r["clock_hz"] for r in rs if r["clock_hz"] and r["at_s"] - at0 >= frac * (rs[-1]["at_s"] - at0)][:1]
            pts.append(f"{(sel[0]['at_s'] - at0) * 1e3:.0f}ms:{statistics.median(r['time_s'] for r in sel) * 1e6:.1f}us"
                       f"@{(ck[0] / 1e6 if ck else float('nan')):.0f}MHz")
        log(f"# transient {seg[0]} {seg[1]}: " + " ".join(pts))
    log(f"{'protocol':>8} {'shapes':>6} {'spread med':>10} {'p90':>7} {'|dev| med':>9} {'p90':>7} {'clk MHz p10/50/90':>18} "
        f"{'clk-scaled spread med':>21} {'p90':>7}")
    for name, s in summ.items():
        log(f"{name:>8} {s['shapes']:>6} {s['spread_median']:>10.2%} {s['spread_p90']:>7.2%} {s['absdev_median']:>9.2%} "
            f"{s['absdev_p90']:>7.2%} {s['clock_p10_hz'] / 1e6:>6.0f}/{s['clock_median_hz'] / 1e6:.0f}/"
            f"{s['clock_p90_hz'] / 1e6:.0f} {s['clock_scaled_spread_median']:>21.2%} {s['clock_scaled_spread_p90']:>7.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
