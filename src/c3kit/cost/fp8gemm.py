"""The FP8 GEMM class of a GPU (cost/gemmclass.Fp8Gemm): fitted once per process to the shipped fp8_mm rows of
the GPU whose measurements price class gemm_fp8 on it (own or transferred, cost/basis.py), against that GPU's
calibrated BF16 curve (cost/default_curve.py), and rescaled to the GPU by its FP8 peak and FP8 : BF16 peak ratio."""

from __future__ import annotations

from functools import lru_cache

from c3kit.cost.gemmclass import FP8_KINDS, Fp8Gemm

PRICED_KIND = "fp8_tensorwise"  # per-tensor scales: Transformer Engine's delayed / current recipes, torchao's default


@lru_cache(maxsize=16)
def fp8_classes(gpu_name: str) -> dict[str, Fp8Gemm]:
    """FP8_KINDS kind -> its class fitted to a catalog GPU's own shipped fp8_mm rows (empty without them)."""
    from c3kit.cost.default_curve import bf16_curve_for
    from c3kit.cost.gemmclass import fit_fp8_gemm, gemm_rows
    from c3kit.hw.catalog import get_gpu

    rows = gemm_rows(gpu_name, ("fp8_mm",)) or []
    if not rows:
        return {}
    gpu = get_gpu(gpu_name)
    curve = bf16_curve_for(gpu)[0]
    fits = {kind: fit_fp8_gemm(rows, curve, gpu, kind) for kind in FP8_KINDS}
    return {kind: c for kind, c in fits.items() if c is not None}


@lru_cache(maxsize=64)
def fp8_class_for(gpu) -> Fp8Gemm | None:
    """The per-tensor FP8 GEMM class that prices gpu (own or transferred, rescaled), or None (datasheet/published)."""
    from c3kit.cost.basis import source_gpu
    from c3kit.hw.catalog import get_gpu

    src = source_gpu(gpu.name, "gemm_fp8")
    cls = fp8_classes(src).get(PRICED_KIND) if src is not None else None
    if cls is None:
        return None
    ref = get_gpu(src)
    rate = gpu.peak_flops("fp8") / gpu.peak_flops("bf16") / (ref.peak_flops("fp8") / ref.peak_flops("bf16"))
    return cls.scaled(gpu.peak_flops("fp8") / ref.peak_flops("fp8"), rate)


def fp8_over_bf16(gpu, m, n, k, t_bf16: float) -> float | None:
    """FP8 over BF16 time of one M x N x K GEMM whose BF16 price is t_bf16, by gpu's FP8 class; None where it has
    none or the class does not cover the shape."""
    cls = fp8_class_for(gpu)
    if cls is None or not bool(cls.covers(m, n, k)):
        return None
    return float(cls(m, n, t_bf16)) / float(t_bf16)


def clear_fp8_classes() -> None:
    """Forget the FP8 classes fitted in this process."""
    fp8_classes.cache_clear()
    fp8_class_for.cache_clear()
