"""The calibrated default efficiency curve of a GPU: fitted once per process to its shipped gemm table."""

from __future__ import annotations

from c3kit.cost.efficiency import DEFAULT_CURVE, EfficiencyCurve, fit_efficiency
from c3kit.cost.published import SHAPE_FROM, gemm_curve, published_ops
from c3kit.errors import CostError
from c3kit.hw.future import base_name

_fitted: dict[str, tuple[EfficiencyCurve, str]] = {}
_with_fp8: dict[str, tuple[EfficiencyCurve, str]] = {}


def default_curve_for(gpu) -> tuple[EfficiencyCurve, str]:
    """(curve, origin): bf16_curve_for(gpu) with the fp8 peak fraction of the GPU's measured FP8 GEMM class
    (cost/gemmclass.py; own or transferred) where it has one; origin then ends in '+fp8:<file>'."""
    hit = _with_fp8.get(gpu.name)
    if hit is not None:
        return hit
    from c3kit.cost.basis import source_gpu

    curve, origin = bf16_curve_for(gpu)
    src = source_gpu(gpu.name, "gemm_fp8")
    frac = fp8_fraction(src) if src is not None else None
    if frac is not None:
        curve = curve.with_(peak_frac={**dict(curve.peak_frac), "fp8": frac})
        origin = f"{origin}+fp8:{src}"
    _with_fp8[gpu.name] = (curve, origin)
    return curve, origin


_fp8: dict[str, float | None] = {}


def fp8_fraction(gpu_name: str) -> float | None:
    """The fp8 peak fraction fitted to a catalog GPU's own per-tensor FP8 GEMM rows (the fp8_mm family's fit rows;
    cost/gemmclass.fit_fp8_frac against its calibrated BF16 curve), or None when it has none."""
    if gpu_name not in _fp8:
        from c3kit.cost.gemmclass import fit_fp8_frac, gemm_rows
        from c3kit.hw.catalog import get_gpu

        rows = gemm_rows(gpu_name, ("fp8_mm",))
        gpu = get_gpu(gpu_name)
        _fp8[gpu_name] = None if rows is None else fit_fp8_frac(rows, bf16_curve_for(gpu)[0], gpu)
    return _fp8[gpu_name]


def bf16_curve_for(gpu) -> tuple[EfficiencyCurve, str]:
    """(curve, origin): fitted once per process to the shipped gemm calibration of gpu (or of the GPU a
    projection was made from), else the curve levelled to its published GEMM figures (cost/published.py),
    else DEFAULT_CURVE; origin is 'fitted:<file>', 'published:<file>+shape:<file>' or 'default'. Its fp8
    fraction is the assumed default (default_curve_for replaces it with the measured one)."""
    name = gpu.name
    hit = _fitted.get(name)
    if hit is not None:
        return hit
    from c3kit.cost.basis import source_gpu
    from c3kit.cost.fit_cache import load_fit
    from c3kit.cost.table import cached_gemm_table

    base = source_gpu(name, "gemm") or base_name(name)  # own, projected or transferred (cost/basis.py)
    table = cached_gemm_table(base)
    out = (DEFAULT_CURVE, "default")
    if table is not None:
        try:
            # fit against the base GPU: the curve's shape is the library's, the peaks come from `gpu` at use
            stored = load_fit(table.origin)
            if stored is None:
                from c3kit.hw.catalog import get_gpu

                ref = get_gpu(base) if base != name else gpu
                stored = fit_efficiency(table, ref).curve
            out = (stored, f"fitted:{table.origin}")
        except CostError:
            pass  # a table too small or inconsistent to fit: keep the documented default
    elif base != SHAPE_FROM and published_ops(name) is not None:
        # published op-level GEMM figures (cost/published.py) level the measured curve of SHAPE_FROM
        from c3kit.hw.catalog import get_gpu

        out = gemm_curve(gpu, *bf16_curve_for(get_gpu(SHAPE_FROM))) or out
    _fitted[name] = out
    return out


def clear_default_curves() -> None:
    """Forget the curves fitted in this process."""
    _fitted.clear()
    _with_fp8.clear()
    _fp8.clear()
    from c3kit.cost.gemmclass import gemm_calibration, gemm_classes_for

    gemm_calibration.cache_clear()
    gemm_classes_for.cache_clear()
