"""Command-level description of a commercial PIM memory and the host it sits next to (SI units)."""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from c3kit.errors import PimError


def _pow2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


@dataclass(frozen=True)
class PimTiming:
    """DRAM timing parameters that an all-bank PIM command stream pays (seconds)."""

    tRP: float  # precharge
    tRCD: float  # activate to column command
    tRAS: float  # activate to precharge, minimum
    tCCD_L: float  # column to column, same bank group: one PIM command per unit per tCCD_L
    tRTW: float  # read (or PIM MAC) to write turnaround on the channel bus
    tWTR: float  # write to read turnaround

    def __post_init__(self) -> None:
        for k in ("tRP", "tRCD", "tRAS", "tCCD_L", "tRTW", "tWTR"):
            v = getattr(self, k)
            if not v >= 0:
                raise PimError(f"timing {k} = {v}: must be a non-negative number of seconds")
        if self.tCCD_L <= 0:
            raise PimError("timing tCCD_L must be positive: it sets the PIM command rate")

    @property
    def row_open(self) -> float:
        """Seconds to close one row and open the next (tRP + tRCD)."""
        return self.tRP + self.tRCD


@dataclass(frozen=True)
class Host:
    """The processor next to the memory (SoC or GPU), as a roofline plus a fixed cost per host op."""

    name: str
    bw: float  # B/s the host sustains from this memory
    ops: float  # op/s (INT8 MAC counts as 2 ops)
    op_overhead: float = 0.0  # s per non-GEMV host kernel (launch, sync)

    def __post_init__(self) -> None:
        if self.bw <= 0 or self.ops <= 0 or self.op_overhead < 0:
            raise PimError(f"host {self.name}: bandwidth and op rate must be positive, overhead non-negative")

    def time(self, bytes_: float, ops: float = 0.0) -> float:
        """Roofline seconds for moving bytes_ and doing ops on the host."""
        return max(bytes_ / self.bw, ops / self.ops)


