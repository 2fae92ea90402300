"""Op classes priced from published op-level microbenchmarks (cost/data/published_ops/<gpu>.toml).

For a catalog GPU without measurements of its own or a documented transfer (cost/basis.py), each op class
with published rows of role "fit" is priced from them; the rest stay on the datasheet:

- gemm / gemm_fp8: the efficiency curve's size dependence (tile padding, waves, K saturation, small-dimension
  penalty) is the one fitted to SHAPE_FROM's measured GEMMs, evaluated with this GPU's SM count and peaks;
  its peak fraction per dtype is set so that the curve reproduces the published achieved TFLOP/s at the
  published shape (one level per dtype, nothing else moves). Dtypes without a published row keep the curve's
  assumed fraction and stay "datasheet".
- attention: fused backends whose kernel has published rows run at the published fraction of the dense
  peak for the nearest head dim and the same causality, interpolated in log(sequence length) and held
  constant beyond the published range; forward and backward both take the forward + backward figure.
- memory (and fp8_cast, a bandwidth-bound kernel priced as one): memory-bound ops without a measured class
  run at the median published STREAM-like bandwidth (Copy, Mul, Add, Triad) as a fraction of the datasheet
  HBM bandwidth, in place of the cost model's assumed mem_eff.
- collective: rows of role "fit" (nccl-tests / rccl-tests bus bandwidth of an all-reduce over the GPUs of one
  node at the largest message sizes, where bandwidth dominates) set the scale-up efficiency: the fraction of
  the catalog's scale-up bandwidth that makes cost/collectives.py's model reproduce the published time (the
  median over fit rows). It replaces the cost model's assumed comm_eff on the scale-up fabric only (NICs keep
  comm_eff); the other sizes are checks. Used by cost.time and the vectorized step model alike (comm_eff_rows).
  All-to-all, all-gather and reduce-scatter fit rows (op classes collective_a2a, collective_ag, collective_rs) set
  their own kind's efficiency the same way: NCCL runs each kind with its own algorithms (an all-reduce may reduce
  in the switch, an all-to-all moves every byte point to point), so one kind's level is not another's; a kind
  without rows of its own takes the all-reduce rows' level, and without either the datasheet's.

- sustained_gemm: steady-state GEMM figures (run back to back long enough for the power controller to settle).
  Rows of role "fit" set the GPU's sustained-clock factor (cost/power.py, published_sustained): the published time
  over the levelled curve's burst time, the median over rows, for every GEMM (the factor cost/power.py documents).
  Each row names the dtype whose rate prices it (rate_of), where the measured dtype runs at another's peak.

Every file names the date its rows were retrieved (`retrieved`, YYYY-MM-DD); its path comes from
cost/calib_store.py. Rows of role "check" set nothing: tests and benchmarks/published_ops.py compare the model against them.
Published end-to-end step times are never read here.
"""

from __future__ import annotations

import datetime
import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache

from c3kit.errors import CostError

PUBLISHED = "published microbenchmark"
# the measured GPU whose GEMM curve shape the published levels are set on (cost/data/calib)
SHAPE_FROM = "H200-SXM"
ROLES = ("fit", "check")
# collective kinds whose fit rows set a scale-up efficiency, with the cost/basis.py op class each prices: all_reduce
# (also the level of every kind without rows of its own) and the others, their own
FIT_KINDS = {"all_reduce": "collective", "all_to_all": "collective_a2a", "all_gather": "collective_ag",
             "reduce_scatter": "collective_rs"}
GEMM_DTYPE_CLASS = {"bf16": "gemm", "fp16": "gemm", "fp8": "gemm_fp8"}
# the name sources() gives the steady-state GEMM rows that set the sustained-clock factor (not a priced op class)
SUSTAINED = "gemm_sustained"


@dataclass(frozen=True)
class GemmPoint:
    """One published GEMM figure: achieved dense TFLOP/s of an m x n x k GEMM."""

    dtype: str
    m: int
    n: int
    k: int
    tflops: float
    source: str
    role: str
    retrieved: str = ""

    @property
    def seconds(self) -> float:
        """The time the figure implies for one GEMM."""
        return 2.0 * self.m * self.n * self.k / (self.tflops * 1e12)


