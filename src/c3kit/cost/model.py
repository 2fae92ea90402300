"""CostModel: the frozen configuration that selects how `c3kit.cost.time` prices each op.

kind (GEMMs):
- "roofline": max(FLOPs / peak, bytes / HBM bandwidth); the ideal, what the skeleton always did.
- "efficiency": roofline x the size-dependent EfficiencyCurve (cost/efficiency.py); with curve=None
  (the default) the curve is fitted once per process to the GPU's shipped gemm calibration
  (cost/data/calib/<gpu>-gemm.json, or the base GPU's for a projection), else DEFAULT_CURVE.
- "table": a measured gemm calibration table with log-space interpolation (cost/table.py); outside
  the table, or with no table for the GPU, the efficiency curve, and `explain` says so.

power (GEMMs of kinds "efficiency" and "table"): "burst" (default) prices a GEMM as timed in a short
window, at whatever clock the GPU had; "sustained" multiplies that by the GPU's fitted sustained-clock
factor (cost/power.py: a power-hungry GEMM run back to back drives the GPU to its power cap), or by 1
where no steady-state calibration is shipped.

Other ops: attention = roofline with attn_eff on FLOP/s and mem_eff on bandwidth; memory-bound ops =
bytes / (HBM bandwidth x mem_eff); collectives = cost/collectives.py with `algo` and comm_eff.

Efficiency defaults (None = the kind's default): roofline 1.0 for everything (pure roofline);
efficiency and table: mem_eff 0.85 (STREAM-like copies reach ~85-90% of HBM peak on Hopper and
MI300X; assumed), attn_eff 0.6 (FlashAttention-2/3 forward reach ~50-75% of bf16 peak on H100;
assumed middle), comm_eff 0.8 (nccl-tests all-reduce busbw ~360 of 450 GB/s on H100 NVSwitch;
assumed for every fabric). These are the numbers to calibrate next. Where a GPU has published op-level rows
(cost/published.py), they replace mem_eff, attn_eff and, on the scale-up fabric, comm_eff there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from c3kit.cost.default_curve import clear_default_curves, default_curve_for
from c3kit.cost.efficiency import DEFAULT_CURVE, EfficiencyCurve
from c3kit.hw.future import base_name
from c3kit.errors import CostError

KINDS = ("roofline", "efficiency", "table")
POWER_MODES = ("burst", "sustained")
_DEFAULT_EFF = {
    "roofline": {"mem_eff": 1.0, "attn_eff": 1.0, "comm_eff": 1.0},
    "efficiency": {"mem_eff": 0.85, "attn_eff": 0.6, "comm_eff": 0.8},
    "table": {"mem_eff": 0.85, "attn_eff": 0.6, "comm_eff": 0.8},
}


@dataclass(frozen=True)
class CostModel:
    """Which cost model prices GEMMs (kind), with the curve, table and efficiency factors it uses."""

    kind: str = "roofline"
    curve: EfficiencyCurve | None = None  # None: fitted to the GPU's shipped gemm calibration, else DEFAULT_CURVE
    table: object | None = None  # a GemmTable; None with kind "table": the GPU's shipped calibration
    mem_eff: float | None = None
    attn_eff: float | None = None
    comm_eff: float | None = None
    algo: str = "auto"
    power: str = "burst"  # "sustained": GEMM times x the power-capped clock factor (cost/power.py)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise CostError(f"unknown cost model {self.kind!r}: use one of {', '.join(KINDS)}")
        if self.power not in POWER_MODES:
            raise CostError(f"unknown power mode {self.power!r}: use one of {', '.join(POWER_MODES)}")
        for name, default in _DEFAULT_EFF[self.kind].items():
            v = getattr(self, name)
            if v is None:
                object.__setattr__(self, name, default)
            elif not 0 < v <= 1.5:
                raise CostError(f"cost model: {name} must be in (0, 1.5], got {v!r}")
        from c3kit.cost.collectives import ALGOS

        if self.algo != "auto" and self.algo not in ALGOS:
            raise CostError(f"unknown collective algorithm {self.algo!r}: use auto or one of {', '.join(ALGOS)}")
        if self.curve is not None and not isinstance(self.curve, EfficiencyCurve):
            raise CostError("cost model: curve must be an EfficiencyCurve (or None for the calibrated default)")
        if self.table is not None:
            from c3kit.cost.table import GemmTable

            if not isinstance(self.table, GemmTable):
                raise CostError("cost model: table must be a c3kit.cost.table.GemmTable (see load_calibration)")

    def with_(self, **changes) -> "CostModel":
        """A copy with some settings replaced."""
        return replace(self, **changes)

    @classmethod
    def calibrated(cls, gpu_name: str, fit: bool = True) -> "CostModel":
        """kind 'table' on the GPU's shipped gemm calibration, with a curve fitted to it for the fallback."""
        from c3kit.cost.efficiency import fit_efficiency
        from c3kit.cost.table import load_calibration
        from c3kit.hw.catalog import get_gpu

        table = load_calibration(gpu_name, "gemm")
        if table is None:
            raise CostError(f"no gemm calibration shipped for {gpu_name!r}; run `c3kit bench gemm` on it first")
        curve = fit_efficiency(table, get_gpu(gpu_name)).curve if fit else DEFAULT_CURVE
        return cls(kind="table", curve=curve, table=table)


def clear_caches() -> None:
    """Forget loaded calibration tables and fitted curves (after writing a new calibration file)."""
    from c3kit.cost.power import sustained_for
    from c3kit.cost.table import cached_gemm_table

    from c3kit.cost.fp8gemm import clear_fp8_classes

    clear_default_curves()
    clear_fp8_classes()
    cached_gemm_table.cache_clear()
    sustained_for.cache_clear()


def curve_of(model: "CostModel", gpu) -> EfficiencyCurve:
    """The curve a model uses on gpu (its own, or the calibrated default)."""
    c = model.curve
    if c is not None:
        return c
    return default_curve_for(gpu)[0]


ROOFLINE = CostModel()
PRESETS = {k: CostModel(kind=k) for k in KINDS}


def as_model(model: "CostModel | str | None") -> CostModel:
    """A CostModel from None (roofline), a kind name, or a CostModel."""
    if model is None:
        return ROOFLINE
    if isinstance(model, CostModel):
        return model
    hit = PRESETS.get(model) if isinstance(model, str) else None
    if hit is None:
        raise CostError(f"unknown cost model {model!r}: use one of {', '.join(KINDS)} or a CostModel")
    return hit
