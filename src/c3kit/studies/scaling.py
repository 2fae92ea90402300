"""Comp-vs-Comm scaling study (IISWC 2023, arXiv 2302.02825): compute and communication of future
Transformer training steps on future hardware, priced under the default overlap mode of `c3kit analyze`
(step.policy.DEFAULT_MODE, contended) and compared with none, simple, contended and auto (c3kit.step).

Two sweeps, both projected with the vectorized step model (c3kit.step.fast):

- grid: future models (hidden, layers, sequence, global batch) x hardware generations (named
  scaling rules of c3kit.hw.future applied to a base GPU) x parallelism (TP, PP, DP). Scenarios that
  do not fit in the projected GPU's memory are excluded, each with its reason.
- paper: the abstract's question, models growing with hardware. Generation g of a rule pairs the GPU
  projected g generations with a model whose hidden size, depth and sequence grow by named factors
  per generation, on a fixed GPU count; for each pair the fastest memory-feasible parallel layout is
  picked, and its communication share reported.

Model family (both sweeps): GPT-style decoder, head size 128, 4h MLP, LayerNorm, vocabulary 51,200,
untied embeddings, bf16 with fp32 gradients, Adam, sequence parallelism, selective recomputation,
distributed optimizer (ZeRO-1) when DP > 1, micro-batch 1.

Metrics (per GPU per step): compute, comm (isolated times summed), exposed (comm on the critical
path under the main mode; exposed_<mode> and step_time_<mode> under each of OVERLAP_MODES),
hidden_comm = comm - exposed, comm_share = comm / (compute + comm) (the paper's "fraction of
runtime spent in communication" when nothing overlaps), exposed_share = exposed / step time.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from time import perf_counter
from typing import Callable

import numpy as np
import pandas as pd

from c3kit.errors import StudyError
from c3kit.step.policy import BASE_MODES

HEAD_DIM = 128
VOCAB = 51200
# the modes every scenario is also priced under (issue 14: how much of the growing communication share overlap can
# still hide): nothing overlapped, ideal dependency-only overlap, overlap at the measured contention (the default),
# and the default plus the overlap engine's picks
OVERLAP_MODES = BASE_MODES


@dataclass(frozen=True)
class GridSpec:
    """The grid sweep: every combination of these values (sizes in elements, batch in sequences)."""

    hidden: tuple[int, ...] = (4096, 8192, 12288, 16384, 25600, 32768)
    layers: tuple[int, ...] = (32, 64, 128)
    seq: tuple[int, ...] = (2048, 8192, 32768)
    batch: tuple[int, ...] = (512, 2048)
    base_gpu: str = "H100-SXM"
    rules: tuple[str, ...] = ("historical", "compute-heavy", "balanced", "comm-rich")
    generations: tuple[int, ...] = (0, 1, 2, 3)
    tp: tuple[int, ...] = (2, 4, 8)
    pp: tuple[int, ...] = (1, 4, 16)
    dp: tuple[int, ...] = (8, 64)


@dataclass(frozen=True)
class PaperSpec:
    """Models growing with hardware: generation g uses hidden0 x hidden_growth^g etc. on `gpus` GPUs."""

    base_gpu: str = "H100-SXM"
    rules: tuple[str, ...] = ("historical", "compute-heavy")
    generations: int = 5
    hidden0: int = 12288  # GPT-3 175B
    layers0: int = 96
    seq0: int = 2048
    hidden_growth: float = 1.5  # per generation: ~2.25x parameters per layer
    layers_growth: float = 1.25
    seq_growth: float = 1.0
    batch: int = 2048
    gpus: int = 2048
    tp: tuple[int, ...] = (4, 8, 16, 32)
    pp: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


@dataclass
class ScalingResult:
    """Tables of the study: feasible scenarios, excluded ones with reasons, summaries, the paper sweep."""

    scenarios: pd.DataFrame
    excluded: pd.DataFrame
    by_generation: pd.DataFrame
    paper: pd.DataFrame
    paper_candidates: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    grid: GridSpec = field(default_factory=GridSpec)
    paper_spec: PaperSpec = field(default_factory=PaperSpec)
    overlap: str = "contended"  # the main mode: columns exposed, step_time and every share derived from them

    def headline(self) -> dict:
        """A few numbers that summarize the study."""
        s = self.scenarios
        out = {"scenarios": int(len(s)), "excluded": int(len(self.excluded)), "seconds": round(self.seconds, 3)}
        if len(s):
            out.update({"comm_share_median": float(s["comm_share"].median()),
                        "comm_share_p10": float(s["comm_share"].quantile(0.1)),
                        "comm_share_p90": float(s["comm_share"].quantile(0.9)),
                        "exposed_share_median": float(s["exposed_share"].median())})
        if len(self.paper):
            out["paper_comm_share"] = {f"{r.rule}/g{r.generation}": round(float(r.comm_share), 4)
                                       for r in self.paper.itertuples(index=False)}
        return out


def _round_to(x: float, q: int) -> int:
    return max(q, int(round(x / q)) * q)


def model_row(hidden: int, layers: int) -> dict:
    """Scenario columns of one model of the study's family."""
    heads = hidden // HEAD_DIM
    return {"hidden": hidden, "layers": layers, "heads": heads, "kv_heads": heads, "ffn_hidden": 4 * hidden,
            "vocab": VOCAB, "gated_mlp": False, "layernorm": True, "tied_embeddings": False}


