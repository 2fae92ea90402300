"""FiCCO study: the overlap design space over model-preset scenarios on 8-GPU MI300X (mesh) and H200 (switch) nodes.

Every scenario (a TP/EP communication pair of a model layer: AG->GEMM, GEMM->RS, MoE A2A->GEMM->A2A, from
c3kit.overlap.scenarios at TP = EP = 8) is simulated under every applicable schedule with
c3kit.overlap.evaluate. We report speedup over serial per schedule, the decomposition inefficiency loss
(DIL) and contention losses that explain it, the heuristic's pick (c3kit.overlap.select) against the
oracle (the fastest realizable schedule), and the best ("up to") speedup.
"""

from __future__ import annotations

import math

import pandas as pd

from c3kit.errors import C3kitError, StudyError
from c3kit.studies.all_studies import PREDICTED, StudyResult

# FiCCO (arXiv 2512.10236): up to 1.6x over serial; heuristics optimal in 81% of unseen scenarios;
# exposed data-dependent communication leaves up to 1.7x on the table
PUBLISHED = {"up_to_speedup": 1.6, "heuristic_optimal_unseen": 0.81, "up_to_ideal": 1.7}
HW = ("MI300X", "H200")
TOKENS = (1024, 2048, 4096, 8192, 16384)
DTYPES = ("bf16", "fp8")
QUICK_TOKENS = (4096,)
QUICK_MODELS = ("Llama-3-70B", "Mixtral-8x7B")
NEAR = 0.02  # a pick within 2% of the oracle's time also counts as "near-optimal"


def _scenarios(gpus: tuple[str, ...], quick: bool):
    from c3kit.overlap.scenarios import EVAL_MODELS, scenarios

    if quick:
        return scenarios(hw=gpus, models=QUICK_MODELS, tps=(8,), tokens=QUICK_TOKENS, dtypes=("bf16",))
    return scenarios(hw=gpus, models=EVAL_MODELS, tps=(8,), tokens=TOKENS, dtypes=DTYPES)


def run(gpus: tuple[str, ...] | None = None, quick: bool = False, progress=None) -> StudyResult:
    """The FiCCO design-space study (every applicable schedule on every scenario; heuristic vs oracle).

    progress(done, total), when given, is called after every scenario.
    """
    hw, scen = _setup(tuple(gpus or HW), quick)
    rows, picks = _evaluate(scen, hw, progress)
    df, pk = pd.DataFrame(rows), pd.DataFrame(picks)
    real = df[df.realizable]
    summary = _summary(pk)
    headline = {r.metric: dict(ours=r.ours, published=r.published, basis=r.basis) for r in summary.itertuples()}
    return StudyResult(
        name="ficco", title="FiCCO: finer-grain compute-communication overlap design space", summary=summary,
        tables=dict(ficco_schedules=_per_schedule(real, pk), ficco_losses=_losses(real),
                    ficco_confusion=pk.groupby(["hw", "heuristic", "oracle"]).size().rename("scenarios").reset_index(),
                    ficco_picks=pk, ficco_all=df),
        figures=[("ficco_speedup", lambda: _fig_speedup(real), "speedup over serial per schedule family"),
                 ("ficco_losses", lambda: _fig_losses(real), "DIL and contention loss vs sub-GEMM rows"),
                 ("ficco_heuristic", lambda: _fig_pick(pk), "heuristic pick vs oracle speedup")],
        notes=_notes(pk, real, hw, quick), headline=headline)


def _setup(gpus: tuple[str, ...], quick: bool):
    """The catalog GPUs (nodes of 8 only) and the study's scenarios on them; StudyError on bad input."""
    from c3kit.hw.catalog import get_gpu

    try:
        hw = {g: get_gpu(g) for g in gpus}
        for g, spec in hw.items():
            if spec.gpus_per_node < 8:
                raise StudyError(f"{g}: FiCCO needs nodes of 8 GPUs, {spec.name} has {spec.gpus_per_node}")
        scen = _scenarios(gpus, quick)
    except StudyError:
        raise
    except C3kitError as e:
        raise StudyError(str(e)) from None
    if not scen:
        raise StudyError("no scenarios: the chosen GPUs or models produced no communication pairs")
    return hw, scen


