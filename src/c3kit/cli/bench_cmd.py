"""CLI: `c3kit bench` - GPU microbenchmarks that write calibration files and print nccl-tests-like tables."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

import typer

from c3kit.cli.common import JSON_OPT, emit_json, out_file_option, progress_bar
from c3kit.cost.calib_store import calib_stem, variant_path
from c3kit.cost.calib_store import out_path as calib_out_path
from c3kit.errors import RuntimeSetupError

bench_app = typer.Typer(help="GPU microbenchmarks: gemm, c3, comm, overlap, props (need PyTorch).",
                        no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

OUT_OPT = out_file_option(None, "Calibration file to write.", show_default="c3kit-out/calib/<gpu>-<kind>.json")
SCRIPT_OPT = typer.Option("", "--script", help="Script that ran this command, recorded in the file's meta.")
GPU_OPT = typer.Option(None, "--gpu", help="Catalog name for peak FLOP/s and file names (default: detected).")
DEVICE_OPT = typer.Option(None, "--device", help="torch device (default cuda if available, else cpu).")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.add_typer(bench_app, name="bench")


def _torch():
    from c3kit.runtime._torch import require_torch

    return require_torch()


def _device(name: str | None):
    torch = _torch()
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise RuntimeSetupError(f"bad --device {name!r} ({e}): use cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeSetupError("--device cuda asked for, but torch sees no CUDA GPU: use --device cpu")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _gpu(dev, name: str | None):
    """(catalog GPU or None, file slug) for the device."""
    from c3kit.errors import HardwareError
    from c3kit.hw.catalog import get_gpu

    if name is None:
        if dev.type != "cuda":
            return None, "cpu"
        name = _torch().cuda.get_device_name(dev).replace("NVIDIA ", "")
    try:
        g = get_gpu(name)
        return g, calib_stem(g.name)
    except HardwareError:
        return None, calib_stem(name)


def _peak(g, dtypes) -> dict[str, float]:
    out = {}
    for dt in dtypes:
        try:
            out[dt] = g.peak_flops(dt) if g is not None else float("nan")
        except Exception:  # noqa: BLE001 - no peak for this dtype: efficiency left NaN
            out[dt] = float("nan")
    return out


def _out_path(out: Path | None, slug: str, kind: str) -> Path:
    return out if out is not None else calib_out_path(slug, kind)


def _meta(script: str, extra: dict | None = None) -> dict:
    from c3kit.runtime.calib import machine_meta

    argv = sys.argv[1:] if sys.argv and "pytest" not in sys.argv[0] else []
    if argv and argv[0] != "bench":
        argv = ["bench", *argv]  # run as `python -m c3kit.cli.bench_cmd`: record the equivalent c3kit command
    meta = machine_meta(["c3kit", *argv] if argv else "c3kit bench (called in-process)", script)
    meta.update(extra or {})
    return meta


def _echo(line: str, quiet: bool) -> None:
    if not quiet:
        typer.echo(line)


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        return f"{v:.4g}"
    return str(v)


def _table(columns, rows, widths=None) -> list[str]:
    widths = widths or [max(len(str(c)), *(len(_fmt(r[i])) for r in rows)) if rows else len(str(c))
                        for i, c in enumerate(columns)]
    lines = ["#" + " ".join(f"{c:>{w}}" for c, w in zip(columns, widths))]
    lines += [" " + " ".join(f"{_fmt(v):>{w}}" for v, w in zip(r, widths)) for r in rows]
    return lines


def _dtypes(text: str) -> list[str]:
    out = [d.strip() for d in text.split(",") if d.strip()]
    bad = [d for d in out if d not in ("bf16", "fp16", "fp32")]
    if bad or not out:
        raise RuntimeSetupError(f"--dtypes {text!r}: use a comma list of bf16, fp16, fp32")
    return out


@bench_app.command("gemm")
def gemm_cmd(
    dtypes: str = typer.Option(None, "--dtypes", help="Comma list of bf16, fp16, fp32.",
                               show_default="bf16,fp16,fp32; fp32 with --quick on a CPU"),
    random_shapes: int = typer.Option(None, "--random", help="Random fit shapes (multiples of 8) of the first dtype "
                                      "(others: a fifth); default 2000 bf16, 400 fp16 / fp32."),
    holdout_shapes: int = typer.Option(None, "--holdout", help="Held-out random shapes (never fitted), own file; "
                                       "default 300 bf16, 60 fp16 / fp32."),
    align_shapes: int = typer.Option(None, "--align", help="Grid points with dimensions moved by -8/-16/-32 (fit); "
                                     "default 1500 bf16, 300 fp16 / fp32."),
    odd_shapes: int = typer.Option(None, "--odd", help="Misaligned shapes (a dimension not a multiple of 8), own file.",
                                   show_default="40; 4 with --quick"),
    workload: bool = typer.Option(True, "--workload/--no-workload", help="Also the catalog models' bf16 training "
                                  "GEMMs that are off the grid (held out, never fitted), own file -workload.json."),
    warmup_s: float = typer.Option(3.0, "--warmup-s", help="Seconds of large GEMMs before timing (GPU only)."),
    sentinel_every: int = typer.Option(12, "--sentinel-every", help="Time 8192^3 bf16 between blocks of N shapes (0: never)."),
    quick: bool = typer.Option(False, "--quick", help="Small shapes (64..256), a few per set, small splits: seconds "
                               "on a CPU (trying it out, tests)."),
    plan: bool = typer.Option(False, "--plan", help="Print the shape counts and exit (no timing)."),
    shapes_opt: str = typer.Option("", "--shapes", help="MxNxK list replacing the sweep (tagged set=given)."),
    splits: bool = typer.Option(True, "--splits/--no-splits", help="Also time 2..64-way splits along M, N, K."),
    split_shapes: str = typer.Option("", "--split-shapes", help="MxNxK list for splits, e.g. 512x512x512,256x1024x512."),
    max_chunks: int = typer.Option(64, "--max-chunks", help="Largest split (2, 4, .. up to this)."),
    target_ms: float = typer.Option(20.0, "--target-ms", help="Milliseconds per timed loop of the splits."),
    sample_ms: float = typer.Option(0.5, "--sample-ms", help="GPU milliseconds per timed sample of the sweep."),
    budget_s: float = typer.Option(0.0, "--budget-s", help="Stop the sweep after this many seconds (splits: the same again)."),
    passes: int = typer.Option(3, "--passes", help="Interleaved sweep passes, each in its own order; time = median."),
    graph_below_us: float = typer.Option(200.0, "--graph-below-us",
                                         help="Time GEMMs shorter than this as CUDA-graph replays (0: never)."),
    correct: bool = typer.Option(True, "--correct/--no-correct", help="time_s drift-corrected by the sentinel (else raw)."),
    probe_clock: bool = typer.Option(True, "--probe-clock/--no-probe-clock",
                                     help="Probe the SM clock behind every timing (GPU only): sm_clock_hz, time_ref_s."),
    steady: int = typer.Option(0, "--steady", help="Also time N random (fit) and N held-out shapes at steady state "
                               "(each run back to back for --steady-hold-s), own file -steady.json."),
    steady_hold_s: float = typer.Option(0.4, "--steady-hold-s", help="Seconds each steady-state shape runs."),
    steady_only: bool = typer.Option(False, "--steady-only", help="Only the steady-state step (needs --steady): "
                                     "no sweep, no splits; writes -steady.json beside --out."),
    seed: int = typer.Option(0, "--seed"),
    out: Path = OUT_OPT, script: str = SCRIPT_OPT, gpu: str = GPU_OPT, device: str = DEVICE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """GEMM efficiency over M, N, K, dtype, and decomposition inefficiency (DIL) of 2..64-way splits."""
    from collections import Counter

    from c3kit.runtime.bench import gemm as g

    if dtypes is None:
        # CPU half-precision GEMMs run 10x slower than fp32 and say nothing about a GPU: a quick CPU try uses fp32
        on_cpu = quick and (device == "cpu" or (device is None and not _torch().cuda.is_available()))
        dtypes = "fp32" if on_cpu else "bf16,fp16,fp32"
    dts = _dtypes(dtypes)
    shapes = _gemm_shapes(dts, shapes_opt, random_shapes, odd_shapes, holdout_shapes, align_shapes, workload, seed,
                          quick)
    counts = Counter((s.dtype, s.set) for s in shapes)
    ranges = {dt: g.dtype_range(dt, quick) for dt in dts}
    if plan:
        _gemm_plan(counts, len(shapes), passes, ranges)
        return
    if steady_only and steady <= 0:
        raise RuntimeSetupError("--steady-only needs --steady N (N > 0 shapes of each set)")
    if steady > 0 and not steady_hold_s > 0:
        raise RuntimeSetupError(f"--steady-hold-s must be positive seconds, got {steady_hold_s}")
    dev = _device(device)
    hw, slug = _gpu(dev, gpu)
    peak = _peak(hw, dts)
    quiet = as_json
    _echo(f"# c3kit bench gemm on {dev} ({hw.name if hw else slug}); efficiency = FLOP/s / catalog peak; "
          f"{len(shapes)} shapes x {passes} passes", quiet)
    cols = ["m", "n", "k", "dtype", "split", "chunks", "time(us)", "TFLOP/s", "eff", "dil", "set"]
    widths = [6, 6, 6, 5, 5, 6, 10, 8, 6, 7, 10]

    def show(r):
        _echo(_table(cols, [[*r[:6], r[6] * 1e6, r[7] / 1e12, r[8], r[9], r[10]]], widths)[1], quiet)

    errors: list[str] = []

    def steady_step(path: Path, extra: dict) -> None:
        _gemm_steady(path, extra, shapes, steady, steady_hold_s, seed, dev, peak, show, budget_s, script, quiet)

    g.warm_up(dev, warmup_s)
    if steady_only:
        steady_step(_out_path(out, slug, "gemm"),
                    {"peak_flops": _peak_json(peak),
                     "protocol": json.dumps({"steady": steady, "steady_hold_s": steady_hold_s, "warmup_s": warmup_s,
                                             "steady_only": True, "clock_ref_hz": g.CLOCK_REF_HZ})})
        if as_json:
            emit_json({"steady_only": True, "path": str(_out_path(out, slug, "gemm"))})
        return
    _echo(_table(cols, [], widths)[0], quiet)
    rows, srows, stats = g.run_sweep(shapes, dev, peak, passes=passes, seed=seed, on_row=show, budget_s=budget_s,
                                     errors=errors, sentinel_every=sentinel_every if dev.type == "cuda" else 0,
                                     graph_below_s=graph_below_us * 1e-6, sample_s=sample_ms * 1e-3,
                                     correct=correct, log=lambda x: _echo(x, quiet), probe_clock=probe_clock)
    columns = g.SWEEP_COLUMNS
    rows, held_rows, odd_rows, workload_rows = _gemm_sets(rows)
    for e in errors[:50]:
        _echo(f"# not run: {e}", quiet)
    if not rows:
        raise RuntimeSetupError(f"bench gemm measured nothing: {'; '.join(errors[:3])}")
    protocol = {"passes": passes, "sentinel": list(g.SENTINEL), "sentinel_every": sentinel_every,
                "graph_below_us": graph_below_us, "sample_ms": sample_ms, "rotate_bytes": g.ROTATE_BYTES,
                "warmup_s": warmup_s, "probe_clock": probe_clock, "clock_ref_hz": g.CLOCK_REF_HZ, "steady": steady,
                "steady_hold_s": steady_hold_s, **stats}
    extra = _gemm_meta(peak, errors, protocol, stats, ranges, counts)
    path = _write_gemm_sweep(_out_path(out, slug, "gemm"), columns, rows, held_rows, odd_rows, workload_rows, srows,
                             extra, script)
    _echo(f"# sweep: {stats}", quiet)
    if steady > 0:
        steady_step(path, extra)
    split_rows, split_path = [], None
    if splits:
        split_rows, split_path = _gemm_splits(path, split_shapes, max_chunks, dts[0], dev, peak, target_ms, seed, show,
                                              budget_s, extra, script, quiet, quick)
    if as_json:
        emit_json({"path": str(path), "columns": columns, "rows": rows,
                   "split_path": str(split_path) if split_path else None, "split_rows": split_rows})
    else:
        tail = f", {len(held_rows)} held out, {len(odd_rows)} misaligned" if (held_rows or odd_rows) else ""
        tail += f" and {len(split_rows)} to {split_path}" if split_path else ""
        _echo(f"# wrote {len(rows)} rows to {path}{tail}", quiet)


def _peak_json(peak: dict) -> str:
    """The peak FLOP/s per dtype as JSON (NaN, an unknown peak, as null)."""
    return json.dumps({k: (v if v == v else None) for k, v in peak.items()})


def _gemm_sets(rows):
    """The sweep's rows by file: (the lookup table's rows, held-out, misaligned, catalog-workload rows)."""
    held_rows = [r for r in rows if r[10] == "holdout"]
    # Misaligned shapes run 3-6x slower on tensor cores: kept out of the lookup table, in their own file.
    odd_rows = [r for r in rows if r[10] == "odd"]
    workload_rows = [r for r in rows if r[10] == "workload"]
    rows = [r for r in rows if r[10] not in ("odd", "holdout", "workload")]
    return rows, held_rows, odd_rows, workload_rows


def _gemm_meta(peak: dict, errors: list[str], protocol: dict, stats: dict, ranges: dict, counts) -> dict:
    """The sweep files' meta: peaks, TF32 setting, errors, protocol, what time_s is, shape ranges and sets."""
    return {"peak_flops": _peak_json(peak),
            "tf32": str(_torch().backends.cuda.matmul.allow_tf32), "errors": json.dumps(errors[:200]),
            "protocol": json.dumps(protocol),
            "time_s": f"{stats['time_s']} (median over passes); time_raw_s: median of raw timings",
            "ranges": json.dumps(ranges), "sets": json.dumps({f"{d}/{s}": c for (d, s), c in sorted(counts.items())})}