def params_of(hidden, layers) -> np.ndarray:
    """Parameter count of the family (12 h^2 per layer + biases-free norms + 2 V h embeddings), from the layer description."""
    from c3kit.step.fast import dims_of_columns
    from c3kit.workload.layer import Structure, weights

    h, L = np.asarray(hidden, dtype=np.int64), np.asarray(layers, dtype=np.int64)
    cols = {**model_row(h, L), "seq": 1, "micro_batch": 1, "global_batch": 1, "tp": 1, "dp": 1, "pp": 1, "gpn": 1}
    w = weights(dims_of_columns(cols), Structure())
    return np.asarray(L * w.layer + w.emb_params, dtype=float)


def _gpus(base: str, rules, generations) -> dict:
    from c3kit.hw import get_gpu
    from c3kit.hw.future import get_rule, project

    gpu = get_gpu(base)
    out = {}
    for r in rules:
        get_rule(r)
        for g in generations:
            if not isinstance(g, int) or g < 0:
                raise StudyError(f"generations must be whole numbers >= 0, got {g!r}")
            out[(r, g)] = project(gpu, r, g)
    return out


def _memory(rows: pd.DataFrame) -> np.ndarray:
    """Per-GPU bytes of every scenario (memory_report against unit capacity; computed once per layout)."""
    from c3kit.step.fast import scenario_objects
    from c3kit.workload.memory import memory_report

    keys = ["hidden", "layers", "seq", "micro_batch", "global_batch", "tp", "sp", "dp", "pp", "fsdp",
            "dist_optimizer", "recompute"]
    uniq = rows[keys + ["heads", "kv_heads", "ffn_hidden", "vocab", "gated_mlp", "layernorm",
                        "tied_embeddings"]].drop_duplicates(keys)
    total = {}
    for r in uniq.to_dict(orient="records"):
        m, p = scenario_objects(r)
        total[tuple(r[k] for k in keys)] = memory_report(m, 1.0, par=p, phase="train", seq=int(r["seq"])).total
    return np.array([total[k] for k in map(tuple, rows[keys].to_numpy().tolist())]) if len(rows) else np.zeros(0)


def _layout(tp, pp, dp, batch) -> dict:
    return {"micro_batch": 1, "global_batch": batch, "tp": tp, "sp": tp > 1, "dp": dp, "pp": pp, "fsdp": False,
            "dist_optimizer": dp > 1, "recompute": 1}


def grid_scenarios(spec: GridSpec) -> tuple[pd.DataFrame, dict]:
    """Every grid scenario (before the memory check) and the GPUs they name."""
    for name in ("hidden", "layers", "seq", "batch", "tp", "pp", "dp"):
        vals = getattr(spec, name)
        if not vals or any((not isinstance(v, int)) or v <= 0 for v in vals):
            raise StudyError(f"grid {name} must be positive whole numbers, got {vals!r}")
    bad = [h for h in spec.hidden if h % HEAD_DIM]
    if bad:
        raise StudyError(f"hidden sizes must be multiples of the head size {HEAD_DIM}: {bad}")
    gpus = _gpus(spec.base_gpu, spec.rules, spec.generations)
    names = {}
    for (r, g), gpu in gpus.items():
        names.setdefault(gpu.name, (r, g, gpu))  # generation 0 is the same GPU for every rule
    rows = []
    for h in spec.hidden:
        for L in spec.layers:
            for s in spec.seq:
                for b in spec.batch:
                    for tp in spec.tp:
                        for pp in spec.pp:
                            for dp in spec.dp:
                                rows.append({**model_row(h, L), "seq": s, **_layout(tp, pp, dp, b)})
    base = pd.DataFrame(rows)
    parts = []
    for name, (r, g, _) in names.items():
        part = base.copy()
        part["gpu"], part["rule"], part["generation"] = name, (r if g else "today"), g
        parts.append(part)
    df = pd.concat(parts, ignore_index=True)
    return df, {n: v[2] for n, v in names.items()}


