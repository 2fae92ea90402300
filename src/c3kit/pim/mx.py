"""MX9 / MX6 / MX4 block formats with shared micro-exponents, quantised and dequantised in numpy.

A block is 16 consecutive elements along one axis. The block shares an 8-bit exponent E (the largest
element exponent floor(log2|x|), clamped to [-127, 127]); each pair of elements has a 1-bit
micro-exponent u that is 1 when both elements of the pair are below 2^E, shifting that pair's scale
down by one. Each element keeps a sign and `mag_bits` magnitude bits with no implicit leading one:
x ~ sign * q * 2^(E - u - mag_bits + 1), q in [0, 2^mag_bits - 1], rounded to nearest (ties to even).

Bits per element: 1 sign + mag_bits + 8/16 + 1/2 = 9 (MX9, 7 magnitude bits), 6 (MX6, 4) and 4 (MX4, 2),
i.e. the "8/5/3-bit" element fields include the sign: 1.125, 0.75 and 0.5 bytes per element.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from c3kit.errors import PimError

BLOCK = 16
PAIR = 2
EXP_BITS = 8
EXP_MIN, EXP_MAX = -127, 127


@dataclass(frozen=True)
class MXFormat:
    """A shared-micro-exponent block format."""

    name: str
    mag_bits: int  # magnitude bits per element (the sign is one more)

    @property
    def element_bits(self) -> int:
        """Sign plus magnitude bits stored per element."""
        return self.mag_bits + 1

    @property
    def bits_per_element(self) -> float:
        """Storage per element including the shared exponent and micro-exponents."""
        return self.element_bits + EXP_BITS / BLOCK + 1 / PAIR

    @property
    def bytes_per_element(self) -> float:
        """Bytes per element (1.125, 0.75, 0.5 for MX9, MX6, MX4)."""
        return self.bits_per_element / 8

    def error_bound(self, block_exp) -> np.ndarray:
        """Largest |x - dequant(quant(x))| for an element of a block with shared exponent block_exp."""
        return np.exp2(np.asarray(block_exp, dtype=np.float64) - self.mag_bits + 1)


FORMATS = {"mx9": MXFormat("MX9", 7), "mx6": MXFormat("MX6", 4), "mx4": MXFormat("MX4", 2)}


def get_format(name: str) -> MXFormat:
    """MX9, MX6 or MX4 by name (case-insensitive)."""
    try:
        return FORMATS[name.lower()]
    except KeyError:
        known = ", ".join(f.name for f in FORMATS.values())
        raise PimError(f"unknown MX format {name!r}: use one of {known}") from None


@dataclass(frozen=True)
class MXTensor:
    """A quantised tensor: integer codes plus shared and micro exponents, blocked along `axis`."""

    fmt: MXFormat
    shape: tuple[int, ...]
    axis: int
    codes: np.ndarray  # signed integers, blocked shape (..., nblocks, 16)
    exps: np.ndarray  # int16 shared exponent per block
    micro: np.ndarray  # uint8 0/1 per pair, shape (..., nblocks, 8)

    @property
    def nbytes(self) -> float:
        """Storage in bytes of the original elements (padding to whole blocks excluded)."""
        return float(np.prod(self.shape)) * self.fmt.bytes_per_element


def _blocks(x: np.ndarray, axis: int) -> tuple[np.ndarray, int]:
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    n = x.shape[-1]
    pad = (-n) % BLOCK
    if pad:
        x = np.concatenate([x, np.zeros(x.shape[:-1] + (pad,))], axis=-1)
    return x.reshape(x.shape[:-1] + (-1, BLOCK)), n


def _exponent(a: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    return np.where(a > 0, e, EXP_MIN)


def quantize(x, fmt: MXFormat | str, axis: int = -1) -> MXTensor:
    """Quantise x into blocks of 16 along `axis` (the dot-product dimension of its use)."""
    fmt = get_format(fmt) if isinstance(fmt, str) else fmt
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:
        raise PimError("quantize needs at least a 1-D array")
    if not np.all(np.isfinite(x)):
        raise PimError("quantize got NaN or infinite values; MX formats have no encoding for them")
    axis = axis % x.ndim
    b, _ = _blocks(x, axis)
    a = np.abs(b)
    e = _exponent(a)
    E = np.clip(e.max(axis=-1), EXP_MIN, EXP_MAX)
    pair_e = e.reshape(e.shape[:-1] + (BLOCK // PAIR, PAIR)).max(axis=-1)
    micro = (pair_e < E[..., None]).astype(np.uint8)
    scale = np.exp2(E[..., None] - micro - fmt.mag_bits + 1)
    scale = np.repeat(scale, PAIR, axis=-1)
    qmax = 2 ** fmt.mag_bits - 1
    q = np.minimum(np.rint(a / scale), qmax) * np.sign(b)
    return MXTensor(fmt, tuple(x.shape), axis, q.astype(np.int16), E.astype(np.int16), micro)


def dequantize(t: MXTensor) -> np.ndarray:
    """The float64 values an MXTensor stands for, in the original shape."""
    scale = np.exp2(t.exps[..., None].astype(np.float64) - t.micro - t.fmt.mag_bits + 1)
    v = t.codes * np.repeat(scale, PAIR, axis=-1)
    moved = v.reshape(v.shape[:-2] + (-1,))[..., : t.shape[t.axis]]
    return np.moveaxis(moved, -1, t.axis)


def round_trip(x, fmt: MXFormat | str, axis: int = -1) -> np.ndarray:
    """dequantize(quantize(x)): what a consumer of the low-precision copy sees."""
    return dequantize(quantize(x, fmt, axis))


def block_bound(x, fmt: MXFormat | str, axis: int = -1) -> np.ndarray:
    """Per-element error bound 2^(E - mag_bits + 1), E the element's block exponent (same shape as x)."""
    fmt = get_format(fmt) if isinstance(fmt, str) else fmt
    t = quantize(x, fmt, axis)
    bound = np.repeat(fmt.error_bound(t.exps)[..., None], BLOCK, axis=-1)
    moved = bound.reshape(bound.shape[:-2] + (-1,))[..., : t.shape[t.axis]]
    return np.moveaxis(moved, -1, t.axis)


def directional_copies(w, fmt: MXFormat | str) -> dict[str, MXTensor]:
    """The two copies a weight W[out, in] needs: row-wise blocks for forward (W x), column-wise for backward (W^T g)."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2:
        raise PimError(f"directional copies need a 2-D weight, got shape {w.shape}")
    return {"forward_rowwise": quantize(w, fmt, axis=1), "backward_colwise": quantize(w, fmt, axis=0)}