def _gemm_shapes(dts, shapes_opt, random_shapes, odd_shapes, holdout_shapes, align_shapes, workload, seed, quick):
    """The shapes of `bench gemm`: the --shapes list, or the sweep (plus the catalog models' workload GEMMs)."""
    from c3kit.runtime.bench import gemm as g

    if shapes_opt:
        return [g.Shape(m, n, k, dt, "given") for m, n, k in _parse_shapes(shapes_opt) for dt in dts]
    if odd_shapes is None:
        odd_shapes = g.QUICK_ODD if quick else g.N_ODD
    shapes = g.sweep_shapes(dts, n_random=random_shapes, n_odd=odd_shapes, seed=seed, quick=quick,
                            n_holdout=holdout_shapes, n_align=align_shapes)
    if workload and "bf16" in dts:
        shapes += g.workload_shapes("bf16", seed=seed, quick=quick)
    return shapes


def _gemm_plan(counts, n_shapes: int, passes: int, ranges) -> None:
    """`bench gemm --plan`: shape counts per dtype and set."""
    for (dt, st), c in sorted(counts.items()):
        typer.echo(f"{dt:>5} {st:>8} {c:>6}")
    typer.echo(f"total {n_shapes} shapes x {passes} passes; ranges (M, N, K) {ranges}")