def _evaluate(scen, hw: dict, progress) -> tuple[list[dict], list[dict]]:
    """Every schedule of every scenario (one row each) and the heuristic's pick beside the oracle's (one each)."""
    from c3kit.overlap import best, evaluate, select

    rows, picks = [], []
    for i, s in enumerate(scen):
        gpu = hw[s.hw]
        try:
            res = evaluate(s.problem, gpu)
            pick, reasons = select(s.problem, gpu)
        except C3kitError as e:
            raise StudyError(f"scenario {s.model} {s.label} on {s.hw}: {e}") from None
        pr = s.problem
        common = dict(scenario=i, model=s.model, pair=s.label, hw=gpu.name, topology=gpu.scaleup.topology,
                      split=s.split, pattern=pr.pattern, m=pr.m, n=pr.n, k=pr.k, dtype=pr.dtype)
        for r in res:
            rows.append(dict(common, schedule=r.schedule, family=r.family, engine=r.engine, realizable=r.realizable,
                             time_s=r.time, speedup=r.speedup, speedup_ideal=r.speedup_ideal,
                             fraction_of_ideal=r.fraction_of_ideal, dil=r.dil, contention_comp=r.contention_comp,
                             contention_comm=r.contention_comm, exposed_comm_s=r.exposed_comm))
        oracle = best(res)
        by_name = {r.schedule: r for r in res}
        h = by_name.get(pick)
        if progress is not None:
            progress(i + 1, len(scen))
        picks.append(dict(common, oracle=oracle.schedule, oracle_speedup=oracle.speedup, heuristic=pick,
                          heuristic_speedup=h.speedup if h else float("nan"),
                          heuristic_realizable=bool(h and h.realizable),
                          optimal=pick == oracle.schedule,
                          near_optimal=bool(h and h.time <= oracle.time * (1 + NEAR)),
                          heuristic_vs_oracle=(oracle.time / h.time) if h else float("nan"),
                          speedup_ideal=oracle.speedup_ideal, reasons="; ".join(reasons)))
    return rows, picks


def _per_schedule(real: pd.DataFrame, pk: pd.DataFrame) -> pd.DataFrame:
    """Per GPU and schedule: geomean and best speedup, mean losses, and how often it was the oracle."""
    per_sched = (real.groupby(["hw", "schedule"])
                 .agg(family=("family", "first"), scenarios=("speedup", "size"),
                      geomean_speedup=("speedup", lambda x: math.exp(sum(map(math.log, x)) / len(x))),
                      max_speedup=("speedup", "max"), mean_dil=("dil", "mean"),
                      mean_contention_comp=("contention_comp", "mean"),
                      mean_contention_comm=("contention_comm", "mean"))
                 .reset_index())
    wins = pk.groupby(["hw", "oracle"]).size().rename("times_oracle").reset_index().rename(
        columns={"oracle": "schedule"})
    per_sched = per_sched.merge(wins, on=["hw", "schedule"], how="left").fillna({"times_oracle": 0})
    return per_sched.sort_values(["hw", "geomean_speedup"], ascending=[True, False])


def _losses(real: pd.DataFrame) -> pd.DataFrame:
    """Per GPU, family and pattern: decomposition (DIL) and contention losses and the geomean speedup."""
    return (real.groupby(["hw", "family", "pattern"])
            .agg(mean_dil=("dil", "mean"), max_dil=("dil", "max"), mean_contention_comp=("contention_comp", "mean"),
                 mean_contention_comm=("contention_comm", "mean"), geomean_speedup=(
                     "speedup", lambda x: math.exp(sum(map(math.log, x)) / len(x))))
            .reset_index())


def _summary(pk: pd.DataFrame) -> pd.DataFrame:
    """Our headline figures beside FiCCO's published ones, with their basis."""
    held = pk[pk.split == "held-out"]
    summary_rows = []
    for g in sorted(set(pk.hw)):
        d = pk[pk.hw == g]
        summary_rows.append(dict(metric=f"up to speedup over serial ({g})", ours=d.oracle_speedup.max(),
                                 published=PUBLISHED["up_to_speedup"]))
        summary_rows.append(dict(metric=f"up to ideal speedup ({g})", ours=d.speedup_ideal.max(),
                                 published=PUBLISHED["up_to_ideal"]))
        summary_rows.append(dict(metric=f"geomean oracle speedup ({g})",
                                 ours=math.exp(sum(map(math.log, d.oracle_speedup)) / len(d)), published=float("nan")))
    summary_rows.append(dict(metric="heuristic optimal, held-out scenarios",
                             ours=held.optimal.mean() if len(held) else float("nan"),
                             published=PUBLISHED["heuristic_optimal_unseen"]))
    summary_rows.append(dict(metric="heuristic optimal, all scenarios", ours=pk.optimal.mean(),
                             published=float("nan")))
    summary_rows.append(dict(metric=f"heuristic within {NEAR:.0%} of oracle, held-out",
                             ours=held.near_optimal.mean() if len(held) else float("nan"), published=float("nan")))
    summary_rows.append(dict(metric="heuristic time / oracle time, mean", ours=1 / pk.heuristic_vs_oracle.mean(),
                             published=float("nan")))
    summary = pd.DataFrame(summary_rows)
    summary["gap"] = summary.ours - summary.published
    # the selector's one fitted choice (its number of walks) was made against our simulator on the design
    # split, never against FiCCO's figures; nothing else in the overlap layer was fitted to this paper
    summary["basis"] = PREDICTED
    summary["basis_detail"] = ["selector's walk count chosen on the design split (simulator), not on FiCCO"
                               if "heuristic" in m else "simulated; none fitted to FiCCO's figures"
                               for m in summary.metric]
    return summary


