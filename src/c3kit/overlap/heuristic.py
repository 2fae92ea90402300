"""Pick a schedule from static sizes, without simulating: a small policy tree over named features.

Features (all from M, N, K, bytes, GPU count and the hardware; GEMM times from c3kit.cost):
  pattern, mesh (1 on a full mesh, 0 on a switch), gpus, dma (engines available),
  log2_comm_comp = log2(T_comm / T_comp)  (T_comm = bytes / achieved link bandwidth + step latencies),
  dil_shard = DIL of cutting the GEMM into one chunk per GPU, dil_fine = DIL of FiCCO's chunks,
  lat_share = per-step latency x steps / T_comm (how much finer steps cost in latency),
  waves_shard = output-tile waves of one shard-sized sub-GEMM (under 1: the sub-GEMM leaves SMs idle),
  log2_bytes = log2 of the collective's size.
The tree (policy.py) was fitted by `fit_policy` on the design split of `c3kit overlap eval`: each
split maximizes, over the scenarios it separates, the summed ratio of the picked schedule's
speedup to the simulated optimum; each leaf ranks schedules, and the first applicable one is picked.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import c3kit.cost as cost
from c3kit.hw.catalog import get_gpu
from c3kit.hw.model import GPU
from c3kit.overlap.costs import DEFAULT_COST_MODEL
from c3kit.overlap.problem import OverlapProblem
from c3kit.overlap.schedules import SCHEDULES, check, comm_of
from c3kit.sim.params import ContentionParams
from c3kit.workload.ops import Gemm

FEATURES = ("mesh", "gpus", "dma", "log2_comm_comp", "dil_shard", "dil_fine", "lat_share", "waves_shard",
            "log2_bytes")
FEATURE_TEXT = {
    "mesh": "full-mesh fabric (1) or switch (0)",
    "gpus": "GPUs in the group",
    "dma": "DMA engines available (1/0)",
    "log2_comm_comp": "log2(T_comm / T_comp)",
    "dil_shard": "DIL of one chunk per GPU",
    "dil_fine": "DIL of FiCCO chunks",
    "lat_share": "step latency share of T_comm",
    "waves_shard": "tile waves of a shard sub-GEMM",
    "log2_bytes": "log2(collective bytes)",
}


@dataclass(frozen=True)
class Features:
    """The static features of one problem on one GPU."""

    pattern: str
    mesh: float
    gpus: float
    dma: float
    log2_comm_comp: float
    dil_shard: float
    dil_fine: float
    lat_share: float
    waves_shard: float
    log2_bytes: float

    def vector(self) -> tuple[float, ...]:
        """The numeric features in FEATURES order."""
        return tuple(getattr(self, f) for f in FEATURES)

    def to_dict(self) -> dict:
        """Plain data."""
        return asdict(self)


def _gemm_t(m: int, n: int, k: int, dtype: str, batch: int, gpu: GPU) -> float:
    return float(cost.time(Gemm("h", max(1, m), n, k, dtype, batch), gpu, DEFAULT_COST_MODEL))


def features(problem: OverlapProblem, gpu: GPU | str, params: ContentionParams | None = None) -> Features:
    """Static features of a problem (a handful of cost-model calls, no simulation)."""
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    p = params or ContentionParams()
    pr = problem
    n = pr.gpus
    moe = pr.pattern == "moe"
    e_loc = pr.experts // n if moe else 1

    def t_rows(rows: int) -> float:
        if moe:
            return _gemm_t(math.ceil(rows / e_loc), pr.n, pr.k, pr.dtype, e_loc, g)
        return _gemm_t(rows, pr.n, pr.k, pr.dtype, 1, g)

    t_comp = t_rows(pr.m)
    mesh = g.scaleup.topology != "switch"
    links = min(n - 1, g.scaleup.links_per_gpu) / g.scaleup.links_per_gpu if mesh else 1.0
    bw = g.scaleup.bw * p.link_efficiency * links
    factor = {"all_reduce": 2.0 * (n - 1) / n}
    nbytes = 0.0
    t_comm = 0.0
    for kind, s in comm_of(pr):
        nbytes += s
        t_comm += s * factor.get(kind, (n - 1) / n) / bw + g.scaleup.latency
    step_lat = p.sm_launch + p.sm_sync + g.scaleup.latency
    if pr.pattern == "bulk":
        dil_shard = dil_fine = 0.0
        waves = 1.0
    else:
        shard = pr.m // n
        dil_shard = n * t_rows(shard) / t_comp - 1.0
        if pr.m % (n * n) == 0:
            fine = (n - 1) * pr.m // (n * n)
            dil_fine = (t_rows(shard) + n * t_rows(fine)) / t_comp - 1.0
        else:
            dil_fine = dil_shard
        tiles = math.ceil(shard / max(1, e_loc) / p.tile_m) * math.ceil(pr.n / p.tile_n) * e_loc
        waves = tiles / g.sms
    return Features(pr.pattern, float(mesh), float(n), float(g.dma.engines > 0),
                    math.log2(max(t_comm, 1e-12) / max(t_comp, 1e-12)), dil_shard, dil_fine,
                    n * step_lat / max(t_comm, 1e-12), waves, math.log2(max(nbytes, 1.0)))


# --- the policy tree ---------------------------------------------------------------------------------
# A node is ("split", feature, threshold, left, right) (left: feature <= threshold) or
# ("leaf", (schedule, ...)) with schedules ranked best first. One tree per pattern.


def _walk(tree, f: Features, path: list[str]) -> tuple[str, ...]:
    while tree[0] == "split":
        _, feat, thr, left, right = tree
        v = getattr(f, feat)
        if v <= thr:
            path.append(f"{FEATURE_TEXT[feat]} = {v:.3g} <= {thr:.3g}")
            tree = left
        else:
            path.append(f"{FEATURE_TEXT[feat]} = {v:.3g} > {thr:.3g}")
            tree = right
    return tree[1]


def _fallback(problem: OverlapProblem, g: GPU) -> tuple[str, ...]:
    if problem.pattern == "bulk":
        return ("bulk-sm-prio", "bulk-sm", "serial")
    return ("fused-sm", "ficco-sm-prio-g2", "ring-sm-prio", "ring-sm", "serial")


def select(problem: OverlapProblem, gpu: GPU | str, params: ContentionParams | None = None) -> tuple[str, list[str]]:
    """(schedule name, reasons) chosen from M, N, K, bytes, GPU count and hardware alone."""
    from c3kit.overlap.policy import TREES

    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    f = features(problem, g, params)
    path: list[str] = []
    tree = TREES.get(problem.pattern)
    ranked = _walk(tree, f, path) if tree is not None else _fallback(problem, g)
    reasons = [f"pattern {problem.pattern} on {g.name} ({'mesh' if f.mesh else 'switch'}, "
               f"{'DMA engines' if f.dma else 'no DMA engines'}): T_comm/T_comp = {2 ** f.log2_comm_comp:.2f}"]
    reasons += path
    for name in (*ranked, *_fallback(problem, g)):
        spec = SCHEDULES.get(name)
        if spec is None:
            continue
        why = check(spec, problem, g)
        if why is None and spec.realizable(problem.pattern):
            if name != ranked[0]:
                reasons.append(f"{ranked[0]} cannot run here ({check(SCHEDULES[ranked[0]], problem, g)}); next in rank")
            reasons.append(f"-> {name}: {spec.summary}")
            return name, reasons
    return "serial", reasons + ["no overlapped schedule applies: serial"]


# --- fitting -------------------------------------------------------------------------------------------
def fit_tree(X: list[tuple[float, ...]], V: list[list[float]], names: list[str], depth: int = 4,
             min_leaf: int = 12, bonus: float = 0.02, keep: int = 4):
    """Greedy policy tree: V[s][j] = speedup of schedule j / best on scenario s (0 if not applicable).

    A leaf's score is max_j sum_s (V[s][j] + bonus if j is optimal on s); splits maximize the children's
    total score. Thresholds are midpoints between sorted distinct feature values (at most 24 per feature).
    """
    import numpy as np

    Xa = np.asarray(X, dtype=float)
    Va = np.asarray(V, dtype=float)
    Sa = Va + bonus * (Va >= 1.0 - 1e-9)

    def leaf(idx):
        col = Sa[idx].sum(axis=0)
        order = np.argsort(-col, kind="stable")[:keep]
        return ("leaf", tuple(names[j] for j in order))

    def score(idx):
        return Sa[idx].sum(axis=0).max() if len(idx) else 0.0

    def grow(idx, d):
        base = score(idx)
        if d == 0 or len(idx) < 2 * min_leaf:
            return leaf(idx)
        best = None
        for fi in range(Xa.shape[1]):
            vals = np.unique(Xa[idx, fi])
            if len(vals) < 2:
                continue
            cuts = (vals[:-1] + vals[1:]) / 2
            if len(cuts) > 24:
                cuts = np.quantile(Xa[idx, fi], np.linspace(0.04, 0.96, 24))
            for thr in np.unique(cuts):
                left = idx[Xa[idx, fi] <= thr]
                right = idx[Xa[idx, fi] > thr]
                if len(left) < min_leaf or len(right) < min_leaf:
                    continue
                sc = score(left) + score(right)
                if best is None or sc > best[0] + 1e-12:
                    best = (sc, fi, float(thr), left, right)
        if best is None or best[0] <= base + 1e-9 * len(idx):
            return leaf(idx)
        _, fi, thr, left, right = best
        return ("split", FEATURES[fi], round(thr, 4), grow(left, d - 1), grow(right, d - 1))

    return grow(np.arange(len(X)), depth)


def fit_policy(rows, depth: int = 4, min_leaf: int = 12) -> dict:
    """One tree per pattern from (Features, {schedule: speedup}) rows of the design split."""
    trees = {}
    by_pat: dict[str, list] = {}
    for f, sp in rows:
        by_pat.setdefault(f.pattern, []).append((f, sp))
    for pat, rs in by_pat.items():
        names = sorted({n for _, sp in rs for n in sp})
        X = [f.vector() for f, _ in rs]
        V = []
        for _, sp in rs:
            top = max(sp.values())
            V.append([sp.get(n, 0.0) / top for n in names])
        trees[pat] = fit_tree(X, V, names, depth=depth, min_leaf=min_leaf)
    return trees


def format_tree(tree, indent: str = "") -> str:
    """The tree as indented if/else rules."""
    if tree[0] == "leaf":
        return f"{indent}-> {', '.join(tree[1])}\n"
    _, feat, thr, left, right = tree
    return (f"{indent}if {feat} <= {thr:g}:\n" + format_tree(left, indent + "    ")
            + f"{indent}else:\n" + format_tree(right, indent + "    "))


# --- evaluation ------------------------------------------------------------------------------------------
def scenario_table(hw: tuple[str, ...] = ("MI300X", "H200"), held_out: float = 0.5, seed: int = 0):
    """Every eval scenario simulated: (scenario, features, {realizable schedule: speedup}, seconds spent)."""
    import time as _time

    from c3kit.overlap.evaluate import evaluate
    from c3kit.overlap.scenarios import scenarios

    gpus = {h: get_gpu(h) for h in hw}
    out = []
    for sc in scenarios(hw=hw, held_out=held_out, seed=seed):
        g = gpus[sc.hw]
        t0 = _time.perf_counter()
        res = evaluate(sc.problem, g)
        dt = _time.perf_counter() - t0
        sp = {r.schedule: r.speedup for r in res if r.realizable}
        out.append((sc, features(sc.problem, g), sp, dt))
    return out


def evaluate_heuristic(hw: tuple[str, ...] = ("MI300X", "H200"), held_out: float = 0.5, seed: int = 0,
                       table=None) -> dict:
    """Compare select() with the simulated optimum on every scenario; report per split."""
    table = table if table is not None else scenario_table(hw, held_out, seed)
    gpus = {h: get_gpu(h) for h in hw}
    stats = {s: {"n": 0, "exact": 0, "within1": 0, "ratios": []} for s in ("design", "held-out")}
    misses = []
    t_sim = 0.0
    for sc, _, sp, dt in table:
        t_sim += dt
        pick, _ = select(sc.problem, gpus[sc.hw])
        top_name = max(sp, key=sp.get)
        ratio = sp[pick] / sp[top_name]
        st = stats[sc.split]
        st["n"] += 1
        st["ratios"].append(ratio)
        st["exact"] += ratio >= 1.0 - 1e-9
        st["within1"] += ratio >= 0.99
        if ratio < 1.0 - 1e-9:
            misses.append({"split": sc.split, "hw": sc.hw, "model": sc.model, "pair": sc.label,
                           "problem": sc.problem.label(), "best": top_name, "chosen": pick, "ratio": ratio})
    out: dict = {}
    for s, st in stats.items():
        r = st["ratios"]
        out[s] = {"scenarios": st["n"], "optimal_share": st["exact"] / max(1, st["n"]),
                  "within_1pct_share": st["within1"] / max(1, st["n"]), "mean_ratio": sum(r) / max(1, len(r)),
                  "worst_ratio": min(r, default=1.0)}
    out["misses"] = sorted(misses, key=lambda h: h["ratio"])
    out["held_out_models"] = sorted({sc.model for sc, *_ in table if sc.split == "held-out"})
    out["ms_per_operator"] = 1e3 * t_sim / max(1, len(table))
    return out
