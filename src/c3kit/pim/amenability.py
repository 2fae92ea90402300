"""Inclusive-PIM: which primitives suit commercial PIM, and what architecture-, sparsity- and
cache-aware mappings buy over a GPU that enjoys its cache.

Two halves:
- `test(traits, mem)`: the amenability test as code. A primitive suits PIM when it is bandwidth-bound
  on the GPU, the GPU's cache reuse is below what PIM's bandwidth advantage can beat, one broadcast
  command can drive every bank (regular, data-parallel), its operands are bank-local, the PIM ALU has
  its operations, and each row activation is amortised over enough commands.
- primitive models: each primitive has a baseline mapping and switches for the optimisations; a
  mapping is costed command by command on the PIM memory and compared with the GPU roofline (the
  `host` of the PIM memory, one HBM stack's share of the GPU) after cache reuse.

The papers' strawman sizes were not available: every size, hit rate and padding factor below is an
assumption, listed in ASSUMED and printed by the CLI.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from c3kit.errors import PimError
from c3kit.pim.gemv import Gemv, Knobs, place, search
from c3kit.pim.model import PimMemory

PATTERNS = ("streaming", "strided", "irregular")
PIM_ALU_OPS = frozenset({"add", "sub", "mul", "mac", "max", "min", "cmp", "and", "or", "shift", "mov"})
PUBLISHED = {"baseline_avg_speedup": 1.12, "optimized_avg_speedup": 2.49}
OPTIMIZATIONS = ("arch", "sparsity", "cache")

ASSUMED = {
    "gemv_shape": "8192 x 8192 FP16 per HBM stack",
    "elementwise": "c = a * s + b over 2^26 FP16 elements per stack",
    "reduction": "sum of 2^26 FP16 elements per stack",
    "stencil": "one time step of a 2-D 5-point wave equation on an 8192 x 8192 FP16 grid per stack",
    "spmm": "A (2^21 x 2^21, 16 nonzeros per row, CSR with 4-byte indices) x B (2^21 x 8 FP16)",
    "graph": "PageRank-style push over 2^22 vertices and 2^26 edges per stack (average degree 16)",
    "gpu_spmm_b_hit": "30% of the GPU's gathers of B rows hit in L2",
    "gpu_graph_hit": "50% of the GPU's scattered 32 B atomic sectors hit in L2",
    "spmm_row_spread": "after reordering, each output row has partial sums in 4 column blocks (banks)",
    "imbalance_irregular": "1.5x the mean work on the busiest unit for power-law sparse data",
    "imbalance_padded": "1.25x after ELL-style padding / binning for lockstep broadcast",
    "graph_lanes_per_command": "sparsity-aware binning puts updates to 4 lanes of one word into one command",
    "graph_binning": "the host reads each 4 B edge and writes a 4 B bin entry (propagation blocking)",
    "graph_coalesce": "cache-aware pre-aggregation on the GPU removes 30% of the edge updates",
    "stencil_halo": "each bank's block of sub-grids exchanges a 2% halo through the host",
}


@dataclass(frozen=True)
class Traits:
    """What the amenability test looks at for one primitive under one mapping."""

    name: str
    touched_bytes: float  # operand bytes the computation reads and writes (each use counted)
    gpu_bytes: float  # DRAM bytes on the GPU after its cache reuse
    flops: float
    pattern: str  # streaming, strided or irregular
    bank_local: float  # fraction of operand traffic already in the bank that computes with it
    alu_ops: tuple[str, ...]
    cmds_per_open: float  # PIM commands per row activation in the mapping

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise PimError(f"{self.name}: access pattern {self.pattern!r}: use one of {', '.join(PATTERNS)}")
        if not 0 <= self.bank_local <= 1:
            raise PimError(f"{self.name}: bank-local fraction {self.bank_local} must be within [0, 1]")
        if min(self.touched_bytes, self.gpu_bytes) <= 0 or self.flops < 0 or self.cmds_per_open <= 0:
            raise PimError(f"{self.name}: bytes and commands per row open must be positive, FLOPs non-negative")

    @property
    def reuse(self) -> float:
        """Uses of each DRAM byte the GPU gets from its cache."""
        return self.touched_bytes / self.gpu_bytes


@dataclass(frozen=True)
class Verdict:
    """Result of the amenability test."""

    amenable: bool
    failing: tuple[str, ...]
    checks: dict = field(default_factory=dict)  # trait -> (value, threshold, passed)


def test(t: Traits, mem: PimMemory) -> Verdict:
    """The amenability test: each trait against its threshold, failing traits named."""
    tm = mem.timing
    balance = mem.host.ops / mem.host.bw
    row_eff = t.cmds_per_open * tm.tCCD_L / (t.cmds_per_open * tm.tCCD_L + tm.row_open)
    bad_ops = sorted(set(t.alu_ops) - PIM_ALU_OPS)
    checks = {
        "bandwidth_bound": (t.flops / t.gpu_bytes, balance, t.flops / t.gpu_bytes < balance),
        "low_cache_reuse": (t.reuse, mem.row_roofline, t.reuse < mem.row_roofline),
        "broadcast_parallel": (t.pattern, "not irregular", t.pattern != "irregular"),
        "bank_local": (t.bank_local, 0.9, t.bank_local >= 0.9),
        "simple_alu": (",".join(bad_ops) or "ok", "PIM ALU ops", not bad_ops),
        "row_locality": (row_eff, 0.5, row_eff >= 0.5),
    }
    failing = tuple(k for k, (_, _, ok) in checks.items() if not ok)
    return Verdict(not failing, failing, checks)


@dataclass(frozen=True)
class Mapping:
    """A primitive's mapping onto PIM, as counts of commands, activations and host traffic."""

    items: float  # work items over the whole memory (output words, nonzeros or edges)
    cmds_per_item: float
    opens_per_item: float
    host_bytes: float  # bytes the host moves over the bus for this mapping
    broadcast: bool = True  # all-bank commands; False = each unit driven alone, serialised per channel
    imbalance: float = 1.0  # busiest unit over the mean
    hide_opens: bool = False  # bank-pair ping-pong: open one bank's row while the other streams
    bank_local: float = 1.0