def _notes(pk: pd.DataFrame, real: pd.DataFrame, hw: dict, quick: bool) -> list[str]:
    """The study's method notes and, per GPU, speedup, DIL and contention loss by family."""
    from c3kit.report import repo_path
    from c3kit.sim import calibration_path

    n_held = int((pk.split == "held-out").sum())
    calib = "; ".join(f"{spec.name}: " + (f"calibrated ({repo_path(calibration_path(spec.name))})"
                                          if calibration_path(spec.name) else "sim defaults")
                      for spec in hw.values())
    notes = [
        f"{len(pk)} scenarios ({n_held} held-out: whole models unseen by the heuristic's design split) from "
        "c3kit.overlap.scenarios at TP = EP = 8, tokens " + ", ".join(map(str, QUICK_TOKENS if quick else TOKENS))
        + f", dtypes {', '.join(('bf16',) if quick else DTYPES)}; every applicable schedule simulated by "
        f"c3kit.overlap.evaluate; contention parameters: {calib}.",
        "DIL = sum of sub-GEMMs alone / whole GEMM alone - 1; contention loss = time overlapped / time alone - 1 "
        "(docs/overlap.md, computed by c3kit.overlap).",
        "Oracle = fastest realizable schedule (fused-dma on GEMM->RS needs T3-style near-memory reduction: "
        "excluded as not realizable). Heuristic = c3kit.overlap.select from static sizes only.",
        "The paper's schedule names, thresholds and scenario list were not available; the schedules are the "
        "overlap layer's design space (docs/overlap.md).",
    ]
    for g in sorted(set(real.hw)):
        d = real[(real.hw == g) & (real.family != "serial")]
        geo = d.groupby("family").speedup.apply(lambda x: math.exp(sum(map(math.log, x)) / len(x)))
        dil = d.groupby("family").dil.mean()
        cont = d.groupby("engine").contention_comp.mean()
        notes.append(f"{g}: geomean speedup by family " + ", ".join(f"{f} {v:.2f}x" for f, v in geo.items())
                     + "; mean DIL " + ", ".join(f"{f} {v:.0%}" for f, v in dil.items())
                     + "; mean compute contention loss " + ", ".join(f"{e} {v:.0%}" for e, v in cont.items()) + ".")
    return notes


def _fig_speedup(real: pd.DataFrame):
    from c3kit.studies.plots import figure

    hws = sorted(set(real.hw))
    fig, axes = figure(1, len(hws), figsize=(6 * len(hws), 4), squeeze=False, sharey=True)
    for ax, g in zip(axes[0], hws):
        d = real[real.hw == g]
        fams = sorted(set(d.family))
        ax.boxplot([d[d.family == f].speedup for f in fams], tick_labels=fams)
        ax.axhline(1, color="grey", lw=0.5)
        ax.set_title(g)
        ax.set_xlabel("schedule family (every realizable schedule of every scenario)")
    axes[0][0].set_ylabel("speedup over serial")
    return fig


def _fig_losses(real: pd.DataFrame):
    from c3kit.studies.plots import figure, legend_below

    fig, axes = figure(1, 2, figsize=(11, 4.4))
    d = real[real.family.isin(["ring", "ficco"])]
    rows = d.m / 8.0
    for fam, mk in (("ring", "o"), ("ficco", "x")):
        s = d.family == fam
        axes[0].scatter(rows[s], d.dil[s] * 100, s=6, marker=mk, label=f"{fam} schedules")
        axes[1].scatter(rows[s], d.contention_comp[s] * 100, s=6, marker=mk, label=f"{fam} schedules")
    for ax, lab in zip(axes, ("DIL (%)", "compute contention loss (%)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("rows per compute chunk (m / 8)")
        ax.set_ylabel(lab)
    legend_below(fig, axes, ncols=2)
    return fig


def _fig_pick(pk: pd.DataFrame):
    from c3kit.studies.plots import figure, legend_below

    fig, ax = figure(figsize=(4.8, 5.2))
    for g in sorted(set(pk.hw)):
        d = pk[pk.hw == g]
        ax.scatter(d.oracle_speedup, d.heuristic_speedup, s=8, label=g)
    lo = min(pk.heuristic_speedup.min(), 1.0)
    hi = pk.oracle_speedup.max()
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.5, label="pick = oracle")
    ax.set_xlabel("oracle speedup over serial")
    ax.set_ylabel("heuristic pick's speedup over serial")
    legend_below(fig, [ax], ncols=3)
    return fig