@dataclass(frozen=True)
class SteadyGemmPoint(GemmPoint):
    """One published steady-state GEMM figure: achieved dense TFLOP/s under sustained load, priced at the rate of
    dtype rate_of (the measured dtype may run at another's peak)."""

    rate_of: str = ""


@dataclass(frozen=True)
class AttentionPoint:
    """One published fused-attention figure: achieved TFLOP/s at a sequence length (FLOPs as c3kit counts)."""

    kernel: str
    backends: tuple[str, ...]
    direction: str
    causal: bool
    head_dim: int
    seq: int
    tflops: float
    source: str
    role: str
    # the benchmark's layout where it is not FlashAttention-2's (16k tokens, hidden 2048, as many kv as q heads)
    batch: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    retrieved: str = ""


@dataclass(frozen=True)
class MemoryPoint:
    """One published STREAM-like figure: achieved HBM bandwidth of a streaming kernel."""

    kernel: str
    gbps: float
    source: str
    role: str
    retrieved: str = ""


@dataclass(frozen=True)
class CollectivePoint:
    """One published collective figure: bus bandwidth of a collective of `ranks` GPUs at a message size."""

    kind: str
    ranks: int
    nbytes: int
    busbw_gbps: float
    source: str
    role: str
    retrieved: str = ""


@dataclass(frozen=True)
class PublishedOps:
    """The published op-level rows of one catalog GPU."""

    gpu: str
    gemm: tuple[GemmPoint, ...]
    attention: tuple[AttentionPoint, ...]
    origin: str
    memory: tuple[MemoryPoint, ...] = ()
    collective: tuple[CollectivePoint, ...] = ()
    retrieved: str = ""
    sustained: tuple[SteadyGemmPoint, ...] = ()

    def fit_gemm(self, dtype: str | None = None) -> tuple[GemmPoint, ...]:
        """GEMM rows of role fit (of one dtype)."""
        return tuple(p for p in self.gemm if p.role == "fit" and (dtype is None or p.dtype == dtype))

    def fit_collective(self, kind: str) -> tuple[CollectivePoint, ...]:
        """The fit rows that set kind's scale-up efficiency: its own, else the all-reduce's (FIT_KINDS)."""
        own = tuple(c for c in self.collective if c.role == "fit" and c.kind == kind)
        return own or tuple(c for c in self.collective if c.role == "fit" and c.kind == "all_reduce")

    def classes(self) -> frozenset:
        """The op classes (cost/basis.py names) these rows price."""
        out = {GEMM_DTYPE_CLASS[p.dtype] for p in self.fit_gemm() if p.dtype in GEMM_DTYPE_CLASS}
        if any(a.role == "fit" for a in self.attention):
            out.add("attention")
        if any(m.role == "fit" for m in self.memory):
            out.update(("memory", "fp8_cast"))
        fit = {c.kind for c in self.collective if c.role == "fit"}
        if "all_reduce" in fit:  # a kind without rows of its own takes the all-reduce rows' level
            out.update(FIT_KINDS.values())
        out.update(FIT_KINDS[k] for k in fit)
        return frozenset(out)

    def sources(self, op_class: str) -> tuple[str, ...]:
        """The distinct sources of the fit rows that price op_class (cost/basis.py names) with their retrieval
        dates, in file order."""
        rows = {"gemm": [p for p in self.fit_gemm() if GEMM_DTYPE_CLASS.get(p.dtype) == "gemm"],
                "gemm_fp8": [p for p in self.fit_gemm() if GEMM_DTYPE_CLASS.get(p.dtype) == "gemm_fp8"],
                "attention": [a for a in self.attention if a.role == "fit"],
                "memory": [m for m in self.memory if m.role == "fit"],
                "fp8_cast": [m for m in self.memory if m.role == "fit"],
                **{cls: self.fit_collective(kind) for kind, cls in FIT_KINDS.items()},
                SUSTAINED: [s for s in self.sustained if s.role == "fit"]}.get(op_class, [])
        return tuple(dict.fromkeys(f"{cite(r.source)}, retrieved {r.retrieved or self.retrieved}" for r in rows))


