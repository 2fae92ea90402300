"""Check the overlap engine and its selector against published measurements of overlapped ops.

The dataset (data/published_overlap.csv) holds one row per (case, implementation): an all-gather +
GEMM, GEMM + reduce-scatter or independent GEMM || collective on one 8-GPU node, the time a public
project measured, the c3kit schedule that models the implementation ("" when none does) and a declared
split. No parameter of c3kit is fitted to these rows: they score the model. "fit" rows are the ones
that may be looked at while diagnosing it; "held-out" rows are the score.

Scores per split: the median |predicted / measured - 1| of the serial and async-TP (ring-dma) times;
the share of overlapped rows where the sign of "this overlap beats serial" is predicted right; and
the share of cases where the selector, asked to choose among the schedules the case measured, picked
the measured best.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from c3kit.errors import OverlapError

COLUMNS = ("case", "split", "hw", "pattern", "m", "n", "k", "dtype", "gpus", "collective", "comm_bytes",
           "implementation", "schedule", "time_us", "source", "note")
SPLITS = ("fit", "held-out")
ASYNC_TP = "ring-dma"  # the c3kit schedule that models PyTorch async TP (symm_mem fused ops)


@dataclass(frozen=True)
class Row:
    """One implementation of one case: measured and predicted seconds."""

    case: str
    split: str
    hw: str
    problem: str
    implementation: str
    schedule: str  # "" when no c3kit schedule models it
    measured: float
    predicted: float | None
    source: str

    @property
    def error(self) -> float | None:
        """predicted / measured - 1 (None when not modelled)."""
        return None if self.predicted is None else self.predicted / self.measured - 1.0


@dataclass(frozen=True)
class Case:
    """One case: its rows, the measured best modelled schedule and the selector's pick among them."""

    case: str
    split: str
    rows: tuple[Row, ...]
    measured_best: str
    chosen: str
    chosen_is_best: bool
    chosen_vs_best: float  # measured time of the chosen schedule / measured best


@dataclass(frozen=True)
class Report:
    """Every case and the scores per split."""

    cases: tuple[Case, ...]
    scores: dict

    def to_dict(self) -> dict:
        """Plain data."""
        return {"cases": [{**{k: v for k, v in asdict(c).items() if k != "rows"},
                           "rows": [{**asdict(r), "error": r.error} for r in c.rows]} for c in self.cases],
                "scores": self.scores}


def dataset_path() -> Path:
    """The shipped dataset of published measurements."""
    return Path(str(resources.files("c3kit.overlap").joinpath("data").joinpath("published_overlap.csv")))


def load(path: str | Path | None = None):
    """The dataset as a pandas DataFrame (checked: columns, splits, positive times and sizes)."""
    import pandas as pd

    p = Path(path) if path is not None else dataset_path()
    if not p.is_file():
        raise OverlapError(f"{p}: no such dataset file")
    try:
        df = pd.read_csv(p, comment="#", dtype={"schedule": str, "collective": str}, keep_default_na=False)
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise OverlapError(f"{p}: not a readable CSV ({e})") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise OverlapError(f"{p}: missing column(s) {', '.join(missing)}")
    bad = sorted(set(df["split"]) - set(SPLITS))
    if bad:
        raise OverlapError(f"{p}: unknown split(s) {', '.join(map(str, bad))}: use {' or '.join(SPLITS)}")
    try:
        times = df["time_us"].astype(float)
    except ValueError:
        raise OverlapError(f"{p}: time_us must be numbers") from None
    if (times <= 0).any():
        raise OverlapError(f"{p}: time_us must be positive")
    for case, g in df.groupby("case", sort=False):
        if (g["schedule"] == "serial").sum() != 1:
            raise OverlapError(f"{p}: case {case!r} needs exactly one serial row (the unoverlapped baseline)")
    return df