def pim_time(mem: PimMemory, mp: Mapping) -> dict:
    """Seconds of a mapping on the PIM memory, split into streaming, activations and host traffic."""
    t = mem.timing
    per_unit = mp.items / mem.units * mp.imbalance
    stream = per_unit * mp.cmds_per_item * t.tCCD_L
    opens = per_unit * mp.opens_per_item
    cost = t.row_open
    if mp.hide_opens and mem.banks_per_unit > 1 and mp.opens_per_item > 0:
        cost = max(0.0, t.row_open - mp.cmds_per_item / mp.opens_per_item * t.tCCD_L)
    serial = 1 if mp.broadcast else mem.units_per_channel
    t_stream, t_open = stream * serial, opens * cost * serial
    t_host = mp.host_bytes / mem.host.bw
    return {"t_stream": t_stream, "t_open": t_open, "t_host": t_host, "pim_time": t_stream + t_open + t_host}


@dataclass(frozen=True)
class Case:
    """One primitive under one set of switches: traits, GPU time and PIM mapping."""

    name: str
    traits: Traits
    gpu_time: float
    mapping: Mapping | None = None
    pim_override: float | None = None  # GEMV: time from the PIMnast placement model
    notes: str = ""


def _gpu(mem: PimMemory, gpu_bytes: float, flops: float) -> float:
    return mem.host.time(gpu_bytes, flops) + mem.host.op_overhead


