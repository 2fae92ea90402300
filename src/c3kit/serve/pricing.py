"""Iteration time of a mixed prefill + decode batch, from the step model (c3kit.workload.graph + c3kit.step).

An iteration that computes T tokens (prefill chunks plus one token per decoding request) runs every
token-wise op of the model on T rows: the GEMMs, norms, activations, the TP / EP collectives and the
pipeline sends. That part is the step model's projection of a prefill graph of T tokens
(`build_step(..., "prefill", T)` then `step.project`, with its overlap policy and cost model), with
the graph's attention and LM-head nodes priced at zero. Attention is added per request kind:
each prefill chunk of n tokens after c cached ones (causal: n (c + n/2) query-key pairs) and the
decode batch (D queries over their KV lengths) with the graph's own attention op, re-sized; the LM
head is priced for the rows that sample a token. In an inference layer attention sits on the
critical path between the QKV GEMM and the output projection with no collective beside it, so
adding it to the projected time is what the step model itself would give.

Caching: the token-wise part depends on T only. It is projected exactly for T <= EXACT_BELOW;
up to LINEAR_UPTO tokens it is interpolated linearly inside each STEP-token interval
[STEP k + 1, STEP (k + 1)], whose two ends are projected exactly: GEMM tiles (64, 128, 256 rows)
make the time jump where a new row of tiles starts (at STEP k + 1) and vary smoothly in between,
so interpolating across a tile boundary would miss the jump. Above LINEAR_UPTO a geometric grid
(GRID_PER_OCTAVE points per doubling). Every T is memoized. `interpolation_error` measures the
error this costs against exact projections (tests bound it; docs/serve.md reports it). Decode attention reads the mean KV length
(rounded up) of the batch (exact for the roofline-style attention cost, which is linear in the
total), interpolated between KV-length grid points (KV_PER_OCTAVE per doubling, exact below
EXACT_BELOW) per decode batch size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Sequence

from c3kit.errors import C3kitError
from c3kit.hw.model import dtype_bytes
from c3kit.workload.layer import sample_shape
from c3kit.workload.ops import Attention

EXACT_BELOW = 64
STEP = 64
LINEAR_UPTO = 16384
GRID_PER_OCTAVE = 32
KV_PER_OCTAVE = 16


@dataclass(frozen=True)
class IterationPrice:
    """Seconds of one iteration by part: token-wise ops (GEMMs, collectives, ...), attention, LM head."""

    tokens: int
    dense: float
    attn_prefill: float
    attn_decode: float
    lm_head: float
    graph_pad: float = 0.0  # engine terms (serve/overheads.py): padded rows of a captured decode batch,
    eager_wait: float = 0.0  # GPU idle while the host launches an eager iteration's kernels,
    host: float = 0.0  # the engine's host time outside the GPU's work

    @property
    def total(self) -> float:
        """Seconds of the whole iteration."""
        return (self.dense + self.attn_prefill + self.attn_decode + self.lm_head + self.graph_pad + self.eager_wait
                + self.host)


class StepPricer:
    """Prices iterations of one replica (model, GPU, TP/PP/EP, cost model, overlap policy) with the step model.

    `timer(op, hw) -> seconds` replaces the cost model for every op (the studies use it to price
    collectives on DMA engines or GEMVs on PIM); None: c3kit.cost.time under cost_model.
    `engine`: the serving engine's terms beyond the kernels (serve/overheads.py; a name or an
    EngineOverheads; None: "none", the kernels alone).
    """

    def __init__(self, model, hw, tp: int = 1, pp: int = 1, ep: int = 1, dtype: str = "bf16", cost_model=None,
                 policy=None, timer: Callable | None = None, exact: bool = False, engine=None):
        from c3kit import cost
        from c3kit.cost.model import as_model
        from c3kit.serve.overheads import get_engine
        from c3kit.step import make_plan
        from c3kit.workload.graph import build_step
        from c3kit.workload.parallel import Parallelism

        self.model, self.hw, self.dtype = model, hw, dtype
        self.par = Parallelism(tp=tp, pp=pp, ep=ep, micro_batch=1)
        self.par.validate(model)
        self.policy = policy
        if timer is None:
            cm = as_model(cost_model)
            timer = lambda op, h: cost.time(op, h, cm)  # noqa: E731
        self.timer = timer
        self.exact = exact
        self.engine = get_engine(engine)
        self._build = partial(build_step, glue=self.engine.glue)
        g = self._build(model, self.par, "prefill", 1, dtype, hw.gpus_per_node)
        attn = [nd.op for nd in g.nodes if isinstance(nd.op, Attention) and nd.phase == "fwd"]
        if not attn:
            raise C3kitError(f"{model.name}: the step graph has no attention op to price")
        self._attn = attn[0]
        self._attn_runs = model.layers  # one per layer, every pipeline stage in turn
        heads = [nd.op for nd in g.nodes if nd.role == "lm_head"]
        self._head = heads[0] if heads else None
        samples = [nd.op for nd in g.nodes if nd.role == "sample"]
        self._sample = samples[0] if samples else None
        self._elem_bytes = dtype_bytes(dtype)  # the layer description's activation element size (Dims.b)
        self._zero_names = {op.name for op in (self._attn, self._head, self._sample) if op is not None}
        # kernels of one iteration: one per node run of the step graph (every layer, every stage in turn)
        self.kernels = int(round(float(make_plan(g).multiplicity.sum()) * pp))
        self._launch = 0.0
        if self.engine.eager_dispatch:
            from c3kit.serve.overheads import eager_launch_s

            self._launch = eager_launch_s(hw)
        self._dense: dict[int, float] = {}
        self._grid: dict[int, float] = {}
        self._plans: dict = {}
        self._dec: dict = {}
        self._heads: dict = {}

    # -- the token-wise part ------------------------------------------------------
    def _project(self, tokens: int) -> float:
        from c3kit.step import make_plan, project

        g = self._build(self.model, self.par, "prefill", tokens, self.dtype, self.hw.gpus_per_node)
        base, zero = self.timer, self._zero_names

        def timer(op, hw):
            if getattr(op, "name", None) in zero:
                return 0.0
            return base(op, hw)

        key = len(g.nodes)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = make_plan(g)
        return float(project(g, self.hw, policy=self.policy, timer=timer, plan=plan).totals.step_time)

    def _at(self, tokens: int) -> float:
        v = self._grid.get(tokens)
        if v is None:
            v = self._grid[tokens] = self._project(tokens)
        return v

    def dense_time(self, tokens: int) -> float:
        """Seconds of the token-wise ops for `tokens` rows (interpolated between exact points unless exact)."""
        v = self._dense.get(tokens)
        if v is not None:
            return v
        if tokens < 1:
            raise C3kitError(f"an iteration must compute at least one token, got {tokens}")
        if self.exact or tokens <= EXACT_BELOW:
            v = self._at(tokens)
        else:
            if tokens <= LINEAR_UPTO:
                k = (tokens - 1) // STEP
                t0, t1 = STEP * k + 1, STEP * (k + 1)
            else:
                i = int(math.floor(math.log2(tokens / LINEAR_UPTO) * GRID_PER_OCTAVE))
                while _grid_point(i) > tokens:
                    i -= 1
                while _grid_point(i + 1) <= tokens:
                    i += 1
                t0, t1 = _grid_point(i), _grid_point(i + 1)
            v0 = self._at(t0)
            v = v0 if tokens == t0 else v0 + (self._at(t1) - v0) * (tokens - t0) / (t1 - t0)
        self._dense[tokens] = v
        return v

    # -- attention and head ---------------------------------------------------------
    def attn_prefill_time(self, prefill: Sequence[tuple[int, int]]) -> float:
        """Seconds of attention for prefill chunks (tokens, tokens already cached), all layers."""
        a, timer, hw = self._attn, self.timer, self.hw
        t = 0.0
        for n, c in prefill:
            if c == 0:
                op = replace(a, batch=1, q_len=n, kv_len=n)
            else:  # causal over the chunk: the same query-key pairs as n queries over c + n/2 keys
                op = replace(a, batch=1, q_len=n, kv_len=c + (n + 1) // 2)
            t += timer(op, hw)
        return t * self._attn_runs

    def attn_decode_time(self, decode: int, decode_kv: int) -> float:
        """Seconds of attention for `decode` single-token queries over decode_kv KV tokens in all, all layers."""
        if decode <= 0:
            return 0.0
        kv = max(1, -(-decode_kv // decode))
        if self.exact or kv <= EXACT_BELOW:
            return self._attn_decode(decode, kv)
        # linear in the mean KV length between grid points KV_PER_OCTAVE per doubling
        x = math.log2(kv) * KV_PER_OCTAVE
        j = int(x)
        k0, k1 = _kv_point(j), _kv_point(j + 1)
        while k0 > kv:
            j -= 1
            k0, k1 = _kv_point(j), k0
        while k1 <= kv:
            j += 1
            k0, k1 = k1, _kv_point(j + 1)
        v0 = self._attn_decode(decode, k0)
        return v0 + (self._attn_decode(decode, k1) - v0) * (kv - k0) / (k1 - k0)

    def _attn_decode(self, decode: int, kv: int) -> float:
        key = (decode, kv)
        v = self._dec.get(key)
        if v is None:
            op = replace(self._attn, batch=decode, q_len=1, kv_len=kv)
            v = self._dec[key] = self.timer(op, self.hw) * self._attn_runs
        return v

    def head_time(self, rows: int) -> float:
        """Seconds of the LM head and the sampling of `rows` positions."""
        v = self._heads.get(rows)
        if v is None:
            v = 0.0 if self._head is None or rows <= 0 else self.timer(replace(self._head, m=rows), self.hw)
            if self._sample is not None and rows > 0:
                s = sample_shape(rows, self.model.vocab, self._elem_bytes)
                v += self.timer(replace(self._sample, bytes=s.bytes, flops=s.flops, parts=s.parts), self.hw)
            self._heads[rows] = v
        return v

    # -- one iteration ------------------------------------------------------------------
    def engine_terms(self, prefill: Sequence[tuple[int, int]], decode: int, decode_kv: int,
                     kernels_s: float) -> tuple[float, float, float]:
        """(graph_pad, eager_wait, host) seconds of an iteration whose kernels take kernels_s (serve/overheads.py)."""
        e = self.engine
        if not e.active:
            return 0.0, 0.0, 0.0
        pad = wait = 0.0
        gb = e.graph_batch(len(prefill), decode)
        if gb is not None:
            if gb > decode:  # the captured graph computes gb rows; the padded rows have no KV to attend
                pad = self.dense_time(gb) + self.head_time(gb) - self.dense_time(decode) - self.head_time(decode)
        elif e.eager_dispatch:
            wait = max(0.0, self.kernels * self._launch - kernels_s)
        return pad, wait, e.host_time(decode + len(prefill))

    def breakdown(self, prefill: Sequence[tuple[int, int]], decode: int, decode_kv: int) -> IterationPrice:
        """IterationPrice of prefill chunks (tokens, cached before) plus `decode` requests reading decode_kv KV tokens."""
        tokens = decode + sum(n for n, _ in prefill)
        ap = self.attn_prefill_time(prefill)
        ad = self.attn_decode_time(decode, decode_kv)
        d, h = self.dense_time(tokens), self.head_time(decode + len(prefill))
        pad, wait, host = self.engine_terms(prefill, decode, decode_kv, d + h + ap + ad)
        return IterationPrice(tokens=tokens, dense=d, attn_prefill=ap, attn_decode=ad, lm_head=h, graph_pad=pad,
                              eager_wait=wait, host=host)

    def __call__(self, prefill: Sequence[tuple[int, int]], decode: int, decode_kv: int) -> float:
        """Seconds of one iteration (the simulator's pricing call)."""
        tokens = decode
        for n, _ in prefill:
            tokens += n
        d = self._dense.get(tokens)
        if d is None:
            d = self.dense_time(tokens)
        t = d + self.head_time(decode + len(prefill))
        if prefill:
            t += self.attn_prefill_time(prefill)
        if decode:
            t += self.attn_decode_time(decode, decode_kv)
        if self.engine.active:
            pad, wait, host = self.engine_terms(prefill, decode, decode_kv, t)
            t += pad + wait + host
        return t

    def price_iteration(self, prefill_tokens: Sequence[int], decode_kv_lens: Sequence[int],
                        prefill_cached: Sequence[int] | None = None) -> IterationPrice:
        """One iteration from per-request sizes: prefill tokens (and tokens already cached) and decode KV lengths.

        The hook for measured loops: time a real iteration with these sizes and compare with .total.
        decode_kv_lens are the KV lengths each decode query attends to (its own new token included).
        """
        cached = list(prefill_cached) if prefill_cached is not None else [0] * len(prefill_tokens)
        if len(cached) != len(prefill_tokens):
            raise C3kitError("prefill_cached must have one entry per prefill request")
        if any(int(n) < 1 for n in prefill_tokens) or any(int(c) < 0 for c in cached):
            raise C3kitError("prefill tokens must be >= 1 and cached tokens >= 0")
        if any(int(k) < 1 for k in decode_kv_lens):
            raise C3kitError("decode KV lengths must be >= 1")
        pf = [(int(n), int(c)) for n, c in zip(prefill_tokens, cached)]
        return self.breakdown(pf, len(decode_kv_lens), int(sum(int(k) for k in decode_kv_lens)))

    def interpolation_error(self, tokens: Sequence[int]) -> float:
        """Largest relative error of the interpolated token-wise time against exact projections at these counts."""
        worst = 0.0
        for t in tokens:
            exact = self._project(int(t))
            worst = max(worst, abs(self.dense_time(int(t)) - exact) / exact)
        return worst


def _grid_point(i: int) -> int:
    """The i-th grid token count above LINEAR_UPTO: round(LINEAR_UPTO * 2^(i / GRID_PER_OCTAVE))."""
    return int(round(LINEAR_UPTO * 2.0 ** (i / GRID_PER_OCTAVE)))


def _kv_point(j: int) -> int:
    """The j-th KV-length grid point: round(2^(j / KV_PER_OCTAVE))."""
    return int(round(2.0 ** (j / KV_PER_OCTAVE)))


def price_iteration(model, hw, prefill_tokens: Sequence[int], decode_kv_lens: Sequence[int], *, tp: int = 1,
                    pp: int = 1, ep: int = 1, dtype: str = "bf16", cost_model=None, policy=None,
                    prefill_cached: Sequence[int] | None = None, exact: bool = True, engine=None) -> IterationPrice:
    """Price one iteration (model / hw objects or names) without a simulation: the per-iteration comparison hook."""
    from c3kit.hw.catalog import get_gpu
    from c3kit.workload.model import get_model

    m = get_model(model) if isinstance(model, str) else model
    g = get_gpu(hw) if isinstance(hw, str) else hw
    pricer = StepPricer(m, g, tp=tp, pp=pp, ep=ep, dtype=dtype, cost_model=cost_model, policy=policy, exact=exact,
                        engine=engine)
    return pricer.price_iteration(prefill_tokens, decode_kv_lens, prefill_cached)
