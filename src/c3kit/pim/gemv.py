"""PIMnast-style GEMV placement on a PIM memory: tiles, row blocks, split-K, tile order, input mode.

y[M] = W[M, K] @ x[K] (times `batch` input vectors sharing W). The matrix is cut into tiles of
tile_m x tile_k elements that exactly fill one interleave chunk, so one bank holds whole tiles. A row
block is tile_m rows x all K; split-K cuts each row block into `split_k` K-slices; the resulting
(row block, slice) items are dealt to the PIM units, padded so every unit does the same amount of
work (all-bank broadcast commands keep the units in lockstep). A unit walks its items `degree` row
blocks at a time: each input-vector chunk is used by `degree` tiles before the next is needed, which
needs `degree` x batch x tile_m accumulators in the output registers. The input vector either goes
into the input registers by host writes (in phases bounded by register capacity) or rides in each
MAC command's data (no writes, but one data transfer per command and no sharing across K-slices).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from c3kit.errors import PimError
from c3kit.pim.model import PimMemory

INPUT_MODES = ("registers", "commands")


@dataclass(frozen=True)
class Gemv:
    """One GEMV y = W x with W of m x k elements and `batch` input vectors that share W."""

    name: str
    m: int
    k: int
    batch: int = 1

    def __post_init__(self) -> None:
        if min(self.m, self.k, self.batch) <= 0:
            raise PimError(f"GEMV {self.name}: M, K and batch must be positive, got {self.m} x {self.k} "
                           f"batch {self.batch}")


@dataclass(frozen=True)
class Knobs:
    """The placement choices PIMnast searches over."""

    tile_m: int
    split_k: int = 1
    degree: int = 1
    input_mode: str = "registers"
    units_per_channel: int = 0  # units used in each channel; 0 = all (fewer can avoid K-slice contention)


@dataclass(frozen=True)
class Placement:
    """A placed GEMV with its time split into command classes and compared with the host."""

    gemv: Gemv
    knobs: Knobs
    tile_k: int
    row_blocks: int
    k_tiles: int
    items_per_unit: int
    tiles_per_unit: int
    padding: float  # fraction of each unit's MAC work that is padding
    row_opens: int  # per unit
    commands: dict  # per channel: ACT (= PRE), MAC (all-bank), WR (input registers), RD (output registers)
    input_phases: int
    output_phases: int
    t_mac: float
    t_open: float
    t_input: float
    t_output: float
    time: float
    host_time: float
    speedup: float
    roofline: float  # host_time over the ideal PIM time with row opens (7x family)
    boost_roofline: float  # host_time over pure streaming (8x family)
    explanation: str = ""

    def row(self) -> dict:
        """A flat dict for tables."""
        k = self.knobs
        return {"gemv": self.gemv.name, "M": self.gemv.m, "K": self.gemv.k, "batch": self.gemv.batch,
                "tile": f"{k.tile_m}x{self.tile_k}", "split_k": k.split_k, "degree": k.degree,
                "input_mode": k.input_mode, "items_per_unit": self.items_per_unit, "padding": self.padding,
                **{f"n_{c}": n for c, n in self.commands.items() if c != "PRE"}, "t_mac": self.t_mac, "t_open": self.t_open, "t_input": self.t_input, "t_output": self.t_output,
                "pim_time": self.time, "host_time": self.host_time, "speedup": self.speedup,
                "roofline": self.roofline, "boost_roofline": self.boost_roofline}


def _cdiv(a, b):
    return -(-a // b)


def host_time(mem: PimMemory, g: Gemv) -> float:
    """Host roofline seconds for the GEMV: weights once, inputs and outputs per batch vector."""
    eb = mem.elem_bytes
    return mem.host.time(g.m * g.k * eb + (g.k + g.m) * g.batch * eb, 2.0 * g.m * g.k * g.batch)


def ideal_times(mem: PimMemory, g: Gemv, overlap_open: bool = False) -> tuple[float, float]:
    """(streaming-only, streaming + row opens) PIM seconds with perfect balance and no overheads."""
    words = g.m * g.k * mem.elem_bytes / mem.word_bytes / mem.units
    stream = words * g.batch * mem.timing.tCCD_L
    opens = 0.0 if overlap_open else words / mem.row_words * mem.timing.row_open
    return stream, stream + opens


def _evaluate(mem: PimMemory, g: Gemv, tile_m, split_k, degree, commands, upc=None,
              overlap_open: bool = False) -> dict:
    """Vectorised cost of many knob settings at once (numpy int arrays in, float arrays out)."""
    t = mem.timing
    eb, b = mem.elem_bytes, g.batch
    upc = np.asarray(mem.units_per_channel if upc is None else upc, dtype=np.int64)
    U = upc * mem.channels
    tile_m = np.asarray(tile_m, dtype=np.int64)
    split_k = np.asarray(split_k, dtype=np.int64)
    degree = np.asarray(degree, dtype=np.int64)
    commands = np.asarray(commands, dtype=bool)
    tile_k = mem.interleave_bytes // (tile_m * eb)
    wpt = mem.interleave_bytes // mem.word_bytes  # MAC commands per tile
    rb = _cdiv(g.m, tile_m)
    kt = _cdiv(g.k, tile_k)
    ks = _cdiv(kt, split_k)  # tiles per K-slice
    items = _cdiv(rb * split_k, U)
    tiles = items * ks
    words = tiles * wpt
    # Lockstep units: a K-slice group needs its own input data, so groups sharing a channel serialise
    # their input transfers (and, with input in commands, their MAC commands).
    groups = np.minimum(split_k, upc)
    cmd_period = np.where(commands, np.maximum(t.tCCD_L, mem.word_bytes / mem.channel_bw), t.tCCD_L)
    t_mac = words * b * cmd_period * np.where(commands, groups, 1)
    opens = _cdiv(tiles * mem.interleave_bytes, mem.row_bytes)
    stream_row = np.minimum(mem.row_words, words) * b * t.tCCD_L
    tras_pad = opens * np.maximum(0.0, t.tRAS - t.tRCD - stream_row)
    if overlap_open and mem.banks_per_unit > 1:
        t_open = t.row_open + (opens - 1) * np.maximum(0.0, t.row_open - stream_row) + tras_pad
    else:
        t_open = opens * t.row_open + tras_pad
    # Input registers: chunks of tile_k elements per batch vector.
    in_cap = (mem.in_regs * mem.in_reg_bits // 8) // (tile_k * eb * b)
    in_cap_safe = np.maximum(in_cap, 1)
    row_groups = _cdiv(items, degree)
    in_phases = np.where(commands, 0, row_groups * _cdiv(ks, in_cap_safe))
    chunk_words = _cdiv(np.minimum(ks, in_cap_safe) * tile_k * eb * b, mem.word_bytes)
    per_phase = groups * chunk_words * (mem.word_bytes / mem.channel_bw) + t.tRTW + t.tWTR
    t_input = in_phases * per_phase
    out_bytes = rb * tile_m * split_k * b * mem.acc_bits / 8
    t_output = out_bytes / mem.host.bw + row_groups * np.where(commands, t.tRTW + t.tWTR, 0.0)
    total = t_mac + t_open + t_input + t_output
    acc_cap = mem.out_regs * mem.out_reg_bits // mem.acc_bits
    ok = (tile_k >= 1) & (split_k <= kt) & (degree * b * tile_m <= acc_cap) & (commands | (in_cap >= 1))
    ok &= (~commands | (tile_k * eb <= mem.word_bytes)) & (upc >= 1) & (upc <= mem.units_per_channel)
    return {"tile_k": tile_k, "rb": rb, "kt": kt, "items": items, "tiles": tiles, "words": words,
            "opens": opens, "in_phases": in_phases, "out_phases": row_groups, "t_mac": t_mac,
            "n_mac": words * b * np.where(commands, groups, 1), "n_write": in_phases * groups * chunk_words,
            "n_read": _cdiv(out_bytes, mem.word_bytes * mem.channels),
            "t_open": t_open, "t_input": t_input, "t_output": t_output, "time": np.where(ok, total, np.inf),
            "ok": ok}


def knob_grid(mem: PimMemory, g: Gemv) -> dict[str, np.ndarray]:
    """Every knob setting the search considers for this GEMV on this memory (flat arrays)."""
    eb = mem.elem_bytes
    acc_cap = mem.out_regs * mem.out_reg_bits // mem.acc_bits
    rows = []
    m = 1
    while m * eb <= mem.interleave_bytes:
        tile_k = mem.interleave_bytes // (m * eb)
        kt = _cdiv(g.k, tile_k)
        dmax = acc_cap // (m * g.batch)
        if dmax >= 1:
            splits = np.arange(1, min(kt, mem.units) + 1)
            degrees = sorted({d for d in (*range(1, 9), *(2 ** i for i in range(20))) if d <= dmax})
            upcs = [u for u in (2 ** i for i in range(20)) if u < mem.units_per_channel] + [mem.units_per_channel]
            for cmd in (False, True):
                s, d, u = np.meshgrid(splits, degrees, upcs, indexing="ij")
                rows.append((np.full(s.size, m), s.ravel(), d.ravel(), np.full(s.size, cmd), u.ravel()))
        m *= 2
    if not rows:
        raise PimError(f"GEMV {g.name} at batch {g.batch} cannot be placed on {mem.name}: even a 1-row tile "
                       f"needs {g.batch} accumulators and the output registers hold {acc_cap}; lower the batch")
    cols = [np.concatenate(c) for c in zip(*rows)]
    return dict(zip(("tile_m", "split_k", "degree", "commands", "upc"), cols))


def place(mem: PimMemory, g: Gemv, knobs: Knobs, overlap_open: bool = False) -> Placement:
    """Cost one placement; raise PimError if the knobs cannot be realised on this memory."""
    if knobs.input_mode not in INPUT_MODES:
        raise PimError(f"input mode {knobs.input_mode!r}: use one of {', '.join(INPUT_MODES)}")
    if knobs.tile_m <= 0 or knobs.tile_m * mem.elem_bytes > mem.interleave_bytes or \
            (mem.interleave_bytes // mem.elem_bytes) % knobs.tile_m:
        raise PimError(f"tile of {knobs.tile_m} rows cannot fill a {mem.interleave_bytes} B interleave chunk of "
                       f"{mem.elem_bytes}-byte elements: use a power of two up to "
                       f"{mem.interleave_bytes // mem.elem_bytes}")
    if knobs.split_k <= 0 or knobs.degree <= 0:
        raise PimError("split-K and degree must be at least 1")
    upc = knobs.units_per_channel or mem.units_per_channel
    ev = _evaluate(mem, g, [knobs.tile_m], [knobs.split_k], [knobs.degree], [knobs.input_mode == "commands"],
                   [upc], overlap_open)
    if not bool(ev["ok"][0]):
        acc_cap = mem.out_regs * mem.out_reg_bits // mem.acc_bits
        raise PimError(f"GEMV {g.name} ({g.m} x {g.k}, batch {g.batch}) cannot be placed with {knobs}: it needs "
                       f"degree x batch x tile rows = {knobs.degree * g.batch * knobs.tile_m} accumulators "
                       f"(output registers hold {acc_cap}), split-K <= {int(ev['kt'][0])} K-tiles, and an input "
                       f"chunk that fits the input registers (or one command)")
    return _placement(mem, g, knobs, {k: v[0] for k, v in ev.items()}, overlap_open)


def _placement(mem, g, knobs, e, overlap_open) -> Placement:
    ht = host_time(mem, g)
    stream, ideal = ideal_times(mem, g, overlap_open and mem.banks_per_unit > 1)
    ideal_words = g.m * g.k * mem.elem_bytes / mem.word_bytes / mem.units
    padding = 1.0 - ideal_words / float(e["words"])
    p = Placement(
        gemv=g, knobs=knobs, tile_k=int(e["tile_k"]), row_blocks=int(e["rb"]), k_tiles=int(e["kt"]),
        items_per_unit=int(e["items"]), tiles_per_unit=int(e["tiles"]), padding=padding,
        row_opens=int(e["opens"]),
        commands={"ACT": int(e["opens"]), "PRE": int(e["opens"]), "MAC": int(e["n_mac"]), "WR": int(e["n_write"]),
                  "RD": int(e["n_read"])},
        input_phases=int(e["in_phases"]), output_phases=int(e["out_phases"]),
        t_mac=float(e["t_mac"]), t_open=float(e["t_open"]), t_input=float(e["t_input"]),
        t_output=float(e["t_output"]), time=float(e["time"]), host_time=ht, speedup=ht / float(e["time"]),
        roofline=ht / ideal, boost_roofline=ht / stream)
    return Placement(**{**p.__dict__, "explanation": explain(mem, p)})


def explain(mem: PimMemory, p: Placement) -> str:
    """A few sentences on why this placement costs what it does."""
    k, g = p.knobs, p.gemv
    split = (f"split-K {k.split_k} ({p.k_tiles} K-tiles -> {_cdiv(p.k_tiles, k.split_k)} per slice)"
             if k.split_k > 1 else "no split-K")
    parts = {"MAC": p.t_mac, "row open": p.t_open, "input writes": p.t_input, "output reads": p.t_output}
    shares = ", ".join(f"{n} {v / p.time:.0%}" for n, v in parts.items())
    if k.input_mode == "registers":
        inp = (f"degree {k.degree}: that many row blocks use each input chunk; input vector written to registers "
               f"in {p.input_phases} phases")
    else:
        inp = (f"input vector carried in the MAC commands (no register writes); degree {k.degree}: outputs read "
               f"every {k.degree} row block(s)")
    used = k.units_per_channel or mem.units_per_channel
    units = (f"{used * mem.channels} of {mem.units} units" if used < mem.units_per_channel else f"{mem.units} units")
    label = g.name if g.name == f"{g.m}x{g.k}" else f"{g.name} {g.m}x{g.k}"
    return (f"{label} batch {g.batch}: tile {k.tile_m}x{p.tile_k} fills one "
            f"{mem.interleave_bytes} B chunk; {p.row_blocks} row blocks, {split}: {p.items_per_unit} item(s) per "
            f"unit over {units} ({p.padding:.1%} padding); {inp}; time: {shares}; {p.speedup:.2f}x over the host of a {p.roofline:.2f}x roofline.")


def search(mem: PimMemory, g: Gemv, overlap_open: bool = False, modes: tuple[str, ...] = INPUT_MODES) -> Placement:
    """The fastest placement over all knobs (ties go to more units, then smaller split-K and degree)."""
    grid = knob_grid(mem, g)
    ev = _evaluate(mem, g, grid["tile_m"], grid["split_k"], grid["degree"], grid["commands"], grid["upc"],
                   overlap_open)
    time = ev["time"]
    if "commands" not in modes:
        time = np.where(grid["commands"], np.inf, time)
    if "registers" not in modes:
        time = np.where(grid["commands"], time, np.inf)
    if not np.isfinite(time).any():
        raise PimError(f"GEMV {g.name} ({g.m} x {g.k}, batch {g.batch}) cannot be placed on {mem.name} with input "
                       f"mode(s) {', '.join(modes)}")
    # Lexicographic: time (rounded to 1e-6 relative), then split-K, then degree.
    rel = np.round(time / time[np.isfinite(time)].min(), 6)
    order = np.lexsort((grid["degree"], grid["split_k"], -grid["upc"], rel))
    i = int(order[0])
    # A degree above the unit's item count changes nothing; report the smallest one that does the same.
    degree = min(int(grid["degree"][i]), int(ev["items"][i]))
    knobs = Knobs(int(grid["tile_m"][i]), int(grid["split_k"][i]), degree,
                  "commands" if grid["commands"][i] else "registers", int(grid["upc"][i]))
    return _placement(mem, g, knobs, {k: v[i] for k, v in ev.items()}, overlap_open)


def best_time(mem: PimMemory, g: Gemv, overlap_open: bool = False) -> float:
    """Seconds of the best placement (no Placement object; used by sweeps and properties)."""
    grid = knob_grid(mem, g)
    ev = _evaluate(mem, g, grid["tile_m"], grid["split_k"], grid["degree"], grid["commands"], grid["upc"],
                   overlap_open)
    return float(ev["time"].min())
