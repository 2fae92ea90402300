"""Sustained (power-capped) GEMM time: how much slower a GEMM runs once the power controller has settled.

A GEMM timed in a short window (`c3kit bench gemm`'s sweep) runs at whatever clock the GPU had just
before; run back to back for a few hundred ms (as a training step runs its GEMMs), a power-hungry
GEMM drives the GPU to its power cap and the controller lowers the SM clock. On the lent H200
(700 W cap) an 8192^3 bf16 GEMM went from 1.42 ms at 1.69 GHz to 1.60 ms at 1.50 GHz within about
150 ms (benchmarks/gemm_power_probe.py; docs/measurements.md), while small GEMMs stayed near 1.98 GHz.

The factor by which sustained time exceeds the table's (burst) time is modelled as a function of the
GEMM's burst efficiency e (FLOP/s over the catalog peak of its dtype), which stands for its power draw:

    sustained / burst = a * max(1, e / e0) ** gamma

fitted (least absolute log error, grid over e0 and gamma, a the median) to the steady-state rows of
`c3kit bench gemm --steady` of the fit set ("random"), against the calibrated table's prediction.

A GPU without steady-state measurements of its own (or a transfer of them) whose published rows include
steady-state GEMM figures (cost/published.py, [[sustained_gemm]] rows of role "fit") takes a constant factor: the
published time over the burst curve's time at the same shape, the median over those rows (exponent 0). Those
rows are large compute-bound GEMMs, whose time scales as 1 / SM clock, so the factor is the burst-to-sustained
clock ratio the power cap imposes; it is applied to every GEMM because a training step keeps the GPU near its
power limit and the controller's time scale (about 100 ms, measured on the H200) spans many GEMMs.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from c3kit.errors import CostError

FIT_SETS = ("random",)  # steady-state rows used for fitting; "holdout" and "workload" rows only check


@dataclass(frozen=True)
class SustainedClock:
    """sustained / burst time = scale * max(1, e / knee) ** exponent, e = burst FLOP/s over peak."""

    scale: float = 1.0
    knee: float = 1.0
    exponent: float = 0.0
    rows: int = 0
    origin: str = "none"

    def factor(self, efficiency: float) -> float:
        """Sustained over burst time of a GEMM whose burst efficiency is `efficiency`."""
        e = max(float(efficiency), 0.0)
        return self.scale * max(1.0, e / self.knee) ** self.exponent

    def factors(self, efficiency) -> np.ndarray:
        """factor() over an array."""
        e = np.maximum(np.asarray(efficiency, dtype=float), 0.0)
        return self.scale * np.maximum(1.0, e / self.knee) ** self.exponent

    def to_dict(self) -> dict:
        """Plain dict (JSON)."""
        return {"scale": self.scale, "knee": self.knee, "exponent": self.exponent, "rows": self.rows,
                "origin": self.origin}


NO_THROTTLE = SustainedClock()


def fit_sustained(burst_s: Sequence[float], steady_s: Sequence[float], efficiency: Sequence[float],
                  origin: str = "<rows>") -> SustainedClock:
    """SustainedClock fitted to predicted burst times, measured steady-state times and burst efficiencies."""
    b, s, e = (np.asarray(x, dtype=float) for x in (burst_s, steady_s, efficiency))
    if not (len(b) == len(s) == len(e)):
        raise CostError(f"{origin}: burst, steady and efficiency columns differ in length")
    ok = (b > 0) & (s > 0) & np.isfinite(e) & (e > 0)
    if ok.sum() < 8:
        raise CostError(f"{origin}: {int(ok.sum())} usable steady-state rows; a fit needs at least 8")
    y = np.log(s[ok] / b[ok])
    le = np.log(e[ok])
    knees = np.linspace(0.05, 1.0, 96)
    exps = np.linspace(0.0, 2.0, 201)
    # x[i, j, r] = exponent_j * log(max(1, e_r / knee_i))
    over = np.maximum(0.0, le[None, :] - np.log(knees)[:, None])  # (knees, rows)
    x = exps[None, :, None] * over[:, None, :]
    resid = y[None, None, :] - x
    loga = np.median(resid, axis=2)
    cost = np.abs(resid - loga[:, :, None]).mean(axis=2)
    i, j = np.unravel_index(int(np.argmin(cost)), cost.shape)
    return SustainedClock(float(math.exp(loga[i, j])), float(knees[i]), float(exps[j]), int(ok.sum()), origin)


def steady_rows(doc: Mapping, sets: Sequence[str] | None = None) -> list[tuple[int, int, int, str, float, str]]:
    """(m, n, k, dtype, steady seconds, set) of a -steady.json calibration document, optionally of some sets."""
    cols = list(doc["columns"])
    try:
        im, i_n, ik, idt, it, iset = (cols.index(c) for c in ("m", "n", "k", "dtype", "time_s", "set"))
    except ValueError as e:
        raise CostError(f"steady-state table lacks a column: {e}") from None
    out = []
    for r in doc["rows"]:
        if sets is not None and r[iset] not in sets:
            continue
        out.append((int(r[im]), int(r[i_n]), int(r[ik]), str(r[idt]), float(r[it]), str(r[iset])))
    return out


def burst_predictions(rows, table, gpu, curve=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(predicted burst seconds, measured steady seconds, predicted burst efficiency) of steady rows."""
    from c3kit.cost.efficiency import DEFAULT_CURVE

    pred, meas, eff = [], [], []
    for m, n, k, dt, t, _ in rows:
        p = table.lookup(m, n, k, dt, 1, curve or DEFAULT_CURVE, gpu)
        if p is None:
            continue
        peak = gpu.peak_flops(dt)
        pred.append(p)
        meas.append(t)
        eff.append(2.0 * m * n * k / p / peak)
    return np.array(pred), np.array(meas), np.array(eff)