def _gemm_steady(path: Path, extra: dict, shapes, steady, steady_hold_s, seed, dev, peak, show, budget_s, script,
                 quiet) -> None:
    """`bench gemm --steady`: time shapes back to back and write the steady-state companion file."""
    from c3kit.runtime.bench import gemm as g
    from c3kit.runtime.calib import write_calibration

    st_shapes = g.steady_shapes(shapes, steady, seed)
    _echo(f"# steady state: {len(st_shapes)} shapes, {steady_hold_s:g} s each", quiet)
    st_errors: list[str] = []
    st_rows = g.run_steady(st_shapes, dev, peak, hold_s=steady_hold_s, seed=seed, on_row=show, errors=st_errors,
                           budget_s=budget_s)
    for e in st_errors:
        _echo(f"# not run: {e}", quiet)
    if not st_rows:
        raise RuntimeSetupError(f"bench gemm --steady measured nothing: {'; '.join(st_errors[:3])}")
    st_path = write_calibration(variant_path(path, "steady"), "gemm", g.STEADY_COLUMNS, st_rows,
                                _meta(script, {**extra, "errors": json.dumps(st_errors),
                                               "note": "steady state: each shape back to back for hold_s, "
                                                       "timed at the end"}))
    _echo(f"# wrote {len(st_rows)} steady-state rows to {st_path}", quiet)


