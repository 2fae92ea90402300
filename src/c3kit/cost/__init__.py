"""Cost models: `time(op, hw, model=None)` in seconds for every op of the workload layer.

model: None (roofline), "roofline" | "efficiency" | "table", or a CostModel (cost/model.py).
`explain` returns the same time with how it was obtained (method, collective algorithm, whether a
table lookup fell back to the efficiency curve).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from c3kit.cost.collectives import algbw, busbw, busbw_factor, collective_estimate, collective_time
from c3kit.cost.efficiency import DEFAULT_CURVE, EfficiencyCurve, FitResult, fit_efficiency, relative_errors
from c3kit.cost.model import KINDS, ROOFLINE, CostModel, as_model, clear_caches, curve_of, default_curve_for
from c3kit.cost.roofline import roofline_time
from c3kit.cost.table import GemmTable, cached_gemm_table, load_calibration, write_calibration
from c3kit.errors import CostError
from c3kit.cost.opclass import calibration_for
from c3kit.cost.published import attention_eff, comm_eff as published_comm_eff, mem_eff as published_mem_eff
from c3kit.hw.model import GPU, dtype_bytes
from c3kit.workload.ops import Attention, Collective, Gemm, MemOp, Op

_PRESETS = {k: CostModel(kind=k) for k in KINDS}
_PRESETS[None] = ROOFLINE  # type: ignore[index]
_EXACT = (Gemm, Collective, Attention, MemOp)


@dataclass(frozen=True)
class Estimate:
    """A time with how it was obtained: method ('roofline', 'efficiency', 'table', 'table-fallback', ...)."""

    seconds: float
    method: str
    detail: dict = field(default_factory=dict)


def _table_for(m: CostModel, hw: GPU):
    return m.table if m.table is not None else cached_gemm_table(hw.name)


def _sustained(op: Gemm, hw: GPU, burst_s: float) -> float:
    """burst_s x the GPU's sustained-clock factor at the GEMM's burst efficiency."""
    from c3kit.cost.power import sustained_for

    eff = op.flops / burst_s / hw.peak_flops(op.dtype)
    return burst_s * sustained_for(hw.name).factor(eff)


def _calibrated_memory(op: MemOp, hw: GPU) -> float | None:
    """A memory-bound op from its measured kind; None where the GPU or the kind has no measurement."""
    cal = calibration_for(hw, "memory")
    t = None if cal is None else cal.parts_time(op.parts)
    return None if t is None else float(t)


def _class_gemm(op: Gemm, hw: GPU, curve) -> tuple[float, str] | None:
    """(seconds, class) of a GEMM that a measured GEMM class prices (cost/gemmclass.py): a grouped GEMM
    (batch > 1: MoE experts), a small-M one or a plain FP8 one; None where the class does not apply or is not
    measured. FP8 grouped GEMMs were not measured: the BF16 grouped class times the FP8 : BF16 ratio of the FP8
    class at the same rows (the curve's where the class does not cover them)."""
    from c3kit.cost.gemmclass import SMALL_M_MAX, gemm_classes_for

    if op.dtype not in ("bf16", "fp16", "fp8"):
        return None
    cls = gemm_classes_for(hw)
    # the grouped class was measured on torch._grouped_mm (MoE experts); attention's batched GEMMs (torch.bmm over
    # many small (sequence, head) groups) stay on the curve, which prices the measured bmm rows (validate_ops)
    from c3kit.workload.attention import UNFUSED_GEMM

    grouped = op.batch > 1 and op.name != UNFUSED_GEMM
    wgrad = cls.grouped_wgrad if grouped and op.name.endswith(".wgrad") else None
    if wgrad is not None and wgrad.covers(op.n, op.m):  # a K x N output per group, reduced over M = op.k rows
        t = wgrad(op.m, op.n, op.k, op.batch)
        if op.dtype == "fp8":
            t *= _fp8_ratio(curve, hw, op.m, op.n, op.k * op.batch)
        return t, "gemm_grouped"
    if grouped and cls.grouped is not None and cls.grouped.covers(op.n, op.k):
        # the experts' rows come from a router: group sizes spread about the mean M (gemmclass.expected_row_tiles)
        t = cls.grouped(op.m, op.n, op.k, op.batch, routed=True)
        if op.dtype == "fp8":
            t *= _fp8_ratio(curve, hw, op.m * op.batch, op.n, op.k)
        return t, "gemm_grouped"
    if op.dtype == "fp8" and op.batch == 1:
        from c3kit.cost.fp8gemm import fp8_class_for

        f8 = fp8_class_for(hw)
        if f8 is not None and f8.covers(op.m, op.n, op.k):
            return f8(op.m, op.n, curve.gemm_time(op.m, op.n, op.k, "bf16", hw)), "gemm_fp8"
    if (op.batch == 1 and op.m <= SMALL_M_MAX and op.dtype != "fp8" and cls.small_m is not None
            and cls.small_m.covers(op.n, op.k)):
        return cls.small_m(op.m, op.n, op.k), "gemm_small_m"
    return None


def _fp8_ratio(curve, hw: GPU, m: int, n: int, k: int) -> float:
    """FP8 over BF16 time of one M x N x K GEMM: the FP8 class's where it covers the shape, else the curve's."""
    from c3kit.cost.fp8gemm import fp8_over_bf16

    t_bf16 = curve.gemm_time(m, n, k, "bf16", hw)
    r = fp8_over_bf16(hw, m, n, k, t_bf16)
    return r if r is not None else curve.gemm_time(m, n, k, "fp8", hw) / t_bf16


def time(op: Op, hw: GPU, model: CostModel | str | None = None) -> float:
    """Seconds that op takes alone on hw under the cost model (default roofline)."""
    m = _PRESETS.get(model) if model is None or isinstance(model, str) else model
    if m is None:
        m = as_model(model)
    cls = type(op)
    if cls not in _EXACT:  # subclasses of the op types take the slow path once per call
        cls = next((c for c in _EXACT if isinstance(op, c)), None)
    if cls is Gemm:
        kind = m.kind
        if kind == "roofline":
            return roofline_time(op, hw)
        t = None
        curve = curve_of(m, hw)
        if kind == "table" and op.batch == 1:  # the table measured plain GEMMs, not grouped ones
            tab = _table_for(m, hw)
            if tab is not None:
                t = tab.lookup(op.m, op.n, op.k, op.dtype, op.batch, curve, hw)
        if t is None:
            hit = _class_gemm(op, hw, curve)
            t = hit[0] if hit is not None else curve.gemm_time(op.m, op.n, op.k, op.dtype, hw, op.batch)
        return _sustained(op, hw, t) if m.power == "sustained" else t
    if cls is Collective:
        return collective_estimate(op, hw, m.algo, m.comm_eff, published_comm_eff(hw, m, op.kind))[0]  # cost/published.py
    if cls is Attention:
        from c3kit.cost.attention import attention_time

        return attention_time(op, hw, m, time)
    if cls is MemOp:
        t = _calibrated_memory(op, hw) if m.kind != "roofline" and op.parts else None
        return t if t is not None else roofline_time(op, hw, 1.0, published_mem_eff(hw, m))  # cost/published.py
    raise CostError(f"cannot time {op!r}: not a Gemm, Attention, MemOp or Collective")


def explain(op: Op, hw: GPU, model: CostModel | str | None = None) -> Estimate:
    """time(op, hw, model) with the method used and details (algorithm, table coverage)."""
    m = as_model(model)
    if isinstance(op, Gemm) and m.power == "sustained" and m.kind != "roofline":
        from c3kit.cost.power import sustained_for

        est = explain(op, hw, m.with_(power="burst"))
        clock = sustained_for(hw.name)
        return Estimate(_sustained(op, hw, est.seconds), est.method + "-sustained",
                        {**est.detail, "burst_s": est.seconds, "sustained_clock": clock.to_dict()})
    if isinstance(op, Gemm):
        curve = curve_of(m, hw)
        origin = "model" if m.curve is not None else default_curve_for(hw)[1]
        tab = _table_for(m, hw) if m.kind == "table" and op.batch == 1 else None
        in_table = tab is not None and tab.covers(op.m, op.n, op.k, op.dtype, op.batch)
        hit = None if m.kind == "roofline" or in_table else _class_gemm(op, hw, curve)
        if hit is not None:
            from c3kit.cost.basis import basis

            return Estimate(hit[0], hit[1], {"basis": basis(hw.name)[hit[1]], "curve": origin})
        if m.kind == "table":
            tab = _table_for(m, hw)
            t = None if tab is None else tab.lookup(op.m, op.n, op.k, op.dtype, op.batch, curve, hw)
            if t is not None:
                return Estimate(t, "table", {"in_table": True, "fallback": False})
            return Estimate(curve.gemm_time(op.m, op.n, op.k, op.dtype, hw, op.batch), "table-fallback",
                            {"in_table": False, "fallback": True, "has_table": tab is not None, "curve": origin})
        detail = {"roofline": roofline_time(op, hw)}
        if m.kind == "efficiency":
            detail["curve"] = origin
        return Estimate(time(op, hw, m), m.kind, detail)
    if isinstance(op, Collective):
        su = published_comm_eff(hw, m, op.kind)
        t, algo = collective_estimate(op, hw, m.algo, m.comm_eff, su)
        return Estimate(t, "collective", {"algo": algo, "scaleup_eff": su, "comm_eff": m.comm_eff})
    if isinstance(op, Attention):
        from c3kit.cost.attention import attention_basis, resolve_backend

        backend = resolve_backend(op.backend, hw.name)
        return Estimate(time(op, hw, m), f"attention-{backend}",
                        {"backend": backend, "basis": attention_basis(hw.name)[backend], "mem_eff": m.mem_eff,
                         "attn_eff": attention_eff(op, hw, backend, m)})  # the rate used (cost/published.py)
    mem = published_mem_eff(hw, m) if isinstance(op, MemOp) else m.mem_eff
    return Estimate(time(op, hw, m), "roofline" if m.kind == "roofline" else "roofline-x-eff",
                    {"mem_eff": mem, "attn_eff": m.attn_eff})


op_time = time

__all__ = ["time", "op_time", "explain", "clear_caches", "Estimate", "CostModel", "EfficiencyCurve", "DEFAULT_CURVE", "FitResult",
           "GemmTable", "fit_efficiency", "relative_errors", "load_calibration", "write_calibration",
           "roofline_time", "collective_time", "collective_estimate", "busbw_factor", "algbw", "busbw"]
