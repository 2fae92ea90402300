"""C3 on one GPU: a GEMM concurrent with a copy that stands in for a collective.

Variants (the issue's a-d): an SM copy kernel of k blocks; copy-engine transfers (D2D, D2H, H2D over
pinned memory); the copy on a high-priority stream, launched first; the GEMM confined to fewer SMs
(green contexts). Metrics follow RESEARCH.md: serial, ideal, S_ideal, S_real, fraction of ideal
realized, scenario class, and per-op contention loss (time overlapped / time alone - 1).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Sequence

from c3kit.cost.table import c3_variant_family
from c3kit.runtime._torch import require_torch, torch_dtype
from c3kit.runtime.bench import copykernel

# t_comp_s is always the GEMM alone on the whole GPU (the serial baseline); t_comp_part_s the GEMM
# alone on the variant's SMs (equal to t_comp_s without a green context). comp_loss is against t_comp_s.
COLUMNS = ["variant", "gemm", "m", "n", "k", "dtype", "gemm_reps", "gemm_sms", "comm", "comm_bytes", "blocks",
           "priority", "ratio_target", "t_comp_s", "t_comm_s", "t_comp_conc_s", "t_comm_conc_s", "t_concurrent_s",
           "serial_s", "ideal_s", "s_ideal", "s_real", "fraction_of_ideal", "class", "comp_loss", "comm_loss",
           "t_comp_part_s"]

# The published averages of the C3 paper (MI300X), for the table beside ours.
PUBLISHED = {"plain": 0.21, "prioritized": 0.42, "cu-partitioned": 0.41, "dma": 0.66, "dma+fewer-cus": 0.72}

GEMMS = {"compute": (8192, 8192, 8192), "memory": (262144, 512, 128)}
CHUNK_BYTES = 256 << 20
TARGET_COMP_S = 2e-3


@dataclass(frozen=True)
class Variant:
    """One way to run the copy beside the GEMM."""

    name: str
    comm: str  # sm-copy | ce-d2d | ce-d2h | ce-h2d
    blocks: int = 0
    priority: int = 0  # -1 = high-priority stream, launched first
    gemm_sms: int = 0  # 0 = all SMs; else a green context of this many SMs
    family: str = "plain"


def default_variants(sms: int) -> list[Variant]:
    """The variants of `c3kit bench c3` for a GPU of `sms` SMs."""
    v = [Variant(f"sm-copy-k{k}", "sm-copy", k, family="plain") for k in (8, 32, sms)]
    v += [Variant("sm-copy-k32-prio", "sm-copy", 32, -1, family="prioritized"),
          Variant(f"sm-copy-k{sms}-prio", "sm-copy", sms, -1, family="prioritized")]
    v += [Variant(f"ce-{d}", f"ce-{d}", family="dma") for d in ("d2d", "d2h", "h2d")]
    v += [Variant("ce-d2d-prio", "ce-d2d", 0, -1, family="dma")]
    part = max(8, (sms - 16) // 8 * 8)
    v += [Variant(f"sm-copy-k16-gemm{part}sm", "sm-copy", 16, 0, part, family="cu-partitioned"),
          Variant(f"ce-d2d-gemm{max(8, (sms - 8) // 8 * 8)}sm", "ce-d2d", 0, 0, max(8, (sms - 8) // 8 * 8),
                  family="dma+fewer-cus")]
    return v


def classify(t_comp: float, t_comm: float) -> str:
    """G-long, C-long or GC-equal (within 15%), as RESEARCH.md defines them."""
    if t_comp > 1.15 * t_comm:
        return "G-long"
    if t_comm > 1.15 * t_comp:
        return "C-long"
    return "GC-equal"


def fraction_of_ideal(t_comp: float, t_comm: float, t_conc: float) -> tuple[float, float, float]:
    """(S_ideal, S_real, fraction of ideal realized) for isolated times and the concurrent time."""
    serial, ideal = t_comp + t_comm, max(t_comp, t_comm)
    s_ideal, s_real = serial / ideal, serial / t_conc
    frac = (s_real - 1.0) / (s_ideal - 1.0) if s_ideal > 1.0 + 1e-9 else float("nan")
    return s_ideal, s_real, frac


@dataclass
class _Green:
    """A green context (GEMM confined to fewer SMs), or why none could be made."""

    sms: int
    ctx: object = None
    error: str = ""


def green_context(torch, device, sms: int) -> _Green:
    """Create a green context of `sms` SMs, or return the reason it is not available."""
    try:
        from torch.cuda.green_contexts import GreenContext
    except ImportError as e:
        return _Green(sms, None, f"torch.cuda.green_contexts not in torch {torch.__version__} ({e})")
    if not getattr(GreenContext, "create", None):
        return _Green(sms, None, f"torch {torch.__version__} has no GreenContext.create")
    try:
        try:
            ctx = GreenContext.create(num_sms=sms, device_id=device.index or 0)
        except TypeError:  # older torch: create(num_sms, device_id) positional
            ctx = GreenContext.create(sms, device.index or 0)
    except Exception as e:  # noqa: BLE001 - any driver/torch failure means "not available here"
        return _Green(sms, None, f"GreenContext.create(num_sms={sms}) failed: {type(e).__name__}: {e}")
    return _Green(sms, ctx)


def _green_enter(torch, green: _Green, device):
    """Make the green context current and return the stream its work must go on."""
    ctx = green.ctx
    (getattr(ctx, "set_context", None) or getattr(ctx, "make_current"))()
    if hasattr(ctx, "Stream"):
        return ctx.Stream()
    return torch.cuda.current_stream(device)


def _green_exit(green: _Green) -> None:
    ctx = green.ctx
    (getattr(ctx, "pop_context", None) or getattr(ctx, "pop_current"))()


@dataclass
class Harness:
    """Buffers and streams for timing one GEMM beside one copy on a CUDA device."""

    device: object
    gemm: tuple[int, int, int]
    dtype: str = "bf16"
    reps: int = 1
    streams: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        torch = require_torch()
        m, n, k = self.gemm
        dt = torch_dtype(self.dtype)
        self.a = torch.randn(m, k, dtype=dt, device=self.device)
        self.b = torch.randn(k, n, dtype=dt, device=self.device)
        self.c = torch.empty(m, n, dtype=dt, device=self.device)
        self.src = torch.randn(CHUNK_BYTES // 2, dtype=torch.bfloat16, device=self.device)
        self.dst = torch.empty_like(self.src)
        self.host = torch.empty(CHUNK_BYTES // 2, dtype=torch.bfloat16, pin_memory=True)
        self.host.fill_(1.5)
        self.low = torch.cuda.Stream(self.device, priority=0)
        self.high = torch.cuda.Stream(self.device, priority=-1)
        self.gstream = torch.cuda.Stream(self.device, priority=0)

    def gemm_fn(self) -> None:
        """Launch the GEMM `reps` times on the current stream."""
        torch = require_torch()
        for _ in range(self.reps):
            torch.mm(self.a, self.b, out=self.c)

    def comm_fn(self, comm: str, nbytes: int, blocks: int) -> Callable[[], None]:
        """A closure that launches `nbytes` of the given copy on the current stream (in CHUNK_BYTES pieces)."""
        full, rest = divmod(int(nbytes), CHUNK_BYTES)
        pieces = [CHUNK_BYTES] * full + ([rest // 4 * 4] if rest >= 4 else [])

        def one(nb: int) -> None:
            e = nb // 2
            if comm == "sm-copy":
                copykernel.sm_copy(self.src[:e], self.dst[:e], blocks)
            elif comm == "ce-d2d":
                self.dst[:e].copy_(self.src[:e], non_blocking=True)
            elif comm == "ce-d2h":
                self.host[:e].copy_(self.src[:e], non_blocking=True)
            elif comm == "ce-h2d":
                self.dst[:e].copy_(self.host[:e], non_blocking=True)
            else:
                raise ValueError(f"unknown comm {comm!r}")

        return lambda: [one(p) for p in pieces]

    def measure(self, gemm: bool, comm: Callable[[], None] | None, priority: int = 0, green: _Green | None = None,
                repeats: int = 9) -> tuple[float, float, float]:
        """Median (t_gemm_end, t_comm_end, t_all) in seconds from a common start; 0 for an op not run."""
        torch = require_torch()
        cs = self.high if priority < 0 else self.low
        samples = []
        for it in range(repeats + 1):
            main = torch.cuda.current_stream(self.device)
            start = torch.cuda.Event(enable_timing=True)
            eg, ec = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(main)

            def launch_comm():
                cs.wait_stream(main)
                with torch.cuda.stream(cs):
                    comm()
                    ec.record(cs)

            if comm is not None and priority < 0:
                launch_comm()
            if gemm:
                if green is not None and green.ctx is not None:
                    gs = _green_enter(torch, green, self.device)
                    try:
                        gs.wait_event(start)
                        with torch.cuda.stream(gs):
                            self.gemm_fn()
                            eg.record(gs)
                    finally:
                        _green_exit(green)
                else:
                    self.gstream.wait_stream(main)
                    with torch.cuda.stream(self.gstream):
                        self.gemm_fn()
                        eg.record(self.gstream)
            if comm is not None and priority >= 0:
                launch_comm()
            torch.cuda.synchronize(self.device)
            if it == 0:
                continue  # warm-up: launches, kernel compilation, handle creation
            tg = start.elapsed_time(eg) * 1e-3 if gemm else 0.0
            tc = start.elapsed_time(ec) * 1e-3 if comm is not None else 0.0
            samples.append((tg, tc, max(tg, tc)))
        return tuple(statistics.median(s[i] for s in samples) for i in range(3))


def comm_bandwidth(h: Harness, comm: str, blocks: int) -> float:
    """Bytes per second of one comm kind alone (one CHUNK_BYTES piece), moved bytes counted once."""
    _, t, _ = h.measure(False, h.comm_fn(comm, CHUNK_BYTES, blocks), repeats=5)
    return CHUNK_BYTES / t


def run_c3(device, variants: Sequence[Variant] | None = None, ratios: Sequence[float] = (0.3, 1.0, 3.0),
           gemms: dict | None = None, dtype: str = "bf16", on_row=None, errors: list | None = None) -> list[list]:
    """Rows (COLUMNS) for every GEMM x variant x comm/comp ratio; failures go to `errors`, not raised."""
    torch = require_torch()
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    variants = list(variants or default_variants(sms))
    errors = errors if errors is not None else []
    ok, why = copykernel.available()
    if not ok:
        errors.append(f"sm-copy variants skipped: {why}")
        variants = [v for v in variants if v.comm != "sm-copy"]
    greens: dict[int, _Green] = {}
    rows = []
    for gname, shape in (gemms or GEMMS).items():
        h = Harness(device, shape, dtype)
        t1, _, _ = h.measure(True, None, repeats=3)
        h.reps = max(1, round(TARGET_COMP_S / t1))
        bw_cache: dict[tuple[str, int], float] = {}
        alone_cache: dict[int, float] = {}
        for v in variants:
            green = None
            if v.gemm_sms:
                green = greens.get(v.gemm_sms) or greens.setdefault(v.gemm_sms, green_context(torch, device, v.gemm_sms))
                if green.ctx is None:
                    errors.append(f"{v.name}: not available: {green.error}")
                    continue
            try:
                key = (v.comm, v.blocks)
                if key not in bw_cache:
                    bw_cache[key] = comm_bandwidth(h, v.comm, v.blocks)
                if 0 not in alone_cache:
                    alone_cache[0] = h.measure(True, None)[0]
                for r in ratios:
                    nbytes = max(4, int(r * alone_cache[0] * bw_cache[key]) // 4 * 4)
                    fn = h.comm_fn(v.comm, nbytes, v.blocks)
                    # Isolated times next to the concurrent one, so that clock drift cancels.
                    t_comp = h.measure(True, None)[0]
                    t_part = h.measure(True, None, green=green)[0] if green is not None else t_comp
                    _, t_comm, _ = h.measure(False, fn, v.priority)
                    tg, tc, tall = h.measure(True, fn, v.priority, green)
                    s_i, s_r, frac = fraction_of_ideal(t_comp, t_comm, tall)
                    m, n, k = shape
                    row = [v.name, gname, m, n, k, dtype, h.reps, v.gemm_sms or sms, v.comm, nbytes, v.blocks,
                           v.priority, r, t_comp, t_comm, tg, tc, tall, t_comp + t_comm, max(t_comp, t_comm),
                           s_i, s_r, frac, classify(t_comp, t_comm), tg / t_comp - 1.0, tc / t_comm - 1.0, t_part]
                    rows.append(row)
                    if on_row:
                        on_row(row)
            except Exception as e:  # noqa: BLE001 - one failing variant must not lose the others' rows
                errors.append(f"{gname}/{v.name}: {type(e).__name__}: {e}")
        del h
        torch.cuda.empty_cache()
    return rows


def sm_scaling(device, sms_list: Sequence[int], gemms: dict | None = None, dtype: str = "bf16",
               errors: list | None = None) -> list[list]:
    """Rows [gemm, m, n, k, dtype, reps, gemm_sms, time_s, slowdown] of each GEMM alone in green contexts of fewer SMs."""
    torch = require_torch()
    errors = errors if errors is not None else []
    rows = []
    for gname, shape in (gemms or GEMMS).items():
        h = Harness(device, shape, dtype)
        t1 = h.measure(True, None, repeats=3)[0]
        h.reps = max(1, round(TARGET_COMP_S / t1))
        t_full = h.measure(True, None)[0]
        for s in sms_list:
            g = green_context(torch, device, s)
            if g.ctx is None:
                errors.append(f"sm-scaling {s} SMs: not available: {g.error}")
                continue
            try:
                t = h.measure(True, None, green=g)[0]
                rows.append([gname, *shape, dtype, h.reps, s, t, t / t_full - 1.0])
            except Exception as e:  # noqa: BLE001
                errors.append(f"sm-scaling {gname} {s} SMs: {type(e).__name__}: {e}")
        del h
        torch.cuda.empty_cache()
    return rows


def summarize(rows: Sequence[Sequence]) -> list[list]:
    """Mean fraction of ideal per variant family and class, beside the published figure."""
    idx = {c: i for i, c in enumerate(COLUMNS)}
    groups: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        fam = c3_variant_family(r[idx["variant"]])
        if fam == "dma":
            fam = "dma-d2d" if r[idx["comm"]] == "ce-d2d" else "dma-pcie"
        f = r[idx["fraction_of_ideal"]]
        if f == f:
            groups.setdefault((fam, r[idx["class"]]), []).append(f)
            groups.setdefault((fam, "all"), []).append(f)
    out = []
    for (fam, cls), fs in sorted(groups.items()):
        out.append([fam, cls, len(fs), sum(fs) / len(fs), PUBLISHED.get(fam.split("-")[0] if fam.startswith("dma-") else fam,
                                                                 float("nan"))])
    return out


def copy_engine_profile(device) -> dict:
    """Which profiler events a contiguous D2D / D2H / H2D copy_ produces (memcpy, not kernels, is the goal)."""
    torch = require_torch()
    from torch.profiler import ProfilerActivity, profile

    src = torch.randn(1 << 24, device=device)
    dst = torch.empty_like(src)
    host = torch.empty(1 << 24, pin_memory=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        dst.copy_(src, non_blocking=True)
        host.copy_(src, non_blocking=True)
        dst.copy_(host, non_blocking=True)
        torch.cuda.synchronize(device)
    names = sorted({e.name for e in prof.events() if getattr(e, "device_type", None) is not None
                    and "CUDA" in str(e.device_type)})
    return {"cuda_events": names, "memcpy_only": all("memcpy" in n.lower() for n in names) and bool(names)}
