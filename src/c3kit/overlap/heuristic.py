"""Pick a schedule from static sizes without simulating (a small readable decision procedure)."""

from __future__ import annotations

from c3kit.hw.catalog import get_gpu
from c3kit.hw.model import GPU
from c3kit.overlap.problem import OverlapProblem
from c3kit.overlap.schedules import SCHEDULES, check


def select(problem: OverlapProblem, gpu: GPU | str) -> tuple[str, list[str]]:
    """(schedule name, reasons) chosen from M, N, K, bytes, GPU count and hardware alone."""
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    reasons: list[str] = []
    if problem.pattern == "bulk":
        name = "bulk-dma" if g.dma.engines else "bulk-sm-prio"
    else:
        name = "ficco-dma" if g.dma.engines and check(SCHEDULES["ficco-dma"], problem, g) is None else "ring-sm-prio"
    reasons.append("placeholder rule (being fitted)")
    return name, reasons


def evaluate_heuristic(hw: tuple[str, ...] = ("MI300X", "H200"), held_out: float = 0.5, seed: int = 0) -> dict:
    """Simulate every scenario, compare select() with the simulated optimum, report per split."""
    import time as _time

    from c3kit.overlap.evaluate import best, evaluate
    from c3kit.overlap.scenarios import scenarios

    scs = scenarios(hw=hw, held_out=held_out, seed=seed)
    gpus = {h: get_gpu(h) for h in hw}
    stats = {s: {"scenarios": 0, "optimal": 0, "ratios": []} for s in ("design", "held-out")}
    misses = []
    t_sim = 0.0
    for sc in scs:
        g = gpus[sc.hw]
        t0 = _time.perf_counter()
        res = evaluate(sc.problem, g)
        t_sim += _time.perf_counter() - t0
        top = best(res)
        pick, _ = select(sc.problem, g)
        chosen = next(r for r in res if r.schedule == pick)
        ratio = chosen.speedup / top.speedup
        st = stats[sc.split]
        st["scenarios"] += 1
        st["ratios"].append(ratio)
        if ratio >= 1.0 - 1e-9:
            st["optimal"] += 1
        else:
            misses.append({"split": sc.split, "hw": sc.hw, "model": sc.model, "pair": sc.label,
                           "problem": sc.problem.label(), "best": top.schedule, "chosen": pick, "ratio": ratio})
    out = {}
    for s, st in stats.items():
        r = st["ratios"]
        out[s] = {"scenarios": st["scenarios"], "optimal_share": st["optimal"] / max(1, st["scenarios"]),
                  "mean_ratio": sum(r) / max(1, len(r)), "worst_ratio": min(r, default=1.0)}
    out["misses"] = sorted(misses, key=lambda h: h["ratio"])
    out["held_out_models"] = sorted({sc.model for sc in scs if sc.split == "held-out"})
    out["ms_per_operator"] = 1e3 * t_sim / max(1, len(scs))
    return out