def constant_clock(burst_s: Sequence[float], steady_s: Sequence[float], origin: str = "<rows>") -> SustainedClock:
    """A constant SustainedClock: the median of steady over burst seconds (published steady-state rows)."""
    b, s = (np.asarray(x, dtype=float) for x in (burst_s, steady_s))
    if len(b) != len(s) or len(b) == 0:
        raise CostError(f"{origin}: needs as many burst as steady times, and at least one")
    if not (np.all(b > 0) and np.all(s > 0) and np.all(np.isfinite(b)) and np.all(np.isfinite(s))):
        raise CostError(f"{origin}: burst and steady times must be positive and finite")
    return SustainedClock(float(np.median(s / b)), 1.0, 0.0, len(b), origin)


def published_sustained(gpu_name: str) -> SustainedClock | None:
    """The constant SustainedClock the GPU's published steady-state GEMM rows of role fit imply (None without)."""
    from c3kit.cost.default_curve import default_curve_for
    from c3kit.cost.published import published_ops
    from c3kit.hw.catalog import get_gpu

    ops = published_ops(gpu_name)
    rows = [r for r in ops.sustained if r.role == "fit"] if ops is not None else []
    if not rows:
        return None
    gpu = get_gpu(ops.gpu)  # a projection keeps its base GPU's clock ratio
    curve = default_curve_for(gpu)[0]
    burst = [curve.gemm_time(r.m, r.n, r.k, r.rate_of, gpu) for r in rows]
    return constant_clock(burst, [r.seconds for r in rows], origin=f"published:{ops.origin}")


@functools.lru_cache(maxsize=16)
def sustained_for(gpu_name: str) -> SustainedClock:
    """The SustainedClock fitted to the GPU's shipped steady-state rows and gemm table, else the one its published
    steady-state GEMM rows imply, else NO_THROTTLE."""
    from c3kit.cost.calib_store import calibration_path, read_calibration
    from c3kit.cost.default_curve import default_curve_for
    from c3kit.cost.table import cached_gemm_table
    from c3kit.hw.catalog import get_gpu
    from c3kit.hw.future import base_name

    from c3kit.cost.basis import source_gpu

    base = source_gpu(gpu_name, "gemm") or base_name(gpu_name)
    table = cached_gemm_table(base)
    path = calibration_path(base, "gemm", variant="steady")
    if table is None or not path.is_file():
        return published_sustained(gpu_name) or NO_THROTTLE
    gpu = get_gpu(base)
    rows = steady_rows(read_calibration(path), FIT_SETS)
    b, s, e = burst_predictions(rows, table, gpu, default_curve_for(gpu)[0])
    return fit_sustained(b, s, e, origin=f"fitted:{path.name}")