def _problem(r):
    from c3kit.overlap.problem import OverlapProblem

    extra = {}
    if r["pattern"] == "bulk":
        extra = {"collective": r["collective"] or "all_reduce", "comm_bytes": float(r["comm_bytes"] or 0.0)}
    return OverlapProblem(r["pattern"], int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"], int(r["gpus"]), **extra)


def validate(path: str | Path | None = None, params=None, power: str = "sustained") -> Report:
    """Predict every modelled row with the overlap engine and score it (see the module docstring).

    power "sustained" (default): the published benchmarks time their ops after hundreds of warm-up
    iterations, so GEMMs run at the power-capped clock (overlap.costs.gemm_pricing); "burst" for comparison.
    """
    from c3kit.hw.catalog import get_gpu
    from c3kit.overlap.evaluate import evaluate
    from c3kit.overlap.heuristic import select

    df = load(path)
    cases = []
    for case, g in df.groupby("case", sort=False):
        first = g.iloc[0]
        gpu = get_gpu(first["hw"])
        prob = _problem(first)
        modelled = tuple(dict.fromkeys(s for s in g["schedule"] if s))
        sim = {r.schedule: r.time for r in evaluate(prob, gpu, modelled, params, power=power)}
        rows = tuple(Row(case=str(case), split=str(r["split"]), hw=gpu.name, problem=prob.label(),
                         implementation=str(r["implementation"]), schedule=str(r["schedule"]),
                         measured=float(r["time_us"]) * 1e-6, predicted=sim.get(r["schedule"]),
                         source=str(r["source"])) for _, r in g.iterrows())
        meas = {r.schedule: r.measured for r in rows if r.schedule}
        best = min(meas, key=meas.get)
        chosen, _ = select(prob, gpu, params, candidates=modelled, power=power)
        cases.append(Case(str(case), str(first["split"]), rows, best, chosen, chosen == best,
                          meas[chosen] / meas[best]))
    return Report(tuple(cases), {s: _scores([c for c in cases if c.split == s]) for s in SPLITS})


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def _scores(cases: list[Case]) -> dict:
    ser, atp, allm, signs = [], [], [], []
    for c in cases:
        serial = next(r for r in c.rows if r.schedule == "serial")
        for r in c.rows:
            if r.predicted is None:
                continue
            allm.append(abs(r.error))
            if r.schedule == "serial":
                ser.append(abs(r.error))
                continue
            if r.schedule == ASYNC_TP:
                atp.append(abs(r.error))
            signs.append((r.measured < serial.measured) == (r.predicted < serial.predicted))
    return {"cases": len(cases), "serial_median_abs_error": _median(ser), "async_tp_median_abs_error": _median(atp),
            "all_median_abs_error": _median(allm), "sign_right_share": sum(signs) / len(signs) if signs else None,
            "sign_rows": len(signs),
            "selector_best_share": sum(c.chosen_is_best for c in cases) / len(cases) if cases else None,
            "selector_worst_vs_best": max((c.chosen_vs_best for c in cases), default=None)}


@dataclass(frozen=True)
class AsyncTpParts:
    """Where an async-TP (ring-dma) row's time goes in the model, beside the measurement (seconds)."""

    case: str
    split: str
    problem: str
    measured: float
    predicted: float
    steps: int  # sub-GEMMs of the decomposition (one per rank)
    sub_gemm: float  # one per-step GEMM alone on the whole GPU
    copies: float  # the P2P copies alone, summed
    weight_read: float  # one read of the GEMM's weight B at peak HBM bandwidth (what each step re-reads)
    host_issue: float  # the host issuing the loop's operations eagerly (measured eager launch each; schedules.host_ops)

    @property
    def excess_per_step(self) -> float:
        """measured / steps - one sub-GEMM alone: what each step costs beyond its GEMM, as measured."""
        return self.measured / self.steps - self.sub_gemm

    def to_dict(self) -> dict:
        """Plain data."""
        return {**asdict(self), "excess_per_step": self.excess_per_step}


def async_tp_breakdown(path: str | Path | None = None, params=None, power: str = "sustained") -> list[AsyncTpParts]:
    """Every ring-dma row with its decomposition's parts as the engine builds them (sub-GEMM and copies alone),
    so that the gap to the measurement can be read per step."""
    from c3kit.hw.catalog import get_gpu
    from c3kit.overlap.costs import CostCache
    from c3kit.overlap.evaluate import default_params, evaluate
    from c3kit.overlap.schedules import HOST_STREAM, SCHEDULES, Ctx, build
    from c3kit.sim.engine import alone_time

    df = load(path)
    out = []
    for _, r in df[df["schedule"] == ASYNC_TP].iterrows():
        gpu = get_gpu(r["hw"])
        prob = _problem(r)
        p = params if params is not None else default_params(gpu.name)
        ctx = Ctx(prob, gpu, p, CostCache.shared(gpu, p.tile_m, p.tile_n, p.gemm_hbm_traffic, power=power))
        tasks, _ = build(SCHEDULES[ASYNC_TP], ctx, "sm")
        gemm = next(t for t in tasks if t.name == "gemm-local")
        copies = sum(alone_time(t, ctx.res) for t in tasks if t.kind == "comm" and t.engines)
        host = next(t for t in tasks if t.stream == HOST_STREAM)
        (res,) = evaluate(prob, gpu, [ASYNC_TP], params, power=power)
        out.append(AsyncTpParts(str(r["case"]), str(r["split"]), prob.label(), float(r["time_us"]) * 1e-6, res.time,
                                prob.gpus, alone_time(gemm, ctx.res), copies,
                                prob.k * prob.n * prob.elem_bytes / gpu.hbm_bw, host.pre))
    return out
