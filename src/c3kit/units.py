"""Conversions between SI values and human units, used only at the edges (CLI, reports)."""

from __future__ import annotations

import re

from c3kit.errors import C3kitError

_SIZE = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
         "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_bytes(text: str) -> float:
    """Parse '64KB', '1.5GiB' or '4096' into bytes (decimal K/M/G, binary KiB/MiB/GiB)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _SIZE:
        raise C3kitError(f"cannot read size {text!r}: use a number with an optional unit such as 64KB, 1MiB or 2GB")
    return float(m.group(1)) * _SIZE[m.group(2).upper()]


def fmt_bytes(b: float) -> str:
    """Format bytes with a decimal unit (B, KB, MB, GB, TB)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(b) >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def fmt_time(t: float) -> str:
    """Format seconds as s, ms, us or ns with three significant digits; below a picosecond (rounding noise) as 0 s."""
    if abs(t) < 1e-12:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(t) >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t / 1e-9:.3g} ns"


def fmt_rate(r: float, unit: str = "B/s") -> str:
    """Format a rate (bytes/s or FLOP/s) with a decimal prefix."""
    for p, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(r) >= scale:
            return f"{r / scale:.3g} {p}{unit}"
    return f"{r:.3g} {unit}"