def _write_gemm_sweep(out_path: Path, columns, rows, held_rows, odd_rows, workload_rows, srows, extra, script) -> Path:
    """Write the sweep's fit set and its companions (held out, misaligned, workload, sentinel); the fit set's path."""
    from c3kit.runtime.bench import gemm as g
    from c3kit.runtime.calib import write_calibration

    path = write_calibration(out_path, "gemm", columns, rows,
                             _meta(script, {**extra, "note": "grid, align and random rows: the fit set"}))
    for suffix, rs, note in (("holdout", held_rows, "held-out random shapes (multiples of 8): never fitted"),
                             ("odd", odd_rows, "misaligned shapes (a dimension not a multiple of 8)"),
                             ("workload", workload_rows, "the catalog models' training GEMMs off the grid: never fitted")):
        if rs:
            write_calibration(variant_path(path, suffix), "gemm", columns, rs,
                              _meta(script, {**extra, "note": note}))
    if srows:
        write_calibration(variant_path(path, "sentinel"), "gemm", g.SENTINEL_COLUMNS, srows,
                          _meta(script, {**extra, "note": "every sentinel timing, in time order"}))
    return path


def _gemm_splits(path: Path, split_shapes, max_chunks, dtype, dev, peak, target_ms, seed, show, budget_s, extra,
                 script, quiet, quick=False):
    """`bench gemm --splits`: time 2..max_chunks-way splits into their own file; (rows, path)."""
    from c3kit.runtime.bench import gemm as g
    from c3kit.runtime.calib import write_calibration

    # Split runs go to their own file: the gemm table's lookup must see whole GEMMs only.
    base = _parse_shapes(split_shapes) if split_shapes else list(
        g.QUICK_SPLIT_SHAPES if quick else g.DEFAULT_SPLIT_SHAPES)
    chunks = [c for c in g.SPLIT_CHUNKS if c <= (min(max_chunks, g.QUICK_MAX_CHUNKS) if quick else max_chunks)]
    split_errors: list[str] = []
    split_rows = g.run_splits(base, dtype, dev, peak, chunks=chunks, target_s=target_ms / 1e3, seed=seed,
                              on_row=show, budget_s=budget_s, errors=split_errors)
    for e in split_errors:
        _echo(f"# not run: {e}", quiet)
    extra = {**extra, "errors": json.dumps(split_errors)}
    split_path = write_calibration(variant_path(path, "split"), "gemm", g.COLUMNS, split_rows, _meta(script, extra))
    return split_rows, split_path