def _gemv(mem, arch, sparsity, cache) -> Case:
    g = Gemv("gemv", 8192, 8192)
    eb = mem.elem_bytes
    tile = max(1, mem.out_reg_bits // mem.acc_bits)
    tile = min(tile, mem.interleave_bytes // eb)
    p = search(mem, g, overlap_open=True) if arch else place(mem, g, Knobs(tile, 1, 1, "registers"))
    cpo = p.tiles_per_unit * mem.interleave_bytes / mem.word_bytes / max(p.row_opens, 1)
    tr = Traits("gemv", g.m * g.k * eb, g.m * g.k * eb, 2.0 * g.m * g.k, "streaming", 1.0, ("mac",), cpo)
    notes = ("PIMnast search + bank-pair activation hiding" if arch else
             "naive placement: one input chunk per tile, no split-K, degree 1")
    return Case("gemv", tr, _gpu(mem, g.m * g.k * eb, 2.0 * g.m * g.k), pim_override=p.time, notes=notes)


def _elementwise(mem, arch, sparsity, cache) -> Case:
    n = 2 ** 26
    eb, epw, regs = mem.elem_bytes, mem.word_bytes // mem.elem_bytes, mem.in_regs
    words = n / epw
    gpu_bytes = 3 * n * eb
    if arch:  # a, b, c chunks co-located in each DRAM row: one activation serves rows/3 outputs
        mp = Mapping(words, 3, 3 / mem.row_words, 0.0, hide_opens=True)
        notes = "a|b|c co-located per row, activations hidden across the bank pair"
    else:  # a, b, c in the same bank, different rows: three activations per register block
        mp = Mapping(words, 3, 3 / regs, 0.0)
        notes = f"a, b, c in different rows of one bank: 3 activations per {regs}-word register block"
    tr = Traits("elementwise", gpu_bytes, gpu_bytes, 2.0 * n, "streaming", 1.0, ("mac",),
                mp.cmds_per_item / mp.opens_per_item)
    return Case("elementwise", tr, _gpu(mem, gpu_bytes, 2.0 * n), mp, notes=notes)


def _reduction(mem, arch, sparsity, cache) -> Case:
    n = 2 ** 26
    eb, epw = mem.elem_bytes, mem.word_bytes // mem.elem_bytes
    partials = mem.units * mem.out_regs * mem.out_reg_bits / 8
    mp = Mapping(n / epw, 1, 1 / mem.row_words, partials, hide_opens=arch)
    tr = Traits("reduction", n * eb, n * eb, float(n), "streaming", 1.0, ("add",), float(mem.row_words))
    notes = "each unit sums its bank; the host adds the units' partial sums" + (
        "; activations hidden across the bank pair" if arch else "")
    return Case("reduction", tr, _gpu(mem, n * eb, float(n)), mp, notes=notes)


def _stencil(mem, arch, sparsity, cache) -> Case:
    side = 8192
    pts = side * side
    eb, word, regs = mem.elem_bytes, mem.word_bytes, mem.in_regs
    words = pts * eb / word
    touched = 7 * pts * eb  # 5 stencil operands + previous step + result per point
    gpu_bytes = 3 * pts * eb  # the GPU's cache serves the neighbours: u, u_prev read once, u_next written
    flops = 8.0 * pts
    if arch:
        # Lanes over 16 sub-grids: every neighbour is a whole word in the same bank, no lane shifts;
        # only block halos cross banks. Rows y-1, y, y+1, prev, next opened per register block, or
        # only y+1, prev, next with a register window over the rows (cache-aware).
        opens = (3 if cache else 5) / regs
        host = 2 * 0.02 * words * word
        mp = Mapping(words, 7, opens, host, hide_opens=True, bank_local=0.98)
        notes = "lanes over sub-grids (no shifts), blocks per bank, 2% halo via host" + (
            ", register window over rows" if cache else "")
    else:
        # Row-major grid over interleaved banks: vertical neighbours live in other banks and
        # horizontal ones need lane shifts the ALU lacks, so the host supplies them as register
        # writes (a register window lets each vertical copy serve two output rows).
        host_words = 3 if cache else 4
        mp = Mapping(words, 7, 3 / regs, host_words * words * word, bank_local=3 / 7)
        notes = f"row-major grid: host writes {host_words} neighbour words per output word"
    tr = Traits("stencil", touched, gpu_bytes, flops, "strided", mp.bank_local, ("mac", "add"),
                mp.cmds_per_item / mp.opens_per_item)
    return Case("stencil", tr, _gpu(mem, gpu_bytes, flops), mp, notes=notes)


def _spmm(mem, arch, sparsity, cache) -> Case:
    n, per_row, k = 2 ** 21, 16, 8
    eb, regs = mem.elem_bytes, mem.in_regs
    nnz = n * per_row
    b_row = k * eb
    touched = nnz * (eb + 4 + b_row) + n * b_row
    gpu_bytes = nnz * (eb + 4) + nnz * b_row * (1 - 0.3) + n * b_row
    flops = 2.0 * nnz * k
    if sparsity:
        # B partitioned by column block so gathers are bank-local; nonzeros sorted by column within a
        # unit and ELL-padded to one length so all units run in lockstep; the host adds partial rows.
        spread = 2 if cache else 4  # cache-aware: partial sums stay in output registers across blocks
        mp = Mapping(nnz, 1 + eb / mem.word_bytes, 1 / mem.row_words * 2, n * spread * b_row,
                     imbalance=1.25, hide_opens=arch)
        pattern, local = "strided", 1.0
        notes = f"column-blocked, bank-local B, ELL padding; host reduces {spread} partials per row"
    else:
        # CSR rows per bank; each nonzero's B row is fetched through the host into the unit's registers.
        mp = Mapping(nnz, 1, 1 / regs, nnz * b_row, broadcast=False, imbalance=1.5, hide_opens=arch, bank_local=0.3)
        pattern, local = "irregular", 0.3
        notes = "CSR rows per bank, B rows gathered through the host, per-bank commands"
    tr = Traits("spmm", touched, gpu_bytes, flops, pattern, local, ("mac",), mp.cmds_per_item / mp.opens_per_item)
    return Case("spmm", tr, _gpu(mem, gpu_bytes, flops), mp, notes=notes)


def _graph(mem, arch, sparsity, cache) -> Case:
    v, e = 2 ** 22, 2 ** 26
    eb = mem.elem_bytes
    touched = e * (4 + 2 * eb) + v * eb
    gpu_bytes = e * (4 + 2 * 32 * (1 - 0.5)) + v * eb  # atomics move whole 32 B sectors, half hit L2
    flops = float(e)
    live = e * (0.7 if cache else 1.0)
    if sparsity:
        # Propagation blocking: the host bins updates by destination bank and row (reads the edge, writes
        # a 4 B bin entry); PIM applies the bins with all-bank commands, several lanes of one word each.
        lanes = 4
        mp = Mapping(live, 2 / lanes, 1 / 2048, e * 4 + live * 4, imbalance=1.25, hide_opens=arch)
        pattern, local = "strided", 1.0
        notes = f"updates binned by bank and row, {lanes} lanes per command" + (
            ", 30% pre-aggregated on the GPU" if cache else "")
    else:
        # Each update is a per-bank read-modify-write at a random row, sent by the host.
        mp = Mapping(live, 2, 1, live * mem.word_bytes, broadcast=False, imbalance=1.5, hide_opens=arch,
                     bank_local=0.0)
        pattern, local = "irregular", 0.0
        notes = "one per-bank read-modify-write per edge at a random row"
    tr = Traits("graph_push", touched, gpu_bytes, flops, pattern, local, ("add",),
                mp.cmds_per_item / mp.opens_per_item)
    return Case("graph_push", tr, _gpu(mem, gpu_bytes, flops), mp, notes=notes)


PRIMITIVES = {"gemv": _gemv, "stencil": _stencil, "spmm": _spmm, "graph_push": _graph,
              "elementwise": _elementwise, "reduction": _reduction}


def evaluate(mem: PimMemory, name: str, arch: bool = False, sparsity: bool = False, cache: bool = False) -> dict:
    """One primitive under one set of optimisation switches: verdict, GPU and PIM time, speedup."""
    if name not in PRIMITIVES:
        raise PimError(f"unknown primitive {name!r}: use one of {', '.join(PRIMITIVES)}")
    c = PRIMITIVES[name](mem, arch, sparsity, cache)
    if c.pim_override is not None:
        parts = {"t_stream": float("nan"), "t_open": float("nan"), "t_host": float("nan"), "pim_time": c.pim_override}
    else:
        parts = pim_time(mem, c.mapping)
    v = test(c.traits, mem)
    return {"primitive": name, "arch": arch, "sparsity": sparsity, "cache": cache, "amenable": v.amenable,
            "failing": ",".join(v.failing) or "-", "gpu_time": c.gpu_time, **parts,
            "speedup": c.gpu_time / parts["pim_time"], "reuse": c.traits.reuse, "mapping": c.notes}


def speedup_table(mem: PimMemory, primitives=None) -> pd.DataFrame:
    """Every primitive under every combination of the three optimisation switches."""
    rows = []
    for name in primitives or PRIMITIVES:
        for arch in (False, True):
            for sp in (False, True):
                for ca in (False, True):
                    rows.append(evaluate(mem, name, arch, sp, ca))
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Average speedup without and with all optimisations, beside Inclusive-PIM's 1.12x -> 2.49x."""
    base = table[~table.arch & ~table.sparsity & ~table.cache]
    full = table[table.arch & table.sparsity & table.cache]
    rows = []
    for key, df in (("baseline_avg_speedup", base), ("optimized_avg_speedup", full)):
        ours = float(df.speedup.mean())
        geo = math.exp(float(df.speedup.map(math.log).mean()))
        rows.append({"metric": key, "ours": ours, "ours_geomean": geo, "published": PUBLISHED[key],
                     "gap": ours - PUBLISHED[key]})
    return pd.DataFrame(rows)