def _feasible(df: pd.DataFrame, gpus: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split scenarios into (fitting, excluded with a reason)."""
    from c3kit.units import fmt_bytes

    reasons = np.full(len(df), "", dtype=object)
    h, L = df["hidden"].to_numpy(), df["layers"].to_numpy()
    heads, tp, pp, dp = df["heads"].to_numpy(), df["tp"].to_numpy(), df["pp"].to_numpy(), df["dp"].to_numpy()
    gb = df["global_batch"].to_numpy()
    for mask, why in ((heads % tp != 0, "heads not divisible by tp"), (L % pp != 0, "layers not divisible by pp"),
                      (gb % dp != 0, "global batch not divisible by dp")):
        reasons[mask & (reasons == "")] = why
    ok = reasons == ""
    mem = np.zeros(len(df))
    mem[ok] = _memory(df[ok])
    cap = np.array([gpus[n].hbm_bytes for n in df["gpu"]])
    over = ok & (mem > cap)
    for i in np.flatnonzero(over):
        reasons[i] = f"needs {fmt_bytes(mem[i])} per GPU > {fmt_bytes(cap[i])} HBM"
    df = df.assign(memory_bytes=mem, capacity_bytes=cap)
    keep = reasons == ""
    excluded = df[~keep].assign(reason=reasons[~keep])
    return df[keep].reset_index(drop=True), excluded.reset_index(drop=True)


def _project(df: pd.DataFrame, gpus: dict, cost_model, progress, compare=None, policy=None,
             main: str = "") -> pd.DataFrame:
    from c3kit.step.fast import project_many

    if not len(df):
        return df
    out = project_many(df, gpus, cost_model, policy=policy, progress=progress, compare=compare)
    if compare is not None and main:  # the main mode is not priced twice: its columns are the main ones
        out[f"exposed_{main}"], out[f"step_time_{main}"] = out["exposed"], out["step_time"]
    res = pd.concat([df, out], axis=1)
    res["params"] = params_of(res["hidden"], res["layers"])
    res["gpus"] = res["tp"] * res["pp"] * res["dp"]
    return res


def paper_scenarios(spec: PaperSpec) -> tuple[pd.DataFrame, dict]:
    """Candidate layouts for every (rule, generation) pair of growing model and projected GPU."""
    if spec.generations < 0 or spec.gpus <= 0 or spec.batch <= 0:
        raise StudyError("paper sweep: generations >= 0, gpus and batch > 0")
    for f in ("hidden_growth", "layers_growth", "seq_growth"):
        v = getattr(spec, f)
        if not (v > 0 and math.isfinite(v)):
            raise StudyError(f"paper sweep: {f} must be a positive number, got {v!r}")
    gens = tuple(range(spec.generations + 1))
    gpus = _gpus(spec.base_gpu, spec.rules, gens)
    rows = []
    for (r, g), gpu in gpus.items():
        h = _round_to(spec.hidden0 * spec.hidden_growth ** g, 4 * HEAD_DIM * 8)
        L = _round_to(spec.layers0 * spec.layers_growth ** g, 16)
        s = _round_to(spec.seq0 * spec.seq_growth ** g, 1024)
        for tp in spec.tp:
            for pp in spec.pp:
                if spec.gpus % (tp * pp):
                    continue
                dp = spec.gpus // (tp * pp)
                rows.append({**model_row(h, L), "seq": s, **_layout(tp, pp, dp, spec.batch),
                             "gpu": gpu.name, "rule": r, "generation": g})
    return pd.DataFrame(rows), {g.name: g for g in gpus.values()}


def run(grid: GridSpec | None = GridSpec(), paper: PaperSpec | None = PaperSpec(), cost_model="efficiency",
        progress: Callable[[int, int], None] | None = None, overlap_modes: bool = False,
        overlap: str | None = None) -> ScalingResult:
    """Run the grid and paper sweeps; progress(done, total) is called as scenarios are projected.

    overlap: the main --overlap mode (default step.policy.DEFAULT_MODE, as `c3kit analyze`).
    overlap_modes: also the exposed communication and step time of every scenario under each of OVERLAP_MODES
    (columns exposed_<mode>, step_time_<mode>; the main mode's repeat exposed and step_time).
    """
    from c3kit.step.policy import DEFAULT_MODE, policy_for

    power = getattr(cost_model, "power", "burst")
    overlap = overlap or DEFAULT_MODE
    policy = policy_for(overlap, power)
    compare = {m: policy_for(m, power) for m in OVERLAP_MODES if m != overlap} if overlap_modes else None
    t0 = perf_counter()
    empty = pd.DataFrame()
    frames = {}
    gpus_all: dict = {}
    if grid is not None:
        frames["grid"], g = grid_scenarios(grid)
        gpus_all.update(g)
    if paper is not None:
        frames["paper"], g = paper_scenarios(paper)
        gpus_all.update(g)
    total = sum(len(f) for f in frames.values())
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(done[0], total)

    kept, excl = {}, {}
    for name, df in frames.items():
        k, e = _feasible(df, gpus_all)
        tick(len(e))
        kept[name], excl[name] = _project(k, gpus_all, cost_model, tick, compare, policy, overlap), e
    scen = kept.get("grid", empty)
    excluded = pd.concat([e.assign(sweep=n) for n, e in excl.items()], ignore_index=True) if excl else empty
    by_gen = _by_generation(scen)
    cand = kept.get("paper", empty)
    best = _best(cand)
    notes = _notes(scen, best, grid, paper, cost_model, overlap)
    return ScalingResult(scenarios=scen, excluded=excluded, by_generation=by_gen, paper=best,
                         paper_candidates=cand, notes=notes, seconds=perf_counter() - t0,
                         grid=grid or GridSpec(), paper_spec=paper or PaperSpec(), overlap=overlap)


def _by_generation(s: pd.DataFrame) -> pd.DataFrame:
    if not len(s):
        return pd.DataFrame()
    g = s.groupby(["rule", "generation"])
    out = g.agg(scenarios=("comm_share", "size"), comm_share_median=("comm_share", "median"),
                comm_share_p10=("comm_share", lambda x: x.quantile(0.1)),
                comm_share_p90=("comm_share", lambda x: x.quantile(0.9)),
                exposed_share_median=("exposed_share", "median"), mfu_median=("mfu", "median")).reset_index()
    if all(f"exposed_{m}" in s.columns for m in OVERLAP_MODES):  # exposed comm over the serialized comm, per mode
        for mode in OVERLAP_MODES:
            col = f"exposed_{mode}"
            frac = (s[col] / s["comm"].where(s["comm"] > 0)).fillna(0.0)
            out[f"exposed_of_comm_{mode}"] = frac.groupby([s["rule"], s["generation"]]).median().to_numpy()
    return out.sort_values(["rule", "generation"]).reset_index(drop=True)


def _best(c: pd.DataFrame) -> pd.DataFrame:
    if not len(c):
        return pd.DataFrame()
    idx = c.groupby(["rule", "generation"])["step_time"].idxmin()
    cols = ["rule", "generation", "gpu", "hidden", "layers", "seq", "params", "tp", "pp", "dp", "gpus", "compute",
            "comm", "exposed", "hidden_comm", "bubble", "step_time", "comm_share", "exposed_share", "mfu",
            "tp_comm", "dp_comm", "pp_comm"]
    return c.loc[idx, cols].sort_values(["rule", "generation"]).reset_index(drop=True)


def _notes(s, best, grid, paper, cost_model, overlap: str = "contended") -> list[str]:
    if cost_model is not None and not isinstance(cost_model, str):
        cost_model = cost_model.kind + (f" ({cost_model.power} clocks)" if cost_model.power != "burst" else "")
    notes = [f"Cost model: {cost_model or 'roofline'} (c3kit.cost), collectives 'auto'; overlap: --overlap {overlap} "
             "(c3kit.step, docs/analyze.md), ops overlap only where dependencies allow. comm_share = comm / "
             "(compute + comm); exposed_share = "
             "exposed comm / step time."]
    if len(s):
        notes.append(f"Grid: {len(s)} memory-feasible scenarios; communication share median "
                     f"{100 * s['comm_share'].median():.0f}% (10-90%: {100 * s['comm_share'].quantile(0.1):.0f}-"
                     f"{100 * s['comm_share'].quantile(0.9):.0f}%), exposed share of the step median "
                     f"{100 * s['exposed_share'].median():.0f}%.")
    if len(best):
        for rule, b in best.groupby("rule"):
            notes.append(f"Models growing with hardware ({rule}): communication share "
                         + ", ".join(f"g{r.generation} {100 * r.comm_share:.0f}%" for r in b.itertuples())
                         + "; exposed share " + ", ".join(f"{100 * r.exposed_share:.0f}%" for r in b.itertuples())
                         + ".")
    if paper is not None:
        notes.append(f"Paper sweep inputs: {asdict(paper)}.")
    return notes


def figures(res: ScalingResult) -> list[tuple[str, object, str]]:
    """(name, matplotlib figure, caption) of the study."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    s = res.scenarios
    if len(s):
        fig, ax = plt.subplots(figsize=(8, 5))
        gens = sorted(s["generation"].unique())
        cmap = plt.get_cmap("viridis", max(len(gens), 2))
        for i, g in enumerate(gens):
            part = s[s["generation"] == g]
            med = part.groupby("params")["comm_share"].median()
            ax.scatter(part["params"], 100 * part["comm_share"], s=4, alpha=0.25, color=cmap(i))
            ax.plot(med.index, 100 * med.values, "-o", ms=3, color=cmap(i), label=f"generation {g} (median)")
        ax.set_xscale("log")
        ax.set_xlabel("model parameters")
        ax.set_ylabel("communication share of compute + comm (%)")
        ax.axhspan(40, 75, color="0.9", zorder=-1, label="40-75% (IISWC'23 abstract)")
        ax.legend(fontsize=8)
        ax.set_title("Communication share vs model size")
        figs.append(("comm_share_vs_model_size", fig, "Communication share against model size, by hardware generation"))

        fig, ax = plt.subplots(figsize=(8, 5))
        bg = res.by_generation
        for rule in bg["rule"].unique():
            part = bg[bg["rule"] == rule].sort_values("generation")
            if rule == "today":
                continue
            today = bg[bg["rule"] == "today"]
            part = pd.concat([today, part]) if len(today) else part
            ax.plot(part["generation"], 100 * part["comm_share_median"], "-o", label=f"{rule}: comm share")
            ax.fill_between(part["generation"], 100 * part["comm_share_p10"], 100 * part["comm_share_p90"], alpha=0.12)
            ax.plot(part["generation"], 100 * part["exposed_share_median"], "--", label=f"{rule}: exposed share")
        ax.set_xticks(sorted(bg["generation"].unique()))
        ax.set_xlabel("hardware generation (0 = today)")
        ax.set_ylabel("% (median over scenarios, band: 10-90%)")
        if ax.get_legend_handles_labels()[0]:  # generation 0 alone: no rule line to label
            ax.legend(fontsize=8)
        ax.set_title("Communication share vs hardware generation")
        figs.append(("comm_share_vs_generation", fig, "Median communication share (and exposed share) per generation"))
    p = res.paper
    if len(p):
        fig, ax = plt.subplots(figsize=(8, 5))
        for rule in p["rule"].unique():
            part = p[p["rule"] == rule]
            ax.plot(part["generation"], 100 * part["comm_share"], "-o", label=f"{rule}: comm share")
            ax.plot(part["generation"], 100 * part["exposed_share"], "--s", label=f"{rule}: exposed share")
        ax.axhspan(40, 75, color="0.9", zorder=-1, label="40-75% (IISWC'23 abstract)")
        ax.set_xticks(sorted(p["generation"].unique()))
        ax.set_xlabel("generation (model and hardware grow together)")
        ax.set_ylabel("%")
        ax.legend(fontsize=8)
        ax.set_title("Models growing with hardware: best layout per generation")
        figs.append(("paper_sweep", fig, "Communication share of the fastest fitting layout as models grow with hardware"))
    return figs