def _parse_shapes(text: str) -> list[tuple[int, int, int]]:
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)x(\d+)x(\d+)\s*", part)
        if not m:
            raise RuntimeSetupError(f"bad shape {part!r}: use MxNxK, e.g. 4096x4096x4096")
        dims = tuple(int(x) for x in m.groups())
        if min(dims) <= 0:
            raise RuntimeSetupError(f"bad shape {part!r}: M, N and K must be positive")
        out.append(dims)
    return out


@bench_app.command("c3")
def c3_cmd(
    ratios: str = typer.Option("0.3,1,3", "--ratios", help="Target T_comm / T_comp ratios (sizes the copies)."),
    gemms: str = typer.Option("", "--gemms", help="name=MxNxK list (default compute=8192^3, memory=262144x512x128)."),
    sm_scaling: str = typer.Option("128,120,112,96,64,32", "--sm-scaling",
                                   help="SM counts for the GEMM alone in green contexts ('' to skip)."),
    out: Path = OUT_OPT, script: str = SCRIPT_OPT, gpu: str = GPU_OPT, device: str = DEVICE_OPT,
    as_json: bool = JSON_OPT,
) -> None:
    """GEMM concurrent with SM-kernel and copy-engine copies: fraction of ideal speedup per class (one GPU)."""
    from c3kit.runtime.bench import c3

    dev = _device(device)
    if dev.type != "cuda":
        raise RuntimeSetupError("bench c3 needs a CUDA GPU (streams, copy engines, green contexts); none is visible")
    hw, slug = _gpu(dev, gpu)
    rs = [float(x) for x in ratios.split(",") if x.strip()]
    gm = None
    if gemms:
        gm = {}
        for part in gemms.split(","):
            name, _, shape = part.partition("=")
            gm[name.strip()] = _parse_shapes(shape)[0]
    quiet = as_json
    errors: list[str] = []
    cols = ["variant", "gemm", "comm", "bytes", "t_comp(us)", "t_comm(us)", "t_conc(us)", "S_ideal", "S_real",
            "frac", "class", "comp_loss", "comm_loss"]
    widths = [26, 8, 8, 11, 10, 10, 10, 7, 7, 6, 8, 9, 9]
    _echo(f"# c3kit bench c3 on {dev} ({hw.name if hw else slug})", quiet)
    _echo(_table(cols, [], widths)[0], quiet)
    ix = {c: i for i, c in enumerate(c3.COLUMNS)}

    def show(r):
        _echo(_table(cols, [[r[ix["variant"]], r[ix["gemm"]], r[ix["comm"]], r[ix["comm_bytes"]],
                             r[ix["t_comp_s"]] * 1e6, r[ix["t_comm_s"]] * 1e6, r[ix["t_concurrent_s"]] * 1e6,
                             r[ix["s_ideal"]], r[ix["s_real"]], r[ix["fraction_of_ideal"]], r[ix["class"]],
                             r[ix["comp_loss"]], r[ix["comm_loss"]]]], widths)[1], quiet)

    rows = c3.run_c3(dev, ratios=rs, gemms=gm, on_row=show, errors=errors)
    sms = [int(x) for x in sm_scaling.split(",") if x.strip()]
    scaling = c3.sm_scaling(dev, sms, gemms=gm, errors=errors) if sms else []
    nan = float("nan")
    for gname, m, n, k, dt, reps, s, t, slow in scaling:
        t_full = t / (1.0 + slow)
        rows.append([f"gemm-alone-{s}sm", gname, m, n, k, dt, reps, s, "none", 0, 0, 0, 0.0, t_full, 0.0, t, 0.0, t, t,
                     t, 1.0, 1.0, nan, "G-long", slow, 0.0, t])
    try:
        ce = c3.copy_engine_profile(dev)
    except Exception as e:  # noqa: BLE001 - the profiler check is informative only
        ce = {"error": f"{type(e).__name__}: {e}"}
    summary = c3.summarize([r for r in rows if not r[0].startswith("gemm-alone")])
    from c3kit.runtime.calib import write_calibration

    extra = {"errors": json.dumps(errors), "copy_engine_check": json.dumps(ce),
             "published": json.dumps(c3.PUBLISHED)}
    path = write_calibration(_out_path(out, slug, "c3"), "c3", c3.COLUMNS, rows, _meta(script, extra))
    if as_json:
        emit_json({"path": str(path), "columns": c3.COLUMNS, "rows": rows, "summary": summary, "errors": errors,
                   "copy_engine_check": ce})
        return
    if scaling:
        _echo("# GEMM alone with fewer SMs (green contexts)", quiet)
        for line in _table(["gemm", "m", "n", "k", "dtype", "reps", "sms", "time(us)", "slowdown"],
                           [[*r[:7], r[7] * 1e6, r[8]] for r in scaling]):
            _echo(line, quiet)
    _echo("# fraction of ideal speedup realized (mean), beside the C3 paper (MI300X)", quiet)
    for line in _table(["family", "class", "n", "measured", "published"], summary):
        _echo(line, quiet)
    _echo(f"# copy-engine check (profiler): {json.dumps(ce)}", quiet)
    for e in errors:
        _echo(f"# not run: {e}", quiet)
    _echo(f"# wrote {len(rows)} rows to {path}", quiet)


