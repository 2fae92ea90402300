"""The tensorwise FP8 cast of one BF16 tensor as the sum of its kernels, fitted to the fp8_cast_parts rows (each part
timed alone in CUDA graphs, runtime/bench/ops_graphed.py bench_fp8_cast_parts) and composed as the code issues it.

Parts (each a fixed cost plus a cost per element, the rate measured per part: none runs at HBM speed alone):
- amax: x.abs().max(), an elementwise kernel and a full reduction (read 2 B, write 2 B; read 2 B);
- scale: 448 / amax.clamp(min), two one-element kernels (half the part is one scalar kernel);
- cast: (x * scale).to(float8_e4m3fn), a multiply and a conversion (read 2 B, write 2 B; read 2 B, write 1 B).
torchao's dynamic tensorwise cast (float8 hp_tensor_to_float8_dynamic: tensor_to_amax, amax_to_scale, then the
tensor times the scale, saturated) and Transformer Engine's current scaling issue the same three steps and multiply
by the scale. The unfused composite runtime/bench/ops.py times (`fp8_cast` rows: s = a.abs().amax().float()
.clamp(min) / 448; (a / s).to(e4m3)) runs the same amax, three scalar kernels (float, clamp, divide) and a cast that
divides by the scale where the parts multiply: composite = amax + 3 scalar + cast + divide x elements, the one
term not in the parts (divide, >= 0) fitted on the composite's fit rows (fp8cast.held_out_every_third).
Parts rows held out: every third measured size (is_held_out_parts_size). Both files are timed in CUDA graphs, so no
eager host launch floor enters either.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from c3kit.cost.opclass import fit_nonneg

COMPOSITE_SCALAR_KERNELS = 3  # .float(), .clamp(min), / 448 on the one-element amax (runtime/bench/ops.py cast)
SCALE_PART_KERNELS = 2  # clamp, 448 / amax (the fp8_cast_parts 'scale' part)


@dataclass(frozen=True)
class CastParts:
    """Fixed cost and cost per element of each cast kernel group (see the module docstring)."""

    amax_fixed_s: float
    amax_s_per_element: float
    scalar_s: float  # one one-element kernel in a CUDA graph
    cast_fixed_s: float
    cast_s_per_element: float
    divide_s_per_element: float  # the composite's a / s over the parts' x * scale, per element
    n_rows: int = 0

    def amax(self, elements):
        """Seconds of abs + max over `elements` BF16 elements."""
        return self.amax_fixed_s + self.amax_s_per_element * np.asarray(elements, dtype=float)

    def scale(self):
        """Seconds of the scale from the amax (clamp, divide)."""
        return SCALE_PART_KERNELS * self.scalar_s

    def cast(self, elements):
        """Seconds of multiplying by the scale and converting to e4m3."""
        return self.cast_fixed_s + self.cast_s_per_element * np.asarray(elements, dtype=float)

    @property
    def fixed_s(self) -> float:
        """Fixed seconds of the unfused composite (amax, three scalar kernels, dividing cast)."""
        return self.amax_fixed_s + COMPOSITE_SCALAR_KERNELS * self.scalar_s + self.cast_fixed_s

    @property
    def s_per_element(self) -> float:
        """Seconds per element of the unfused composite."""
        return self.amax_s_per_element + self.cast_s_per_element + self.divide_s_per_element

    def composite(self, elements):
        """Seconds of the unfused amax + scale + dividing cast runtime/bench/ops.py times."""
        return self.fixed_s + self.s_per_element * np.asarray(elements, dtype=float)


def held_out_every_third(rows: list[dict]) -> list[bool]:
    """FP8 cast rows held out of the fit: every third measured shape in file order."""
    return [i % 3 == 2 for i in range(len(rows))]


def is_held_out_parts_size(sizes: list[float]) -> list[bool]:
    """fp8_cast_parts sizes held out of the fit: every third measured size in increasing order."""
    order = sorted(set(sizes))
    return [order.index(s) % 3 == 2 for s in sizes]


def graph_part_rows(rows: list[dict]) -> list[dict]:
    """The fp8_cast_parts rows timed in CUDA graphs."""
    return [r for r in rows if r.get("mode") == "graph" and r.get("time_s")]


def fit_cast_parts(part_rows: list[dict], composite_rows: list[dict], hold_out: bool = True) -> CastParts | None:
    """The parts fitted on the fp8_cast_parts rows, the divide term on the composite rows (`fp8_cast` rows, elements
    = m x n) of the composite's fit split; held-out rows left out unless hold_out is False; None without enough rows."""

    g = graph_part_rows(part_rows)
    held = is_held_out_parts_size([float(r["elements"]) for r in g])
    g = [r for r, h in zip(g, held) if not (hold_out and h)]
    part = {p: [r for r in g if r["part"] == p] for p in ("amax", "scale", "cast")}
    if len(part["amax"]) < 3 or len(part["cast"]) < 3 or not part["scale"]:
        return None

    def line(rs):
        return fit_nonneg(np.array([[float(r["elements"])] for r in rs]), np.array([float(r["time_s"]) for r in rs]))

    a, c = line(part["amax"]), line(part["cast"])
    scalar = float(np.mean([float(r["time_s"]) for r in part["scale"]])) / SCALE_PART_KERNELS
    used = sum(len(v) for v in part.values())
    base = CastParts(float(a[0]), float(a[1]), scalar, float(c[0]), float(c[1]), 0.0, used)
    keep = [r for r, h in zip(composite_rows, held_out_every_third(composite_rows)) if not (hold_out and h)]
    if not keep:
        return base
    n = np.array([float(r["m"]) * float(r["n"]) for r in keep])
    t = np.array([float(r["time_s"]) for r in keep])
    x, y = n / t, 1.0 - base.composite(n) / t  # relative least squares in the one term, clipped at zero
    d = max(float(x @ y / (x @ x)), 0.0)
    return CastParts(base.amax_fixed_s, base.amax_s_per_element, scalar, base.cast_fixed_s, base.cast_s_per_element,
                     d, used + len(keep))