def published_dir():
    """The shipped folder of published op-level rows (cost/calib_store.published_ops_dir)."""
    from c3kit.cost.calib_store import published_ops_dir

    return published_ops_dir()


def cite(source: str) -> str:
    """A row's source without the table / figure detail after the first comma (the citation's document)."""
    return source.split(", ")[0].split(" (")[0].strip()


def _need(row: dict, keys: tuple[str, ...], where: str, value: str = "tflops") -> None:
    missing = [k for k in keys if k not in row]
    if missing:
        raise CostError(f"{where}: row lacks {', '.join(missing)}; every published row needs {', '.join(keys)}")
    if row["role"] not in ROLES:
        raise CostError(f"{where}: role {row['role']!r} is not one of {', '.join(ROLES)}")
    if not float(row[value]) > 0:
        raise CostError(f"{where}: {value} must be positive, got {row[value]!r}")
    if not str(row["source"]).strip():
        raise CostError(f"{where}: every row needs its source")


def _date(value, where: str) -> str:
    try:
        return datetime.date.fromisoformat(str(value)).isoformat()
    except ValueError:
        raise CostError(f"{where}: needs retrieved = \"YYYY-MM-DD\" (the date its rows were read from their "
                        f"sources), got {value!r}") from None


def _row_date(r: dict, doc: dict, where: str) -> str:
    """A row's retrieval date: its own `retrieved`, else its file's (checked once the rows are read)."""
    return _date(r["retrieved"], where) if "retrieved" in r else str(doc.get("retrieved", ""))


def parse(doc: dict, origin: str) -> PublishedOps:
    """PublishedOps from one file's parsed TOML (errors name the file and what is missing)."""
    if "gpu" not in doc:
        raise CostError(f"{origin}: needs gpu = \"<catalog name>\"")
    gemm = []
    for i, r in enumerate(doc.get("gemm", [])):
        _need(r, ("dtype", "m", "n", "k", "tflops", "source", "role"), f"{origin} gemm row {i + 1}")
        gemm.append(GemmPoint(str(r["dtype"]), int(r["m"]), int(r["n"]), int(r["k"]), float(r["tflops"]),
                              str(r["source"]), str(r["role"]), _row_date(r, doc, f"{origin} gemm row {i + 1}")))
    att = []
    for i, r in enumerate(doc.get("attention", [])):
        _need(r, ("kernel", "backends", "direction", "causal", "head_dim", "seq", "tflops", "source", "role"),
              f"{origin} attention row {i + 1}")
        if r["direction"] != "fwd+bwd":
            raise CostError(f"{origin} attention row {i + 1}: only direction 'fwd+bwd' is read, got {r['direction']!r}")
        layout = tuple(int(r[k]) if k in r else None for k in ("batch", "heads", "kv_heads"))
        att.append(AttentionPoint(str(r["kernel"]), tuple(str(b) for b in r["backends"]), str(r["direction"]),
                                  bool(r["causal"]), int(r["head_dim"]), int(r["seq"]), float(r["tflops"]),
                                  str(r["source"]), str(r["role"]), *layout,
                                  _row_date(r, doc, f"{origin} attention row {i + 1}")))
    mem = []
    for i, r in enumerate(doc.get("memory", [])):
        _need(r, ("kernel", "gbps", "source", "role"), f"{origin} memory row {i + 1}", "gbps")
        mem.append(MemoryPoint(str(r["kernel"]), float(r["gbps"]), str(r["source"]), str(r["role"]),
                               _row_date(r, doc, f"{origin} memory row {i + 1}")))
    coll = []
    for i, r in enumerate(doc.get("collective", [])):
        _need(r, ("kind", "ranks", "bytes", "busbw_gbps", "source", "role"), f"{origin} collective row {i + 1}",
              "busbw_gbps")
        if r["role"] == "fit" and r["kind"] not in FIT_KINDS:
            raise CostError(f"{origin} collective row {i + 1}: only {', '.join(FIT_KINDS)} rows set a scale-up "
                            f"efficiency, got a fit row of {r['kind']!r}")
        coll.append(CollectivePoint(str(r["kind"]), int(r["ranks"]), int(r["bytes"]), float(r["busbw_gbps"]),
                                    str(r["source"]), str(r["role"]), _row_date(r, doc, f"{origin} collective row {i + 1}")))
    steady = []
    for i, r in enumerate(doc.get("sustained_gemm", [])):
        where = f"{origin} sustained_gemm row {i + 1}"
        _need(r, ("dtype", "rate_of", "m", "n", "k", "tflops", "source", "role"), where)
        if r["rate_of"] not in GEMM_DTYPE_CLASS:
            raise CostError(f"{where}: rate_of must be one of {', '.join(GEMM_DTYPE_CLASS)}, got {r['rate_of']!r}")
        steady.append(SteadyGemmPoint(str(r["dtype"]), int(r["m"]), int(r["n"]), int(r["k"]), float(r["tflops"]),
                                      str(r["source"]), str(r["role"]), _row_date(r, doc, where), str(r["rate_of"])))
    retrieved = _date(doc.get("retrieved"), origin)
    return PublishedOps(str(doc["gpu"]), tuple(gemm), tuple(att), origin, tuple(mem), tuple(coll), retrieved,
                        tuple(steady))