def _multi_ranks(world: int, backend: str):
    """(torch, GPUs seen, process-group backend, ranks, dtype) of a multi-rank command: by default nccl over
    every GPU in bf16 where there are two or more, else gloo over 2 CPU ranks in fp32."""
    torch = _torch()
    if world is not None and world < 1:
        raise RuntimeSetupError(f"--world {world}: give a positive number of ranks (or leave it out: every GPU, "
                                "or 2 on the CPU)")
    if backend not in ("", "nccl", "gloo"):
        raise RuntimeSetupError(f"--backend {backend!r}: use nccl (GPUs) or gloo (CPU)")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "nccl" and gpus == 0:
        raise RuntimeSetupError("--backend nccl needs CUDA GPUs and torch sees none: use --backend gloo on the CPU")
    backend = backend or ("nccl" if gpus >= 2 else "gloo")
    world = world or (gpus if backend == "nccl" else 2)
    return torch, gpus, backend, world, "bf16" if backend == "nccl" else "fp32"


def _multi_slug(torch, gpus: int, backend: str) -> str:
    """The calibration file slug of a multi-rank command: GPU 0's with nccl, else cpu."""
    return _gpu(torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu"), None if gpus else "cpu")[1]


def _run_ranks(fn, world: int, backend: str, args: tuple, timeout_s: float, progress=None):
    """Run fn on `world` local ranks and return rank 0's value (errors of any rank raise).

    With progress(done, total, label), fn gets one more argument, a queue that rank 0 sends
    (done, total, label) to; this process relays it while the ranks run.
    """
    from c3kit.runtime.launch import run_local

    torch = _torch()
    if backend == "nccl" and torch.cuda.device_count() < world:
        raise RuntimeSetupError(f"--world {world} over NCCL needs {world} GPUs; torch sees {torch.cuda.device_count()} "
                                "(use --backend gloo on the CPU)")
    join_s = max(600.0, 20 * timeout_s)
    if progress is None:
        res = run_local(fn, world, backend, args=args, timeout_s=timeout_s, join_timeout_s=join_s)
    else:
        res = _run_relaying(run_local, fn, world, backend, args, timeout_s, join_s, progress)
    bad = [r for r in res if not r["ok"]]
    if bad:
        raise RuntimeSetupError(f"rank failed: {bad[0]['type']}: {bad[0]['error'][:400]}")
    return res[0]["value"]


def _run_relaying(run_local, fn, world, backend, args, timeout_s, join_s, progress):
    import queue
    import threading

    import torch.multiprocessing as mp

    q = mp.get_context("spawn").Queue()
    out: dict = {}

    def target() -> None:
        try:
            out["res"] = run_local(fn, world, backend, args=(*args, q), timeout_s=timeout_s, join_timeout_s=join_s)
        except BaseException as e:  # noqa: BLE001 - re-raised in the calling thread
            out["err"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    while t.is_alive():
        try:
            progress(*q.get(timeout=0.2))
        except queue.Empty:
            pass
    t.join()
    if "err" in out:
        raise out["err"]
    return out["res"]


def _sizes(text: str) -> list[int]:
    from c3kit.units import parse_bytes

    if ":" in text:
        lo, _, rest = text.partition(":")
        hi, _, fac = rest.partition(":")
        from c3kit.runtime.bench.comm import default_sizes

        return default_sizes(parse_bytes(lo), parse_bytes(hi), int(fac or 4))
    return [int(parse_bytes(x)) for x in text.split(",") if x.strip()]


@bench_app.command("comm")
def comm_cmd(
    world: int = typer.Option(None, "--world", help="Ranks.", show_default="every GPU, or 2 on the CPU"),
    backend: str = typer.Option("", "--backend", help="Process-group backend: nccl (GPUs) or gloo (CPU)."),
    backends: str = typer.Option("", "--backends",
                                 help="Comma list: nccl, nccl-ctas<k>, copy-engine, gloo (default by device)."),
    sizes: str = typer.Option("1KiB:1GiB:4", "--sizes", help="lo:hi:factor or a comma list (bytes, units allowed)."),
    collectives: str = typer.Option("all_gather,reduce_scatter,all_reduce,all_to_all", "--collectives"),
    iters: int = typer.Option(10, "--iters"),
    with_gemm: bool = typer.Option(False, "--with-gemm", help="Also each collective beside a GEMM (multi-GPU C3)."),
    timeout_s: float = typer.Option(120.0, "--timeout-s", help="Process-group timeout (a hung rank errors out)."),
    out: Path = OUT_OPT, script: str = SCRIPT_OPT, as_json: bool = JSON_OPT,
) -> None:
    """All-gather, reduce-scatter, all-reduce, all-to-all over NCCL, NCCL with few CTAs, copy engines: algbw, busbw."""
    from c3kit.runtime.bench import comm as cb

    torch, gpus, backend, world, dtype = _multi_ranks(world, backend)
    bl = [b.strip() for b in backends.split(",") if b.strip()] or (
        ["nccl", "nccl-ctas4", "nccl-ctas16", "copy-engine"] if backend == "nccl" else ["gloo"])
    kinds = [c.strip() for c in collectives.split(",") if c.strip()]
    bad = [k for k in kinds if k not in cb.COLLECTIVES]
    if bad:
        raise RuntimeSetupError(f"unknown collectives {bad}: use {', '.join(cb.COLLECTIVES)}")
    szs = _sizes(sizes)
    val = _run_ranks(cb.comm_sweep, world, backend, (tuple(bl), szs, tuple(kinds), dtype, iters, with_gemm), timeout_s)
    rows = val["rows"]
    from c3kit.runtime.calib import write_calibration

    gname = torch.cuda.get_device_name(0).replace("NVIDIA ", "") if backend == "nccl" else "cpu"
    slug = _multi_slug(torch, gpus, backend)
    extra = {"errors": json.dumps(val["errors"]), "ranks": str(world), "gpu_name": gname,
             "env": json.dumps({k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                                                                "NVSHMEM_DISABLE_NVLS")})}
    path = write_calibration(_out_path(out, slug, "comm"), "comm", cb.COLUMNS, rows, _meta(script, extra))
    if val.get("dma_rows"):
        write_calibration(variant_path(path, "", "dma"), "dma", cb.DMA_COLUMNS,
                          val["dma_rows"], _meta(script, {**extra, "note": "single copy_ pulls from the next rank's "
                                                          "symmetric buffer (one copy-engine command each)"}))
    c3_path = None
    if val["c3_rows"]:
        c3_path = write_calibration(variant_path(path, "multi", "c3"), "c3",
                                    cb.C3_COLUMNS, val["c3_rows"], _meta(script, extra))
    if as_json:
        emit_json({"path": str(path), "columns": cb.COLUMNS, "rows": rows, "c3_rows": val["c3_rows"],
                   "errors": val["errors"]})
        return
    _echo(f"# c3kit bench comm: {world} ranks, {backend}; S = nccl-tests size; time = slowest rank's median", False)
    for line in _table(["collective", "backend", "size(B)", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)"],
                       [[r[0], r[1], r[3], r[4], r[5], r[6] * 1e6, r[7] / 1e9, r[8] / 1e9] for r in rows]):
        _echo(line, False)
    if val["c3_rows"]:
        _echo("# collective beside a GEMM (fraction of ideal speedup realized)", False)
        for line in _table(["collective", "backend", "size(B)", "t_comp(us)", "t_comm(us)", "t_conc(us)", "frac",
                            "class"], [[r[0], r[1], r[3], r[8] * 1e6, r[9] * 1e6, r[10] * 1e6, r[15], r[16]]
                                       for r in val["c3_rows"]]):
            _echo(line, False)
    for e in val["errors"]:
        _echo(f"# not run: {e}", False)
    _echo(f"# wrote {len(rows)} rows to {path}" + (f" and {c3_path}" if c3_path else ""), False)


@bench_app.command("overlap")
def overlap_cmd(
    world: int = typer.Option(None, "--world", help="Ranks = TP size.", show_default="every GPU, or 2 on the CPU"),
    backend: str = typer.Option("", "--backend", help="nccl (GPUs) or gloo (CPU)."),
    models: str = typer.Option(None, "--models", help="Comma list of model shapes.",
                               show_default="llama3-70b,llama3-405b,mixtral-8x7b on GPUs; small on the CPU"),
    tokens: int = typer.Option(None, "--tokens", help="Tokens (rows) of the layer's input.",
                               show_default="8192 on GPUs; 1024 on the CPU"),
    comms: str = typer.Option("", "--comms", help="Comm backends of the ops (default nccl,copy-engine on GPUs)."),
    iters: int = typer.Option(5, "--iters"),
    quick: bool = typer.Option(False, "--quick", help="The small shape at 1024 tokens, 3 iterations: seconds on a CPU."),
    timeout_s: float = typer.Option(120.0, "--timeout-s"),
    out: Path = OUT_OPT, script: str = SCRIPT_OPT, as_json: bool = JSON_OPT,
) -> None:
    """Every schedule x backend of the runtime ops vs serial NCCL + cuBLAS, PyTorch's fused ops and ideal."""
    from c3kit.runtime.bench import overlap as ob

    torch, gpus, backend, world, dtype = _multi_ranks(world, backend)
    small = quick or backend == "gloo"  # full-size layers take hours on a CPU: trying it out there uses the small shape
    ms = [m.strip() for m in models.split(",")] if models is not None else list(
        ob.QUICK_MODELS if small else ob.FULL_MODELS)
    bad = [m for m in ms if m not in ob.MODELS]
    if bad:
        raise RuntimeSetupError(f"unknown models {bad}: use {', '.join(ob.MODELS)}")
    tokens = tokens if tokens is not None else (ob.QUICK_TOKENS if small else ob.FULL_TOKENS)
    if tokens <= 0 or tokens % world:
        raise RuntimeSetupError(f"--tokens {tokens}: give a positive multiple of the {world} ranks")
    if iters <= 0:
        raise RuntimeSetupError(f"--iters {iters}: give a positive number")
    iters = min(iters, 3) if quick else iters
    cl = tuple(c.strip() for c in comms.split(",") if c.strip()) or None
    if not as_json:
        _echo(f"# c3kit bench overlap: {', '.join(ms)} at {tokens} tokens, TP {world} over {backend}, {iters} iterations"
              + ("; CPU: small sizes (give --models and --tokens for others)" if small and models is None else ""),
              False)
    with progress_bar("timing schedules", not as_json) as update:
        val = _run_ranks(ob.overlap_sweep, world, backend, (tuple(ms), tokens, dtype, ("serial", "ring", "ficco", "auto"),
                                                            cl, iters, ("ag", "rs", "moe")), timeout_s,
                         progress=update)
    rows = val["rows"]
    from c3kit.runtime.calib import write_calibration

    slug = _multi_slug(torch, gpus, backend)
    extra = {"errors": json.dumps(val["errors"]), "ranks": str(world)}
    path = write_calibration(_out_path(out, slug, "overlap"), "overlap", ob.COLUMNS, rows, _meta(script, extra))
    summary = ob.summarize(rows)
    if as_json:
        emit_json({"path": str(path), "columns": ob.COLUMNS, "rows": rows, "summary": summary, "errors": val["errors"],
                   "auto": val.get("auto", [])})
        return
    _echo(f"# c3kit bench overlap: TP {world}, {backend}, {tokens} tokens", False)
    for line in _table(["op", "model", "impl", "schedule", "comm", "time(us)", "serial(us)", "ideal(us)", "speedup",
                        "frac"], [[r[0], r[1], r[8], r[9], r[10], r[11] * 1e6, r[14] * 1e6, r[15] * 1e6, r[16], r[17]]
                                  for r in rows]):
        _echo(line, False)
    _echo("# auto / best of (serial, torch fused); best c3kit / that; auto's fraction of ideal", False)
    for line in _table(["op", "model", "tp", "comm_share", "auto/base", "best/base", "auto_frac"], summary):
        _echo(line, False)
    for a in val.get("auto", []):
        _echo(f"# auto {a['op']} {a['model']} {a['comm']}: ran {a['schedule']} ({a['engine_schedule'] or 'size rule'})"
              + (f"; {a['note']}" if a["note"] else ""), False)
    for e in val["errors"]:
        _echo(f"# not run: {e}", False)
    _echo(f"# wrote {len(rows)} rows to {path}", False)


@bench_app.command("props")
def props_cmd(out: Path = out_file_option(None, "Also write the properties to this JSON file."),
              as_json: bool = JSON_OPT) -> None:
    """Device properties: SMs, L2, clocks, copy engines (asyncEngineCount), driver, torch/CUDA versions."""
    from c3kit.runtime.bench.props import device_properties

    d = device_properties()
    d["meta"] = _meta("")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(d, indent=1, default=str) + "\n")
    emit_json(d)


if __name__ == "__main__":
    # Run as `python -m c3kit.cli.bench_cmd ...` on machines where other CLI groups may not import.
    from c3kit.errors import C3kitError

    try:
        bench_app(prog_name="c3kit bench")
    except C3kitError as e:
        sys.stderr.write(f"error: {e}\n")
        raise SystemExit(2) from None
