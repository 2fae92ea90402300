"""CLI: `c3kit pim gemv`, `c3kit pim amenability`, `c3kit pim jitq` (PIMnast, Inclusive-PIM, JIT-Q)."""

from __future__ import annotations

from pathlib import Path

import typer

from c3kit.cli.common import JSON_OPT, console, emit_json, out_dir_option
from c3kit.cli.common import df_table as _df_table
from c3kit.errors import PimError

pim_app = typer.Typer(help="Processing-in-memory: GEMV placement, PIM amenability, just-in-time quantisation.",
                      no_args_is_help=True)

OUT_OPT = out_dir_option(None, "Report folder (CSV tables, PNG figures, report.md).")
PIM_HELP = "PIM memory from the catalog (lpddr5x-7500-pim, hbm-pim) or a TOML file."


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.add_typer(pim_app, name="pim")


def df_table(title: str, df, max_rows: int = 60):
    """A rich table whose first column (model or primitive names) never wraps or truncates."""
    t = _df_table(title, df, max_rows)
    if len(df):
        t.columns[0].no_wrap = True
        t.columns[0].min_width = max(len(str(v)) for v in df.iloc[:max_rows, 0])
    return t


def _records(df) -> list[dict]:
    """DataFrame rows for JSON, with NaN as null so the document stays strict JSON."""
    import math

    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in df.to_dict(orient="records")]


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise PimError(f"--{what} {text!r}: give whole numbers separated by commas, e.g. 1,2,4") from None
    if not vals or min(vals) <= 0:
        raise PimError(f"--{what} {text!r}: every value must be a positive whole number")
    return vals


def _memory(name: str, **overrides):
    from c3kit.pim.model import get_pim

    mem = get_pim(name)
    changes = {k: v for k, v in overrides.items() if v is not None}
    return mem.with_(**changes) if changes else mem