@dataclass(frozen=True)
class PimMemory:
    """A PIM-enabled memory: geometry, register files, interleaving, timing and its host."""

    name: str
    channels: int
    banks_per_channel: int
    banks_per_unit: int  # 1: one PIM unit per bank; 2: one unit shared by a bank pair
    simd_bits: int  # width of one PIM unit = bits read from the bank per command
    row_bytes: int  # DRAM row (page) per bank
    interleave_bytes: int  # contiguous bytes mapped to one bank before the next
    in_regs: int
    in_reg_bits: int
    out_regs: int
    out_reg_bits: int
    acc_bits: int  # accumulator width kept in an output register per output element
    timing: PimTiming
    host: Host
    elem_bytes: int = 1  # operand element of the GEMV (INT8 in PIMnast)
    sources: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        for k in ("channels", "banks_per_channel", "banks_per_unit"):
            if getattr(self, k) <= 0:
                raise PimError(f"{self.name}: {k} = {getattr(self, k)}; it must be at least 1")
        for k in ("simd_bits", "row_bytes", "interleave_bytes", "in_regs", "in_reg_bits", "out_regs",
                  "out_reg_bits", "acc_bits", "banks_per_unit", "elem_bytes"):
            v = getattr(self, k)
            if not _pow2(v):
                raise PimError(f"{self.name}: {k} = {v}; it must be a power of two (registers, rows and "
                               f"SIMD widths are binary sizes)")
        if self.banks_per_channel % self.banks_per_unit:
            raise PimError(f"{self.name}: {self.banks_per_channel} banks per channel cannot be shared by units of "
                           f"{self.banks_per_unit} banks")
        if self.interleave_bytes > self.row_bytes or self.word_bytes > self.interleave_bytes:
            raise PimError(f"{self.name}: need SIMD word ({self.word_bytes} B) <= interleave "
                           f"({self.interleave_bytes} B) <= row ({self.row_bytes} B)")
        if self.acc_bits > self.out_reg_bits:
            raise PimError(f"{self.name}: an accumulator ({self.acc_bits} bit) must fit an output register")

    @property
    def banks(self) -> int:
        """Banks in the whole memory."""
        return self.channels * self.banks_per_channel

    @property
    def units(self) -> int:
        """PIM units in the whole memory."""
        return self.banks // self.banks_per_unit

    @property
    def units_per_channel(self) -> int:
        """PIM units driven by one channel's broadcast command."""
        return self.banks_per_channel // self.banks_per_unit

    @property
    def word_bytes(self) -> int:
        """Bytes one PIM command reads per unit."""
        return self.simd_bits // 8

    @property
    def row_words(self) -> int:
        """PIM commands that stream one DRAM row."""
        return self.row_bytes // self.word_bytes

    @property
    def channel_bw(self) -> float:
        """Host bandwidth of one channel's bus (B/s)."""
        return self.host.bw / self.channels

    @property
    def pim_bw(self) -> float:
        """All-unit streaming bandwidth with rows already open (B/s)."""
        return self.units * self.word_bytes / self.timing.tCCD_L

    @property
    def bandwidth_boost(self) -> float:
        """PIM streaming bandwidth over host bandwidth (PIMnast's 8x)."""
        return self.pim_bw / self.host.bw

    @property
    def row_efficiency(self) -> float:
        """Fraction of time spent streaming when each row is opened once (PIMnast's 0.875)."""
        stream = max(self.row_words * self.timing.tCCD_L, self.timing.tRAS - self.timing.tRCD)
        return self.row_words * self.timing.tCCD_L / (stream + self.timing.row_open)

    @property
    def row_roofline(self) -> float:
        """Bandwidth boost after the row-open cost (PIMnast's 7x)."""
        return self.bandwidth_boost * self.row_efficiency

    def locate(self, addr: int) -> dict:
        """Where a physical byte address lives: channel, bank, row and column word.

        Consecutive interleave chunks go to consecutive channels, then banks; a bank's chunks fill its
        rows in order, so the software that owns a large page controls which bank holds which chunk.
        """
        if addr < 0:
            raise PimError(f"address {addr} is negative")
        chunk, within = divmod(int(addr), self.interleave_bytes)
        channel = chunk % self.channels
        bank = (chunk // self.channels) % self.banks_per_channel
        offset = (chunk // self.banks) * self.interleave_bytes + within
        return {"channel": channel, "bank": bank, "unit": bank // self.banks_per_unit,
                "row": offset // self.row_bytes, "column": (offset % self.row_bytes) // self.word_bytes}

    def with_(self, **changes) -> "PimMemory":
        """A copy with some fields replaced; `host_bw=` and `tX=` change the host and timing too."""
        host = {k[5:]: changes.pop(k) for k in list(changes) if k.startswith("host_")}
        tim = {k: changes.pop(k) for k in list(changes) if k in PimTiming.__dataclass_fields__}
        if host:
            changes["host"] = replace(self.host, **host)
        if tim:
            changes["timing"] = replace(self.timing, **tim)
        return replace(self, **changes)

    def describe(self) -> dict:
        """The configuration and its derived rooflines as a flat dict (SI units)."""
        t = self.timing
        return {"name": self.name, "channels": self.channels, "banks_per_channel": self.banks_per_channel,
                "banks_per_unit": self.banks_per_unit, "units": self.units, "simd_bits": self.simd_bits,
                "row_bytes": self.row_bytes, "interleave_bytes": self.interleave_bytes,
                "in_regs": self.in_regs, "in_reg_bits": self.in_reg_bits, "out_regs": self.out_regs,
                "out_reg_bits": self.out_reg_bits, "acc_bits": self.acc_bits, "elem_bytes": self.elem_bytes,
                "tRP": t.tRP, "tRCD": t.tRCD, "tRAS": t.tRAS, "tCCD_L": t.tCCD_L, "tRTW": t.tRTW, "tWTR": t.tWTR,
                "host_bw": self.host.bw, "pim_bw": self.pim_bw, "bandwidth_boost": self.bandwidth_boost,
                "row_efficiency": self.row_efficiency, "row_roofline": self.row_roofline}


_SCALARS = ("channels", "banks_per_channel", "banks_per_unit", "simd_bits", "row_bytes", "interleave_bytes",
            "in_regs", "in_reg_bits", "out_regs", "out_reg_bits", "acc_bits", "elem_bytes")


def pim_from_dict(d: dict, origin: str = "<dict>") -> PimMemory:
    """Build a PimMemory from a parsed catalog document; every number must carry a source."""
    try:
        p, t, h = d["pim"], d["timing"], d["host"]
        sources = dict(d.get("sources", {}))
        keys = [*_SCALARS, *(f"timing.{k}" for k in t), *(f"host.{k}" for k in h if k != "name")]
        missing = [k for k in keys if k not in sources and k.split(".")[0] not in sources]
        if missing:
            raise PimError(f"{origin}: numbers without a source: {', '.join(missing)}")
        return PimMemory(
            name=d["name"], **{k: int(p[k]) for k in _SCALARS},
            timing=PimTiming(**{k: float(t[k]) for k in ("tRP", "tRCD", "tRAS", "tCCD_L", "tRTW", "tWTR")}),
            host=Host(name=h["name"], bw=float(h["bw"]), ops=float(h["ops"]),
                      op_overhead=float(h.get("op_overhead", 0.0))),
            sources=sources, notes=d.get("notes", ""))
    except KeyError as e:
        raise PimError(f"{origin}: missing field {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        if isinstance(e, PimError):
            raise
        raise PimError(f"{origin}: malformed entry ({e})") from None


@lru_cache(maxsize=1)
def _catalog() -> dict[str, tuple[PimMemory, tuple[str, ...]]]:
    out = {}
    for entry in resources.files("c3kit.pim").joinpath("data").iterdir():
        if entry.name.endswith(".toml"):
            d = tomllib.loads(entry.read_text())
            if "pim" not in d:
                continue
            mem = pim_from_dict(d, entry.name)
            out[mem.name] = (mem, tuple(d.get("aliases", ())))
    return out


def list_pims() -> list[PimMemory]:
    """Every PIM memory in the catalog, sorted by name."""
    return sorted((m for m, _ in _catalog().values()), key=lambda m: m.name)


def get_pim(name: str) -> PimMemory:
    """Look a PIM memory up by name or alias (case-insensitive) or load a TOML file path."""
    if name.endswith(".toml"):
        path = Path(name)
        if not path.is_file():
            raise PimError(f"PIM file {name} does not exist")
        try:
            return pim_from_dict(tomllib.loads(path.read_text()), name)
        except tomllib.TOMLDecodeError as e:
            raise PimError(f"{name}: not valid TOML ({e})") from None
    index = {}
    for mem, aliases in _catalog().values():
        for key in (mem.name, *aliases):
            index[key.lower()] = mem
    if name.lower() in index:
        return index[name.lower()]
    close = difflib.get_close_matches(name.lower(), list(index), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise PimError(f"unknown PIM memory {name!r}: known are {', '.join(m.name for m in list_pims())}{hint}")