@lru_cache(maxsize=1)
def _all() -> dict[str, PublishedOps]:
    out: dict[str, PublishedOps] = {}
    for f in sorted(published_dir().iterdir(), key=lambda p: p.name):
        if not f.name.endswith(".toml"):
            continue
        ops = parse(tomllib.loads(f.read_text(encoding="utf-8")), f.name)
        if ops.gpu in out:
            raise CostError(f"published rows for {ops.gpu} in both {out[ops.gpu].origin} and {f.name}")
        out[ops.gpu] = ops
    return out


def all_published() -> tuple[PublishedOps, ...]:
    """Every shipped GPU's published rows, by file name."""
    return tuple(_all().values())


def published_ops(gpu_name: str) -> PublishedOps | None:
    """The published rows of a catalog GPU (or of the one a projection was made from), else None."""
    from c3kit.hw.future import base_name

    return _all().get(base_name(gpu_name))


def published_classes(gpu_name: str) -> frozenset:
    """Op classes priced from published rows on this GPU (empty where it has none)."""
    ops = published_ops(gpu_name)
    return ops.classes() if ops is not None else frozenset()


# ------------------------------------------------------------------------------------------------ GEMM

def level_curve(shape, gpu, points) -> object:
    """shape (an EfficiencyCurve) with each dtype's peak fraction set so that it reproduces the published
    achieved TFLOP/s at the published shape (the median over rows where a dtype has several)."""
    fracs = dict(shape.peak_frac)
    by_dtype: dict[str, list] = {}
    for p in points:
        by_dtype.setdefault(p.dtype, []).append(p)
    curve = shape
    for _ in range(3):  # the memory term makes time not exactly proportional to 1 / frac: converge
        for dt, pts in by_dtype.items():
            ratios = sorted(curve.gemm_time(p.m, p.n, p.k, dt, gpu) / p.seconds for p in pts)
            fracs[dt] = curve.frac(dt) * ratios[len(ratios) // 2]
        bad = {d: f for d, f in fracs.items() if not 0 < f <= 1.5}
        if bad:
            raise CostError(f"published GEMM rows of {gpu.name} imply peak fractions {bad}: check the rows' "
                            "TFLOP/s against the catalog peaks")
        curve = curve.with_(peak_frac=fracs)
    return curve


def gemm_curve(gpu, shape, shape_origin: str) -> tuple[object, str] | None:
    """(curve, origin) for a GPU with published GEMM rows: shape (SHAPE_FROM's fitted curve, whose origin is
    shape_origin) levelled to them; None where it has none or the shape is not a fitted one. The caller
    (cost/default_curve.py) passes the shape, so this module imports no curve fitting."""
    ops = published_ops(gpu.name)
    pts = ops.fit_gemm() if ops is not None else ()
    if not pts or not shape_origin.startswith("fitted:"):
        return None
    from c3kit.hw.catalog import get_gpu

    # levelled on the catalog GPU the rows were measured on: a projection keeps its own scaled peaks
    ref = get_gpu(ops.gpu)
    return level_curve(shape, ref, pts), f"published:{ops.origin}+shape:{shape_origin[len('fitted:'):]}"


# ------------------------------------------------------------------------------------------- attention

def attention_fraction(gpu_name: str, peak: float, backend: str, head_dim: int, causal: bool,
                       seq: float) -> float | None:
    """The fraction of the dense peak (FLOP/s) a fused backend reaches on this GPU from its published rows,
    or None where that backend's kernel has none (see the module docstring for the interpolation)."""
    ops = published_ops(gpu_name)
    if ops is None:
        return None
    rows = [a for a in ops.attention if a.role == "fit" and backend in a.backends]
    if not rows:
        return None
    hds = sorted({a.head_dim for a in rows})
    hd = min(hds, key=lambda h: (abs(h - head_dim), -h))
    rows = [a for a in rows if a.head_dim == hd]
    same = [a for a in rows if a.causal == bool(causal)]
    pts = sorted((a.seq, a.tflops) for a in (same or rows))
    x = math.log(max(float(seq), 1.0))
    xs = [math.log(s) for s, _ in pts]
    if x <= xs[0]:
        tf = pts[0][1]
    elif x >= xs[-1]:
        tf = pts[-1][1]
    else:
        j = next(i for i in range(1, len(xs)) if xs[i] >= x)
        w = (x - xs[j - 1]) / (xs[j] - xs[j - 1])
        tf = pts[j - 1][1] * (1 - w) + pts[j][1] * w
    return tf * 1e12 / peak


def attention_eff(op, hw, backend: str, model) -> float:
    """The FLOP-rate fraction a fused attention op runs at on hw: attention_fraction where published rows
    cover its backend (cost models other than roofline), else the cost model's attn_eff."""
    if model.kind == "roofline":
        return model.attn_eff
    f = attention_fraction(hw.name, hw.peak_flops(op.dtype), backend, op.head_dim, op.causal, op.kv_len)
    return model.attn_eff if f is None else f


def published_rows(a: dict, shape, backend: str, hw, model, price):
    """attention_time's published-rate roofline over a layer description's scenarios (a: arrays of batch, heads,
    kv_heads, q_len, kv_len, head_dim), one op per distinct shape; None where no published rows cover the
    backend on hw (the caller's datasheet roofline stands)."""
    import numpy as np

    ops = published_ops(hw.name)
    if model.kind == "roofline" or ops is None or not any(r.role == "fit" and backend in r.backends
                                                            for r in ops.attention):
        return None
    from c3kit.workload.ops import Attention

    keys = list(zip(*(np.asarray(a[k]).tolist() for k in ("batch", "heads", "kv_heads", "q_len", "kv_len",
                                                          "head_dim"))))
    memo: dict = {}
    out = np.empty(len(keys))
    for i, key in enumerate(keys):
        if key not in memo:
            b, h, kvh, q, kv, d = (int(x) for x in key)
            memo[key] = price(Attention("a", b, h, kvh, q, kv, d, causal=shape.causal, backward=shape.backward,
                                        balanced=shape.balanced, backend=backend), hw, model)
        out[i] = memo[key]
    return out


def attention_labels(gpu_name: str) -> dict[str, str]:
    """backend -> PUBLISHED for the fused backends whose kernel has published rows on this GPU."""
    ops = published_ops(gpu_name)
    rows = [a for a in ops.attention if a.role == "fit"] if ops is not None else []
    return {b: PUBLISHED for a in rows for b in a.backends}


# ---------------------------------------------------------------------------------------------- memory

@lru_cache(maxsize=64)
def memory_fraction(gpu_name: str) -> float | None:
    """The median published streaming bandwidth over the datasheet HBM bandwidth (None without fit rows);
    a projection keeps its base GPU's fraction (its bandwidth is scaled, the efficiency is not)."""
    ops = published_ops(gpu_name)
    pts = sorted(m.gbps for m in ops.memory if m.role == "fit") if ops is not None else []
    if not pts:
        return None
    from c3kit.hw.catalog import get_gpu

    mid = len(pts) // 2
    med = pts[mid] if len(pts) % 2 else 0.5 * (pts[mid - 1] + pts[mid])
    frac = med * 1e9 / get_gpu(ops.gpu).hbm_bw
    if not 0 < frac <= 1.0:
        raise CostError(f"published memory rows of {ops.gpu} imply {frac:.3f} of the datasheet bandwidth: check them")
    return frac


def _published_or_model(hw, model, attr: str, fraction) -> float:
    """fraction(hw.name) where published rows set it (cost models other than roofline), else model.<attr>."""
    if model.kind == "roofline":
        return getattr(model, attr)
    f = fraction(hw.name)
    return getattr(model, attr) if f is None else f


def _per_scenario(eff, gpus, index, model):
    """eff(gpu, model) per scenario of the vectorized step model (gpus: GPU objects, index: each scenario's GPU)."""
    import numpy as np

    return np.asarray([eff(g, model) for g in gpus], dtype=float)[np.asarray(index)]


def mem_eff(hw, model) -> float:
    """The bandwidth fraction memory-bound ops without a measured class run at on hw: the published one where
    rows exist (cost models other than roofline), else the cost model's mem_eff."""
    return _published_or_model(hw, model, "mem_eff", memory_fraction)


def mem_eff_rows(gpus, index, model):
    """mem_eff per scenario for the vectorized step model (gpus: GPU objects, index: each scenario's GPU)."""
    return _per_scenario(mem_eff, gpus, index, model)


# ------------------------------------------------------------------------------------------ collectives

@lru_cache(maxsize=64)
def scaleup_fraction(gpu_name: str, kind: str = "all_reduce") -> float | None:
    """The scale-up bandwidth efficiency a collective of `kind` runs at from the published fit rows (None without
    any): its own kind's rows, else the all-reduce's (PublishedOps.fit_collective); per row, the model's time at
    efficiency 1 over the published time (cost/collectives.py, one node; its launch base is below 1% at the fit
    rows' sizes), the median over rows. A projection keeps its base GPU's fraction."""
    ops = published_ops(gpu_name)
    rows = ops.fit_collective(kind) if ops is not None else ()
    if not rows:
        return None
    from c3kit.cost.collectives import busbw_factor, collective_estimate
    from c3kit.hw.catalog import get_gpu
    from c3kit.workload.ops import Collective

    gpu = get_gpu(ops.gpu)
    ratios = []
    for c in rows:
        op = Collective("c", c.kind, float(c.nbytes), c.ranks, span="intra")
        t_pub = c.nbytes * busbw_factor(c.kind, c.ranks) / (c.busbw_gbps * 1e9)
        ratios.append(collective_estimate(op, gpu, "auto", 1.0)[0] / t_pub)
    ratios.sort()
    mid = len(ratios) // 2
    frac = ratios[mid] if len(ratios) % 2 else 0.5 * (ratios[mid - 1] + ratios[mid])
    if not 0 < frac <= 1.0:
        raise CostError(f"published collective rows of {ops.gpu} imply {frac:.3f} of the catalog scale-up bandwidth: "
                        "check them (an in-switch reduction such as NVLS is not in the model's algorithms)")
    return frac


def comm_eff(hw, model, kind: str = "all_reduce") -> float:
    """The scale-up bandwidth efficiency a collective of `kind` runs at on hw: the published one where fit rows
    price it (cost models other than roofline), else the cost model's comm_eff."""
    return _published_or_model(hw, model, "comm_eff", lambda name: scaleup_fraction(name, kind))


def comm_eff_rows(gpus, index, model, kind: str = "all_reduce"):
    """comm_eff of `kind` per scenario for the vectorized step model (gpus: GPU objects, index: each scenario's GPU)."""
    return _per_scenario(lambda g, m: comm_eff(g, m, kind), gpus, index, model)


def clear() -> None:
    """Forget the loaded published rows and what was derived from them (tests that add files); the sustained-clock
    factors that read them are forgotten by c3kit.cost.model.clear_caches."""
    _all.cache_clear()
    memory_fraction.cache_clear()
    scaleup_fraction.cache_clear()