@pim_app.command("gemv")
def gemv_cmd(
    pim: str = typer.Option("lpddr5x-7500-pim", "--pim", help=PIM_HELP),
    model: str = typer.Option("all", "--model", help="OPT models, comma-separated (e.g. 125m,175b), or all."),
    batch: str = typer.Option("1,2,4", "--batch", help="Batch sizes, comma-separated."),
    context: int = typer.Option(1024, "--context", help="KV-cache length of the attention GEMVs (tokens)."),
    attention: str = typer.Option("pim", "--attention", help="Per-token model: attention GEMVs on pim or host."),
    input_modes: str = typer.Option("registers,commands", "--input-modes",
                                    help="Input-vector modes the search may use: registers, commands or both."),
    m: int = typer.Option(None, "--m", help="Place one GEMV of M rows (with --k) instead of the OPT sweep."),
    k: int = typer.Option(None, "--k", help="Reduction length K of the single GEMV."),
    tile_m: int = typer.Option(None, "--tile-m", help="Fix the tile height (single GEMV); else searched."),
    split_k: int = typer.Option(1, "--split-k", help="Split-K factor with --tile-m."),
    degree: int = typer.Option(1, "--degree", help="Tile order degree with --tile-m."),
    input_mode: str = typer.Option("registers", "--input-mode", help="registers or commands, with --tile-m."),
    channels: int = typer.Option(None, "--channels", help="Override: channels."),
    banks: int = typer.Option(None, "--banks-per-channel", help="Override: banks per channel."),
    in_regs: int = typer.Option(None, "--in-regs", help="Override: input registers per unit (power of two)."),
    out_regs: int = typer.Option(None, "--out-regs", help="Override: output registers per unit (power of two)."),
    out: Path = OUT_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """PIMnast: place decode GEMVs in PIM banks, search the knobs, compare with the host and the rooflines."""
    from c3kit.pim import pimnast
    from c3kit.pim.gemv import Gemv, Knobs, place, search

    mem = _memory(pim, channels=channels, banks_per_channel=banks, in_regs=in_regs, out_regs=out_regs)
    batches = _ints(batch, "batch")
    if (m is None) != (k is None):
        raise PimError("give both --m and --k for a single GEMV, or neither for the OPT sweep")
    if m is not None:
        rows = []
        for b in batches:
            g = Gemv(f"{m}x{k}", m, k, b)
            p = place(mem, g, Knobs(tile_m, split_k, degree, input_mode)) if tile_m else search(mem, g)
            rows.append(p)
        data = {"pim": mem.describe(), "placements": [{**p.row(), "explanation": p.explanation} for p in rows]}
        if out is not None:
            import pandas as pd

            from c3kit.report import Report

            with Report(out, f"PIM GEMV placement {m} x {k} on {mem.name}") as rep:
                rep.table("placements", pd.DataFrame(data["placements"]), "Best placement per batch")
                for p in rows:
                    rep.text(p.explanation)
        if json_out:
            emit_json(data)
            return
        import pandas as pd

        cols = ["batch", "tile", "split_k", "degree", "input_mode", "t_mac", "t_open", "t_input", "t_output",
                "pim_time", "host_time", "speedup", "roofline"]
        console.print(df_table(f"GEMV {m} x {k} on {mem.name} (times in us)", _us(pd.DataFrame(
            [p.row() for p in rows]), ["t_mac", "t_open", "t_input", "t_output", "pim_time", "host_time"])[cols]))
        for p in rows:
            console.print(p.explanation)
        return

    models = pimnast.opt_family() if model == "all" else [pimnast.get_opt(x) for x in model.split(",") if x.strip()]
    modes = tuple(x.strip() for x in input_modes.split(",") if x.strip())
    if not modes or set(modes) - {"registers", "commands"}:
        raise PimError(f"--input-modes {input_modes!r}: use registers, commands or registers,commands")
    if attention not in ("pim", "host"):
        raise PimError(f"--attention {attention!r}: use pim or host")
    gemvs = pimnast.gemv_table(mem, models, batches, context, modes=modes)
    ablation = pimnast.ablation_table(mem, models)
    tokens = pimnast.token_table(mem, models, batches, context, attention_on_pim=attention == "pim", modes=modes)
    summ = pimnast.summary(gemvs, tokens) if 1 in batches else None
    if out is not None:
        _gemv_report(out, mem, gemvs, tokens, summ, context, ablation)
    if json_out:
        emit_json({"pim": mem.describe(), "gemvs": _records(gemvs),
                   "tokens": _records(tokens), "ablation": _records(ablation),
                   "summary": None if summ is None else _records(summ)})
        return
    cols = ["model", "gemv", "M", "K", "batch", "tile", "split_k", "degree", "input_mode", "padding", "speedup",
            "roofline"]
    console.print(df_table(f"PIMnast GEMVs on {mem.name}: best placement, speedup over the host "
                           f"(boost {mem.bandwidth_boost:.2f}x, row-open roofline {mem.row_roofline:.2f}x)",
                           gemvs[cols].rename(columns=_SHORT), max_rows=len(gemvs)))
    console.print(df_table("Per-token decode latency (ms): host alone vs GEMVs on PIM",
                           _ms(tokens, ["host_token", "pim_token", "non_gemv"])[
                               ["model", "batch", "host_token", "pim_token", "non_gemv", "gemv_speedup",
                                "token_speedup"]].rename(columns=_SHORT), max_rows=len(tokens)))
    console.print(df_table("Knob ablation: batch-1 weight-GEMV speedup", ablation))
    if summ is not None:
        console.print(df_table("Ours beside PIMnast (batch 1; weight GEMVs QKV, out, FF1, FF2)", summ))


_SHORT = {"batch": "b", "split_k": "splitK", "degree": "deg", "input_mode": "input", "padding": "pad",
          "roofline": "roof", "host_token": "host", "pim_token": "pim", "non_gemv": "other",
          "gemv_speedup": "GEMV x", "token_speedup": "token x", "keeps_up": "keeps up", "pim_quantize": "t_pim",
          "fwd_compute": "t_fwd", "throughput_loss": "loss", "loss_vs_free_copies": "loss (free copies)"}


def _us(df, cols):
    df = df.copy()
    for c in cols:
        df[c] = df[c] * 1e6
    return df


def _ms(df, cols):
    df = df.copy()
    for c in cols:
        df[c] = df[c] * 1e3
    return df


def _gemv_report(out, mem, gemvs, tokens, summ, context, ablation) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from c3kit.report import Report

    with Report(out, f"PIMnast GEMV placement on {mem.name}") as rep:
        rep.text(f"PIM memory {mem.name}: {mem.units} units, bandwidth boost {mem.bandwidth_boost:.2f}x, "
                 f"row-open roofline {mem.row_roofline:.2f}x; attention GEMVs at a {context}-token KV cache.")
        if summ is not None:
            rep.table("summary", summ, "Ours beside the published PIMnast figures")
        rep.table("ablation", ablation, "Knob ablation (batch 1, weight GEMVs)")
        rep.table("gemvs", gemvs.drop(columns=["explanation"]), "Best placement of every GEMV")
        rep.table("tokens", tokens, "Per-token decode latency (s)")
        rep.table("explanations", gemvs[["model", "gemv", "batch", "explanation"]], "Why each placement")
        fig, ax = plt.subplots(figsize=(9, 4))
        w = gemvs[gemvs.batch == gemvs.batch.min()]
        for name, grp in w.groupby("gemv", sort=False):
            ax.plot(grp.model, grp.speedup, marker="o", label=name)
        ax.axhline(mem.bandwidth_boost, ls="--", c="k", lw=0.8, label="bandwidth boost")
        ax.axhline(mem.row_roofline, ls=":", c="k", lw=0.8, label="row-open roofline")
        ax.set_ylabel("GEMV speedup over host")
        ax.set_title(f"PIMnast GEMVs, batch {int(w.batch.min())}")
        ax.tick_params(axis="x", rotation=45)
        ax.legend(fontsize=7, ncol=2)
        rep.figure("gemv_speedup", fig, "GEMV speedup per OPT model vs the rooflines")
        fig, ax = plt.subplots(figsize=(9, 4))
        for b, grp in tokens.groupby("batch"):
            ax.plot(grp.model, grp.token_speedup, marker="o", label=f"batch {b}")
        ax.set_ylabel("per-token speedup")
        ax.tick_params(axis="x", rotation=45)
        ax.legend()
        rep.figure("token_speedup", fig, "Per-token decode speedup (non-GEMV work on the host)")


@pim_app.command("amenability")
def amenability_cmd(
    pim: str = typer.Option("hbm-pim", "--pim", help=PIM_HELP),
    primitive: str = typer.Option("all", "--primitive", help="Primitives, comma-separated, or all."),
    arch: bool = typer.Option(True, "--arch/--no-arch", help="Architecture-aware mappings in the 'selected' set."),
    sparsity: bool = typer.Option(True, "--sparsity/--no-sparsity", help="Sparsity-aware mappings in 'selected'."),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Cache-aware mappings in 'selected'."),
    traits: Path = typer.Option(None, "--traits", help="JSON file of one primitive's traits: run only the test."),
    out: Path = OUT_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Inclusive-PIM: the amenability test and PIM-over-GPU speedups, baseline vs optimised mappings."""
    from c3kit.pim import amenability as am

    mem = _memory(pim)
    if traits is not None:
        v = am.test(_read_traits(am, traits), mem)
        data = {"amenable": v.amenable, "failing": list(v.failing),
                "checks": {k: {"value": a, "threshold": b, "passed": c} for k, (a, b, c) in v.checks.items()}}
        if json_out:
            emit_json(data)
            return
        from c3kit.cli.common import rich_table

        console.print(rich_table(f"Amenability of {traits.name} on {mem.name}: "
                                 f"{'amenable' if v.amenable else 'not amenable'}",
                                 ["trait", "value", "threshold", "passed"],
                                 [[k, a, b, c] for k, (a, b, c) in v.checks.items()]))
        return
    names = None if primitive == "all" else [p.strip() for p in primitive.split(",") if p.strip()]
    table = am.speedup_table(mem, names)
    summ = am.summary(table) if names is None else None
    sel = table[(table.arch == arch) & (table.sparsity == sparsity) & (table.cache == cache)]
    base = table[~table.arch & ~table.sparsity & ~table.cache]
    if out is not None:
        _amen_report(out, mem, table, base, sel, summ, am.ASSUMED)
    if json_out:
        emit_json({"pim": mem.name, "table": _records(table), "assumed": am.ASSUMED,
                   "summary": None if summ is None else _records(summ)})
        return
    cols = ["primitive", "amenable", "failing", "gpu_time", "pim_time", "speedup"]
    side = base[cols].merge(sel[cols], on="primitive", suffixes=("_base", "_opt"))
    for c in ("gpu_time_base", "pim_time_base", "gpu_time_opt", "pim_time_opt"):
        side[c] = side[c] * 1e3
    console.print(df_table(f"Inclusive-PIM on {mem.name}: PIM over GPU, baseline vs selected "
                           f"(arch={arch}, sparsity={sparsity}, cache={cache}); times in ms",
                           side[["primitive", "amenable_base", "failing_base", "speedup_base", "amenable_opt",
                                 "failing_opt", "speedup_opt"]]))
    if summ is not None:
        console.print(df_table("Ours beside Inclusive-PIM (arithmetic mean over primitives)", summ))
    console.print("Assumed (the papers' strawman parameters were not available):")
    for k, v in am.ASSUMED.items():
        console.print(f"  {k}: {v}")


def _read_traits(am, path: Path):
    import json

    try:
        d = json.loads(Path(path).read_text())
        d.setdefault("name", Path(path).stem)
        d["alu_ops"] = tuple(d.get("alu_ops", ()))
        return am.Traits(**d)
    except FileNotFoundError:
        raise PimError(f"--traits {path}: no such file") from None
    except (UnicodeDecodeError, IsADirectoryError):
        raise PimError(f"--traits {path}: not a text file (expected a UTF-8 JSON object)") from None
    except (json.JSONDecodeError, TypeError) as e:
        raise PimError(f"--traits {path}: expected a JSON object with touched_bytes, gpu_bytes, flops, pattern, "
                       f"bank_local, alu_ops, cmds_per_open ({e})") from None


def _amen_report(out, mem, table, base, sel, summ, assumed) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from c3kit.report import Report

    with Report(out, f"Inclusive-PIM amenability on {mem.name}") as rep:
        if summ is not None:
            rep.table("summary", summ, "Ours beside the published Inclusive-PIM averages")
        rep.table("speedups", table, "Every primitive under every optimisation switch", show_rows=60)
        rep.table("assumed", pd.DataFrame([{"parameter": k, "assumption": v} for k, v in assumed.items()]),
                  "Assumed parameters")
        fig, ax = plt.subplots(figsize=(8, 4))
        x = range(len(base))
        ax.bar([i - 0.2 for i in x], base.speedup, width=0.4, label="baseline")
        ax.bar([i + 0.2 for i in x], sel.speedup, width=0.4, label="optimised")
        ax.axhline(1.0, c="k", lw=0.8)
        ax.set_xticks(list(x), base.primitive, rotation=30)
        ax.set_ylabel("PIM speedup over GPU")
        ax.set_yscale("log")
        ax.legend()
        rep.figure("speedups", fig, "PIM over GPU per primitive, baseline vs optimised mapping")


@pim_app.command("jitq")
def jitq_cmd(
    model: str = typer.Option("OPT-175B", "--model", help="OPT model whose layers are trained."),
    gpu: str = typer.Option("H200-SXM", "--gpu", help="GPU from `c3kit hw list`."),
    pim: str = typer.Option("hbm-pim", "--pim", help=PIM_HELP + " Its boost and row efficiency are used."),
    tokens: str = typer.Option("256,512,1024,2048,4096,8192", "--tokens", help="Tokens per micro-batch per GPU."),
    seq: int = typer.Option(2048, "--seq", help="Sequence length."),
    accum: int = typer.Option(8, "--accum", help="Micro-batches per optimizer step (baseline re-quantises once)."),
    mfu: float = typer.Option(0.5, "--mfu", help="Fraction of the GPU's BF16 peak the layer GEMMs reach."),
    cmds_per_word: float = typer.Option(4.0, "--cmds-per-word", help="PIM commands to quantise one FP32 word."),
    formats: str = typer.Option("mx9,mx6,mx4", "--formats", help="MX formats, comma-separated."),
    out: Path = OUT_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """JIT-Q: MX quantiser accuracy, the training memory ledger, and the PIM-overlapped throughput."""
    import numpy as np

    from c3kit.hw import get_gpu
    from c3kit.pim import jitq, mx
    from c3kit.pim.pimnast import get_opt

    if not 0 < mfu <= 1:
        raise PimError(f"--mfu {mfu}: must be in (0, 1]")
    fmts = [mx.get_format(f).name for f in formats.split(",") if f.strip()]
    opt = get_opt(model)
    g = get_gpu(gpu)
    setup = jitq.setup_from(g.peak_flops("bf16") * mfu, g.hbm_bw, _memory(pim), cmds_per_word)
    h, layers = opt.hidden, opt.layers
    ppl = 12.0 * h * h
    toks = _ints(tokens, "tokens")
    qerr = _quant_table(np, mx, fmts)
    led = jitq.ledger_table(ppl, layers, h, max(toks), other_params=opt.vocab * h, fmts=fmts)
    thr = jitq.throughput_table(ppl, layers, h, seq, setup, toks, fmts, accum)
    summ = jitq.summary(led, thr)
    if out is not None:
        _jitq_report(out, opt, g, qerr, led, thr, summ)
    if json_out:
        emit_json({"model": opt.name, "gpu": g.name, "quantizers": _records(qerr),
                   "ledger": _records(led), "throughput": _records(thr),
                   "summary": _records(summ)})
        return
    console.print(df_table("MX round trip on N(0,1) data (blocks of 16 along the dot-product axis)", qerr))
    show = led[led.recompute == "full"].copy()
    for c in ("baseline_bytes", "jitq_bytes"):
        show[c] = show[c] / 1e9
    console.print(df_table(f"Training memory per replica, {opt.name} (GB; full recompute)",
                           show[["format", "optimizer", "gradients", "baseline_bytes", "jitq_bytes", "saved"]],
                           max_rows=len(show)))
    console.print(df_table(f"Throughput: PIM quantises layer l+1 while {g.name} computes layer l",
                           thr[["format", "tokens", "keeps_up", "pim_quantize", "fwd_compute", "throughput_loss",
                                "loss_vs_free_copies"]].rename(columns=_SHORT), max_rows=len(thr)))
    console.print(df_table("Ours beside JIT-Q", summ))


def _quant_table(np, mx, fmts):
    import pandas as pd

    x = np.random.default_rng(0).standard_normal((256, 256))
    rows = []
    for f in fmts:
        fmt = mx.get_format(f)
        y = mx.round_trip(x, fmt, axis=1)
        bound = mx.block_bound(x, fmt, axis=1)
        rows.append({"format": fmt.name, "bits_per_element": fmt.bits_per_element,
                     "bytes_per_element": fmt.bytes_per_element, "rms_error": float(np.sqrt(np.mean((y - x) ** 2))),
                     "max_error_over_bound": float(np.max(np.abs(y - x) / bound)),
                     "sqnr_db": float(10 * np.log10(np.mean(x ** 2) / np.mean((y - x) ** 2)))})
    return pd.DataFrame(rows)


def _jitq_report(out, opt, g, qerr, led, thr, summ) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from c3kit.report import Report

    with Report(out, f"JIT-Q on {g.name}, {opt.name}") as rep:
        rep.table("summary", summ, "Ours beside the published JIT-Q figures")
        rep.table("quantizers", qerr, "MX quantise-dequantise error")
        rep.table("ledger", led, "Training memory ledger (bytes)")
        rep.table("throughput", thr, "Throughput model (seconds per micro-batch)")
        fig, ax = plt.subplots(figsize=(8, 4))
        best = led[(led.recompute == "full") & (led.gradients == "fp32")]
        for f, grp in best.groupby("format", sort=False):
            ax.plot(grp.optimizer, grp.saved * 100, marker="o", label=f)
        ax.axhline(24, ls="--", c="k", lw=0.8, label="published (up to 24%)")
        ax.set_ylabel("capacity saved (%)")
        ax.legend()
        rep.figure("capacity_saved", fig, "Capacity JIT-Q saves per optimizer and format (FP32 gradients)")
        fig, ax = plt.subplots(figsize=(8, 4))
        for f, grp in thr.groupby("format", sort=False):
            ax.semilogx(grp.tokens, grp.loss_vs_free_copies * 100, marker="o", label=f)
        ax.axhline(2.4, ls="--", c="k", lw=0.8, label="published (up to 2.4%)")
        ax.set_xlabel("tokens per micro-batch")
        ax.set_ylabel("throughput loss (%)")
        ax.legend()
        rep.figure("throughput_loss", fig, "Throughput loss of JIT-Q vs a baseline whose copies are free")
