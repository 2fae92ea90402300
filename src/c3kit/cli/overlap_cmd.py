"""CLI: `c3kit overlap` (one op or a whole model configuration, every schedule ranked) and `c3kit overlap eval`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from c3kit.cli.common import JSON_OPT, console, emit_json, out_file_option, progress_bar, rich_table
from c3kit.errors import OverlapError
from c3kit.units import fmt_time, parse_bytes


def _params(calib: Optional[Path], gpu):
    from c3kit.sim.params import ContentionParams

    if calib is not None:
        return ContentionParams.from_calibration(gpu.name, calib)
    return ContentionParams.from_calibration(gpu.name)


def _schedule_list(text: Optional[str]) -> Optional[list[str]]:
    if not text:
        return None
    return [s.strip() for s in text.split(",") if s.strip()]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if abs(x) >= 5e-4 else "0%"


def _result_rows(results):
    return [(r.rank, r.schedule + ("*" if not r.realizable else ""), fmt_time(r.time), f"{r.speedup:.3f}",
             _pct(r.fraction_of_ideal), _pct(r.dil), _pct(r.contention_comp), _pct(r.contention_comm),
             fmt_time(r.exposed_comm)) for r in results]


_COLS = ("#", "schedule", "time", "speedup", "of ideal", "DIL", "cont.comp", "cont.comm", "exposed")


def _one(problem, gpu, params, schedules, trace: Optional[Path], as_json: bool) -> None:
    from c3kit.overlap import baseline, best, evaluate, select

    results = evaluate(problem, gpu, schedules, params, trace=trace is not None)
    base = baseline(problem, gpu, params)
    pick, reasons = select(problem, gpu)
    top = best(results)
    if trace is not None:
        chosen = next((r for r in results if r.schedule == pick), top)
        try:
            trace.write_text(chosen.timeline.perfetto_json(f"c3kit {problem.label()} {chosen.schedule}"))
        except OSError as e:
            raise OverlapError(f"cannot write trace {trace}: {e.strerror}") from None
    if as_json:
        emit_json({"problem": problem.to_dict(), "hw": gpu.name, "t_comp": base.t_comp, "t_comm": base.t_comm,
                   "comm_engine": base.comm_engine, "serial": base.serial, "ideal": base.ideal,
                   "speedup_ideal": base.speedup_ideal, "scenario": base.scenario,
                   "results": [r.to_dict() for r in results], "best": top.schedule,
                   "chosen": pick, "reasons": reasons, "params": params.to_dict(),
                   "trace": str(trace) if trace else None})
        return
    console.print(f"[bold]{problem.label()}[/bold] on {gpu.name}: T_comp {fmt_time(base.t_comp)}, "
                  f"T_comm {fmt_time(base.t_comm)} ({base.comm_engine}), serial {fmt_time(base.serial)}, "
                  f"ideal {fmt_time(base.ideal)} (S_ideal {base.speedup_ideal:.3f}, {base.scenario})")
    console.print(rich_table("schedules, fastest first", _COLS, _result_rows(results)))
    if any(not r.realizable for r in results):
        console.print("* what-if: needs tile-completion trackers with near-memory reduction (T3), not in any catalog GPU")
    console.print(f"best (simulated): [bold]{top.schedule}[/bold] {top.speedup:.3f}x")
    chosen = next((r for r in results if r.schedule == pick), None)
    extra = f" {chosen.speedup:.3f}x ({chosen.speedup / top.speedup:.1%} of best)" if chosen else ""
    console.print(f"chosen (heuristic): [bold]{pick}[/bold]{extra}")
    for r in reasons:
        console.print(f"  - {r}")
    if trace is not None:
        console.print(f"trace of {chosen.schedule if chosen else top.schedule} written to {trace}")


def _model(name, tp, ep, tokens, dtype, sp, gpu, params, as_json: bool) -> None:
    from c3kit.overlap import best, evaluate, select
    from c3kit.overlap.scenarios import model_pairs

    pairs = model_pairs(name, tp=tp, ep=ep, tokens=tokens, dtype=dtype, sp=sp)
    rows, doc = [], []
    tot_serial = tot_best = tot_pick = 0.0
    for pr in pairs:
        res = evaluate(pr.problem, gpu, None, params)
        top = best(res)
        pick, reasons = select(pr.problem, gpu)
        chosen = next(r for r in res if r.schedule == pick)
        tot_serial += top.serial * pr.count
        tot_best += top.time * pr.count
        tot_pick += chosen.time * pr.count
        rows.append((pr.label, pr.problem.label(), top.schedule, f"{top.speedup:.3f}", pick,
                     f"{chosen.speedup:.3f}", f"{top.speedup_ideal:.3f}", pr.count))
        doc.append({"label": pr.label, "problem": pr.problem.to_dict(), "count": pr.count, "best": top.schedule,
                    "best_speedup": top.speedup, "chosen": pick, "chosen_speedup": chosen.speedup,
                    "speedup_ideal": top.speedup_ideal, "reasons": reasons,
                    "results": [r.to_dict() for r in res]})
    if as_json:
        emit_json({"model": name, "tp": tp, "ep": ep, "tokens": tokens, "dtype": dtype, "hw": gpu.name,
                   "pairs": doc, "serial_total": tot_serial, "best_total": tot_best, "chosen_total": tot_pick})
        return
    console.print(rich_table(f"{name} TP {tp} EP {ep or '-'} tokens {tokens} {dtype} on {gpu.name}",
                             ("pair", "problem", "best", "S", "chosen", "S chosen", "S ideal", "x per step"), rows))
    console.print(f"communication pairs per step: serial {fmt_time(tot_serial)}, best {fmt_time(tot_best)} "
                  f"({tot_serial / tot_best:.3f}x), chosen {fmt_time(tot_pick)} ({tot_serial / tot_pick:.3f}x)")


overlap_app = typer.Typer(help="Overlap schedules for compute/communication pairs: simulate, rank, choose.",
                          no_args_is_help=False, invoke_without_command=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.add_typer(overlap_app, name="overlap")


@overlap_app.callback(invoke_without_command=True)
def overlap(ctx: typer.Context,
            pattern: Optional[str] = typer.Option(None, help="ag_gemm | gemm_rs | gemm_ar | moe | bulk"),
            m: Optional[int] = typer.Option(None, help="rows (gathered rows for ag_gemm; token rows for moe)"),
            n: Optional[int] = typer.Option(None, help="GEMM columns on this GPU"),
            k: Optional[int] = typer.Option(None, help="GEMM inner dimension on this GPU"),
            dtype: str = typer.Option("bf16", help="bf16 | fp16 | fp8 | fp32"),
            hw: str = typer.Option("H200", help="GPU name from `c3kit hw list` or a TOML file"),
            gpus: int = typer.Option(8, help="GPUs in the TP/EP group"),
            experts: int = typer.Option(0, help="moe: experts in total"),
            collective: str = typer.Option("all_reduce", help="bulk: the independent collective"),
            comm_bytes: Optional[str] = typer.Option(None, help="bulk: collective size, e.g. 64MB"),
            schedules: Optional[str] = typer.Option(None, help="comma-separated schedule names (default all)"),
            model: Optional[str] = typer.Option(None, help="evaluate every TP/EP pair of a model preset"),
            tp: int = typer.Option(8, help="--model: tensor-parallel size"),
            ep: int = typer.Option(0, help="--model: expert-parallel size (MoE models)"),
            tokens: int = typer.Option(8192, help="--model: tokens (sequence x micro-batch) per TP group"),
            sp: bool = typer.Option(True, "--sp/--no-sp", help="--model: sequence parallel (AG/RS) or AR"),
            calib: Optional[Path] = typer.Option(None, help="contention calibration JSON (default: shipped)"),
            trace: Optional[Path] = out_file_option(None, "write the chosen schedule's Perfetto trace JSON",
                                                    "--trace"),
            json_: bool = JSON_OPT) -> None:
    """Rank every schedule of one op (--pattern, --m, --n, --k) or of a model (--model), and pick one."""
    if ctx.invoked_subcommand is not None:
        return
    from c3kit.hw.catalog import get_gpu
    from c3kit.overlap import OverlapProblem

    gpu = get_gpu(hw)
    params = _params(calib, gpu)
    if model is not None:
        _model(model, tp, ep, tokens, dtype, sp, gpu, params, json_)
        return
    if pattern is None or m is None or n is None or k is None:
        raise OverlapError("give --pattern, --m, --n and --k (or --model NAME); see `c3kit overlap --help`")
    cb = parse_bytes(comm_bytes) if comm_bytes else 0.0
    problem = OverlapProblem(pattern, m, n, k, dtype, gpus, experts=experts, collective=collective, comm_bytes=cb)
    _one(problem, gpu, params, _schedule_list(schedules), trace, json_)


@overlap_app.command("eval")
def eval_cmd(hw: str = typer.Option("MI300X,H200", help="comma-separated GPUs"),
             held_out: float = typer.Option(0.5, help="share of models held out"),
             seed: int = typer.Option(0, help="split seed"),
             models: Optional[str] = typer.Option(None, help="comma-separated model presets (default: nine)"),
             tokens: Optional[str] = typer.Option(None, help="comma-separated token counts (default 1K..16K)"),
             json_: bool = JSON_OPT) -> None:
    """Score the heuristic on held-out scenarios: optimal picks, mean and worst speedup ratio to the optimum."""
    from c3kit.overlap.heuristic import evaluate_heuristic

    hws = tuple(h.strip() for h in hw.split(",") if h.strip())
    if not 0 < held_out < 1:
        raise OverlapError("--held-out must be between 0 and 1")
    ms = tuple(x.strip() for x in models.split(",") if x.strip()) if models else None
    try:
        ts = tuple(int(x) for x in tokens.split(",") if x.strip()) if tokens else None
    except ValueError:
        raise OverlapError(f"--tokens must be comma-separated integers, got {tokens!r}") from None
    with progress_bar("simulating scenarios", not json_) as update:
        rep = evaluate_heuristic(hw=hws, held_out=held_out, seed=seed, models=ms, tokens=ts, progress=update)
    if json_:
        emit_json(rep)
        return
    for split in ("design", "held-out"):
        s = rep[split]
        console.print(f"[bold]{split}[/bold]: {s['scenarios']} scenarios, optimal picks {s['optimal_share']:.1%} "
                      f"(within 1%: {s['within_1pct_share']:.1%}), speedup ratio to the optimum: mean "
                      f"{s['mean_ratio']:.2%}, worst {s['worst_ratio']:.2%}")
    rows = [(h["split"], h["hw"], h["problem"], h["best"], h["chosen"], f"{h['ratio']:.3f}")
            for h in rep["misses"][:25]]
    if rows:
        console.print(rich_table("non-optimal picks (first 25)", ("split", "hw", "problem", "best", "chosen",
                                                                  "ratio"), rows))
    console.print(f"models held out: {', '.join(rep['held_out_models'])}; simulating all schedules "
                  f"{rep['ms_per_operator']:.2f} ms per operator, selecting {rep['ms_per_select']:.2f} ms")


@overlap_app.command("validate")
def validate_cmd(data: Optional[Path] = typer.Option(None, help="dataset CSV (default: the shipped "
                                                                 "published_overlap.csv)"),
                 split: str = typer.Option("all", help="fit, held-out or all"),
                 power: str = typer.Option("sustained", help="GEMM clocks: sustained (as the benchmarks "
                                                             "ran, after warm-up) or burst"),
                 json_: bool = JSON_OPT) -> None:
    """Measured against predicted per schedule on published overlapped ops, and the selector's choice."""
    from c3kit.overlap.validate import SPLITS, validate

    if split not in (*SPLITS, "all"):
        raise OverlapError(f"--split must be fit, held-out or all, got {split!r}")
    rep = validate(data, power=power)
    cases = [c for c in rep.cases if split == "all" or c.split == split]
    if json_:
        doc = rep.to_dict()
        doc["cases"] = [d for d in doc["cases"] if split == "all" or d["split"] == split]
        emit_json({**doc, "power": power})
        return
    rows = []
    for c in cases:
        for r in c.rows:
            mark = " <- chosen" if r.schedule == c.chosen else ""
            rows.append((c.split, c.case, r.implementation[:44], r.schedule or "-", fmt_time(r.measured),
                         fmt_time(r.predicted) if r.predicted is not None else "-",
                         f"{100 * r.error:+.1f}%" if r.error is not None else "-",
                         ("best" if r.schedule == c.measured_best else "") + mark))
    console.print(rich_table(f"published overlapped ops: measured vs predicted ({power} GEMM clocks)",
                             ("split", "case", "implementation", "schedule", "measured", "predicted",
                              "error", "measured best / chosen"), rows))
    for s in (SPLITS if split == "all" else (split,)):
        sc = rep.scores[s]

        def pct(x):
            return "-" if x is None else f"{100 * x:.1f}%"

        console.print(f"[bold]{s}[/bold] ({sc['cases']} cases): median |error| serial {pct(sc['serial_median_abs_error'])}, "
                      f"async TP (ring-dma) {pct(sc['async_tp_median_abs_error'])}, all {pct(sc['all_median_abs_error'])}; "
                      f"'overlap beats serial' sign right {pct(sc['sign_right_share'])} of {sc['sign_rows']} rows; "
                      f"selector chose the measured best in {pct(sc['selector_best_share'])} of cases "
                      f"(worst: {sc['selector_worst_vs_best'] or 1:.2f}x the best)")
    console.print("targets on held-out rows: serial and async-TP median |error| <= 10%, sign right >= 90%")
