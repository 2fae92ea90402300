"""Vectorized step projection: many dense training scenarios at once, numpy over scenarios.

The per-node path (build_step -> cost.time per node -> plan.evaluate) costs about half a millisecond
per scenario. Here scenarios are grouped by graph structure (which nodes exist: TP, SP, DP, FSDP,
ZeRO-1, PP, recomputation, one or several micro-batches); each group gets one template graph and
one overlap plan; the op shapes of every node come from the layer description
(c3kit.workload.layer) evaluated over numpy arrays of the group's scenarios, and their times from the
same formulas as c3kit.cost's roofline and ring models. tests/step/test_fast.py checks agreement with the per-node path to 1e-9.

Cost models: c3kit.cost's "roofline" and "efficiency" kinds (GEMMs through the cost layer's own
vectorized curve, cost.efficiency.curve_times), collectives with any algorithm setting (ring, tree,
direct, hierarchical, auto = the fastest valid), the same as the per-node path's step_timer.

Scope: dense decoder models, phase "train", no virtual pipeline stages. Anything else goes through
`c3kit.step.project`.
"""

from __future__ import annotations

import dataclasses
import functools
import gc

import numpy as np
import pandas as pd

from c3kit.cost.collectives import ring_formula
from c3kit.errors import C3kitError
from c3kit.step.plan import evaluate, make_plan
from c3kit.step.policy import DEFAULT_POLICY

MODEL_COLUMNS = ("hidden", "layers", "heads", "kv_heads", "ffn_hidden", "vocab", "gated_mlp", "layernorm",
                 "tied_embeddings")
PAR_COLUMNS = ("seq", "micro_batch", "global_batch", "tp", "sp", "dp", "pp", "fsdp", "dist_optimizer", "recompute")
HW_COLUMNS = ("gpu",)
RECOMPUTE_CODES = ("none", "selective", "full", "op", "layer")  # workload.parallel.RECOMPUTE
# optional column "recompute_every": Parallelism.recompute_every of recompute "layer" (absent: 2)
FSDP_SYNC_CODES = ("micro", "step")  # optional column "fsdp_sync": Parallelism.fsdp_sync (absent: "micro")
OUT_COLUMNS = ("compute", "comm", "exposed", "hidden_comm", "bubble", "step_time", "comm_share", "exposed_share",
               "mfu", "tokens_per_s", "tp_comm", "dp_comm", "pp_comm")


def gpu_arrays(names: np.ndarray, gpus: dict, dtype: str = "bf16") -> dict:
    """Per-scenario hardware arrays from the scenario's GPU name and a name -> GPU mapping."""
    from c3kit.cost.roofline import vector_flops

    uniq, inv = np.unique(names.astype(str), return_inverse=True)
    try:
        objs = [gpus[u] for u in uniq]
    except KeyError as e:
        raise C3kitError(f"scenario GPU {e.args[0]!r} is not in the GPU mapping") from None
    col = lambda f: np.array([f(g) for g in objs])[inv]  # noqa: E731
    return {"peak": col(lambda g: g.peak_flops(dtype)), "vec": col(vector_flops), "hbm": col(lambda g: g.hbm_bw),
            "su_bw": col(lambda g: g.scaleup.bw), "links": col(lambda g: g.scaleup.links_per_gpu),
            "mesh": col(lambda g: g.scaleup.topology == "mesh"), "ring": col(lambda g: g.scaleup.topology == "ring"),
            "switch": col(lambda g: g.scaleup.topology == "switch"), "su_lat": col(lambda g: g.scaleup.latency),
            "su_launch": col(lambda g: g.scaleup.launch),
            "nic": col(lambda g: g.scaleout_bw), "nic_lat": col(lambda g: g.scaleout_latency),
            "gpn": col(lambda g: g.gpus_per_node), "gpu_index": inv, "gpu_objs": objs}


def model_columns(model) -> dict:
    """The model columns of a scenario table for one ModelConfig (dense only)."""
    if model.is_moe:
        raise C3kitError(f"{model.name}: the vectorized sweep covers dense models only")
    return {"hidden": model.hidden, "layers": model.layers, "heads": model.heads, "kv_heads": model.kv_heads,
            "ffn_hidden": model.ffn_hidden, "vocab": model.vocab, "gated_mlp": model.gated_mlp,
            "layernorm": model.norm == "layernorm", "tied_embeddings": model.tied_embeddings,
            "rope": model.position == "rope"}


def par_columns(par, seq: int) -> dict:
    """The parallelism columns of a scenario table for one Parallelism."""
    if par.vpp != 1:
        raise C3kitError("the vectorized sweep covers vpp = 1 only")
    return {"seq": seq, "micro_batch": par.micro_batch, "global_batch": par.global_batch, "tp": par.tp,
            "sp": par.sp, "dp": par.dp, "pp": par.pp, "fsdp": par.fsdp, "dist_optimizer": par.dist_optimizer,
            "recompute": RECOMPUTE_CODES.index(par.recompute), "fsdp_sync": FSDP_SYNC_CODES.index(par.fsdp_sync),
            "recompute_every": par.recompute_every}


def scenario_objects(row):
    """(ModelConfig, Parallelism) of one scenario row (for the per-node path and the template graphs)."""
    from c3kit.workload.model import ModelConfig
    from c3kit.workload.parallel import Parallelism

    m = ModelConfig(name="sweep", hidden=int(row["hidden"]), layers=int(row["layers"]), heads=int(row["heads"]),
                    kv_heads=int(row["kv_heads"]), ffn_hidden=int(row["ffn_hidden"]), vocab=int(row["vocab"]),
                    gated_mlp=bool(row["gated_mlp"]), norm="layernorm" if row["layernorm"] else "rmsnorm",
                    tied_embeddings=bool(row["tied_embeddings"]), max_seq=int(row["seq"]),
                    position="rope" if bool(row.get("rope", False)) else "learned")
    p = Parallelism(tp=int(row["tp"]), sp=bool(row["sp"]), dp=int(row["dp"]), pp=int(row["pp"]),
                    fsdp=bool(row["fsdp"]), dist_optimizer=bool(row["dist_optimizer"]),
                    micro_batch=int(row["micro_batch"]), global_batch=int(row["global_batch"]),
                    recompute=RECOMPUTE_CODES[int(row["recompute"])],
                    fsdp_sync=FSDP_SYNC_CODES[int(row.get("fsdp_sync", 0))],
                    recompute_every=int(row.get("recompute_every", 2)))
    return m, p


def _structure(df: pd.DataFrame) -> np.ndarray:
    """An integer code per scenario naming which nodes its graph has."""
    tp1 = df["tp"].to_numpy() > 1
    dp1 = df["dp"].to_numpy() > 1
    fsdp = df["fsdp"].to_numpy().astype(bool) & dp1
    zero1 = df["dist_optimizer"].to_numpy().astype(bool) & dp1 & ~fsdp
    m = df["global_batch"].to_numpy() // (df["micro_batch"].to_numpy() * df["dp"].to_numpy())
    # the norm and activation kinds name the measured kernels a memory-bound op runs (layer.Structure)
    none = np.zeros(len(df), dtype=bool)
    # FSDP once per step (Parallelism.fsdp_sync "step"): no backward gather, one reduce-scatter of the stage
    fsdp_step = fsdp & (df["fsdp_sync"].to_numpy() == 1) if "fsdp_sync" in df.columns else none
    bits = [tp1, df["sp"].to_numpy().astype(bool) & tp1, dp1, fsdp, zero1, df["pp"].to_numpy() > 1, m > 1,
            df["layernorm"].to_numpy().astype(bool), df["gated_mlp"].to_numpy().astype(bool),
            df["rope"].to_numpy().astype(bool) if "rope" in df.columns else none, fsdp_step]
    code = df["recompute"].to_numpy().astype(np.int64)  # 0 .. 4: three bits
    for i, b in enumerate(bits):
        code = code + (b.astype(np.int64) << (i + 3))
    # recompute "layer": its frequency sets the recomputed ops' counts (micro-batches / N), part of the structure
    every = df["recompute_every"].to_numpy().astype(np.int64) if "recompute_every" in df.columns else 2
    layer = code % 8 == RECOMPUTE_CODES.index("layer")
    return code + np.where(layer, every, 0) * (1 << (len(bits) + 3))


def dims_of_columns(c: dict):
    """The layer description's Dims (int arrays) of scenario columns (MODEL_ and PAR_COLUMNS plus "gpn")."""
    from c3kit.workload.layer import Dims

    i64 = lambda k: np.asarray(c[k], dtype=np.int64)  # noqa: E731
    H, heads, dp, mb = i64("hidden"), i64("heads"), i64("dp"), i64("micro_batch")
    return Dims(
        hidden=H, heads=heads, kv_heads=i64("kv_heads"), head_dim=H // heads, ffn=i64("ffn_hidden"),
        vocab=i64("vocab"), layers=i64("layers"), g=np.where(np.asarray(c["gated_mlp"], dtype=bool), 2, 1),
        norm_w=np.where(np.asarray(c["layernorm"], dtype=bool), 2, 1),
        emb_mult=np.where(np.asarray(c["tied_embeddings"], dtype=bool), 1, 2), seq=i64("seq"), micro_batch=mb,
        tp=i64("tp"), dp=dp, pp=i64("pp"), grad_accum=i64("global_batch") // (mb * dp), gpn=i64("gpn"),
        b=2, gb=4)  # bf16 activations and weights, fp32 gradients


class _Shapes:
    """Op sizes of every node of a dense training graph as arrays over scenarios: the layer description
    (c3kit.workload.layer) evaluated over the group's columns."""

    def __init__(self, c: dict, structure):
        from c3kit.workload.layer import evaluate

        self.dims = dims_of_columns(c)
        tp, dp = self.dims.tp, self.dims.dp
        self.layer = evaluate(self.dims, structure)
        self.ops = self.layer.by_name()
        self.T = np.broadcast_to(self.layer.tokens, tp.shape)
        self.stage_layers = self.layer.stage_layers
        self.tp, self.dp, self.gpn = tp, dp, self.dims.gpn
        self._memo: dict = {}

    def compute(self, name: str):
        """(flops, bytes) of a compute node by op name, and its (M, N, K) when it is a GEMM."""
        hit = self._memo.get(name)
        if hit is None:
            from c3kit.workload.layer import GemmShape, flops_bytes

            op = self.ops.get(name)
            if op is None:
                raise C3kitError(f"vectorized sweep: the layer description has no op {name!r}")
            f, by = flops_bytes(op, self.dims.b)
            zero = 0.0 * self.T
            sh = op.shape
            dims = (sh.m, sh.n, sh.k) if isinstance(sh, GemmShape) else None
            hit = self._memo[name] = ((np.asarray(f, dtype=float) + zero, np.asarray(by, dtype=float) + zero), dims)
        return hit

    def collective(self, name: str):
        """(bytes, ranks, intra mask, GPUs of the group per node) of a collective node by op name."""
        from c3kit.workload.layer import intra

        sh = self.ops[name].shape
        ones = np.ones_like(self.T)
        nbytes = np.asarray(sh.bytes, dtype=float) + 0.0 * self.T
        ranks = sh.ranks * ones
        inside = intra(sh.block, self.gpn)
        if sh.group == "tp":
            return nbytes, ranks, inside, self.contiguous(ranks)
        if sh.group == "pp":
            return nbytes, ranks, inside, self.contiguous(ranks)
        # step.project.placement: a cross-node DP group has gpus_per_node / tp ranks per node
        g = np.where((self.tp <= self.gpn) & (self.gpn % self.tp == 0), self.gpn // np.maximum(self.tp, 1), 1)
        g = np.where(self.dp % g == 0, g, 1)
        return nbytes, ranks, inside, g

    def contiguous(self, n):
        """step.project.placement of a contiguous group (TP): whole nodes when it divides into them."""
        return np.where(n % self.gpn == 0, self.gpn, 1)


_INF = np.inf


def _tree(kind, n, s, a, bw):
    if kind != "all_reduce":
        return np.full(np.shape(s), _INF)
    return 2 * np.ceil(np.log2(n)) * a + 2.0 * s / bw


def _direct(kind, n, s, a, bw, peer):
    if kind == "all_reduce":
        return np.minimum(a + (n - 1) * s / bw, 2 * a + 2.0 * (n - 1) / n * s / bw)
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return a + (n - 1) / n * s / bw
    return a + s / peer


def _intra_bw(h, n):
    mesh_bw = h["su_bw"] / h["links"] * np.minimum(np.maximum(n - 1, 1), h["links"])
    return np.where(h["mesh"], mesh_bw, h["su_bw"])


def _direct_valid(h, n):
    return h["switch"] | (h["mesh"] & (h["links"] >= n - 1)) | (h["ring"] & (n <= 3))


def _best_sub(kind, n, s, a, bw, peer, h):
    ring = ring_formula(kind, n, s, a, bw, peer)
    return np.where(_direct_valid(h, n), np.minimum(ring, _direct(kind, n, s, a, bw, peer)), ring)


def _collective(kind, s, n, intra, g, h, algo: str, eff: float, su_eff=None) -> np.ndarray:
    """Vectorized cost.collectives.collective_estimate for arrays of sizes, ranks and placements (su_eff: the
    scale-up efficiency per scenario, cost/published.comm_eff_rows; eff then scales the NICs only)."""
    n = n.astype(float)
    su_eff = eff if su_eff is None else su_eff
    peer = np.where(h["switch"], h["su_bw"], h["su_bw"] / h["links"]) * su_eff
    # inside a node
    a, bw = h["su_lat"], _intra_bw(h, n) * su_eff
    ti = {"ring": ring_formula(kind, n, s, a, bw, peer),
          "tree": np.where(h["ring"] & (n > 3), _INF, _tree(kind, n, s, a, bw)),
          "direct": np.where(_direct_valid(h, n), _direct(kind, n, s, a, bw, peer), _INF),
          "hierarchical": np.full(np.shape(s), _INF)}
    # across nodes
    g = g.astype(float)
    nodes = n / g
    a_in, a_out = h["su_lat"], np.maximum(h["nic_lat"], h["su_lat"])
    nic = h["nic"] * eff
    b_in = _intra_bw(h, g) * su_eff
    flat = np.where(g > 1, np.minimum(b_in, g * nic), nic)
    if kind == "send_recv":
        te = {k: a_out + s / nic for k in ti}
    else:
        if kind == "all_reduce":
            hier = (_best_sub("reduce_scatter", g, s, a_in, b_in, peer, h)
                    + np.minimum(ring_formula("all_reduce", nodes, s / g, a_out, nic, nic),
                                 _tree("all_reduce", nodes, s / g, a_out, nic))
                    + _best_sub("all_gather", g, s, a_in, b_in, peer, h))
        elif kind == "all_to_all":
            hier = np.full(np.shape(s), _INF)
        else:
            hier = ring_formula(kind, nodes, s / g, a_out, nic, nic) + _best_sub(kind, g, s, a_in, b_in, peer, h)
        hier = np.where((g == 1) | (nodes == 1), _INF, hier)
        if kind == "all_to_all":
            t_in = np.where(g > 1, (g - 1) / n * s / b_in, 0.0)
            direct = a_out + np.maximum((n - g) / n * s / nic, t_in)
        else:
            direct = np.full(np.shape(s), _INF)
        te = {"ring": ring_formula(kind, n, s, a_out, flat, nic), "tree": _tree(kind, n, s, a_out, flat),
              "direct": direct, "hierarchical": hier}
    if algo == "auto":
        t_in = np.minimum.reduce([ti[k] for k in ("ring", "tree", "direct", "hierarchical")])
        t_out = np.minimum.reduce([te[k] for k in ("ring", "tree", "direct", "hierarchical")])
    else:
        t_in, t_out = ti[algo], te[algo]
    t = np.where(intra, t_in, t_out) + h["su_launch"]  # the library's base latency, once per call
    if np.any(~np.isfinite(t) & (n > 1) & (s > 0)):
        raise C3kitError(f"collective algorithm {algo!r} cannot run a {kind} of this sweep; use auto")
    return np.where((n == 1) | (s == 0), 0.0, t)


def _group_times(template, cols: dict, h: dict, cm, gemms: list, glue: str = "split", grad_acc: str = ""):
    """Op times (n x N) and FLOPs (n x N) of one structure group under cost model cm.

    Efficiency-curve GEMM rows are left for the caller: (row, m, n, k) is appended to `gemms` so that
    all groups' GEMMs go through one cost.efficiency.curve_times call per GPU.
    """
    from c3kit.cost.published import comm_eff_rows, mem_eff_rows
    from c3kit.workload.ops import Attention, Collective, Gemm

    from c3kit.workload.layer import Structure

    model, par = scenario_objects({k: v[0] for k, v in cols.items()})
    sh = _Shapes({**cols, "gpn": h["gpn"]}, Structure.of(model, par, "train", glue=glue, grad_acc=grad_acc))
    n, N = len(template.nodes), len(sh.T)
    t = np.empty((n, N))
    flops = np.zeros((n, N))
    eff = cm.kind != "roofline"
    memo: dict = {}  # TP collectives of one group share their size: time each kind once
    # each GPU's scenarios of the group, found once for all its calibrated ops; ops of one shape (the norms, the
    # dropouts of every layer) priced once: the same inputs give the same row
    by_gpu = [(gi, h["gpu_index"] == gi) for gi in np.unique(h["gpu_index"])]
    calibrated: dict = {}
    for i, nd in enumerate(template.nodes):
        op = nd.op
        if isinstance(op, Collective):
            key = (op.kind, op.group, "act" if op.group == "tp" and op.name != "loss.ar" else op.name)
            if key not in memo:
                nbytes, ranks, intra, g = sh.collective(op.name)
                memo[key] = _collective(op.kind, nbytes, ranks, intra, g, h, cm.algo, cm.comm_eff,
                                        comm_eff_rows(h["gpu_objs"], h["gpu_index"], cm, op.kind))  # cost/published.py
            t[i] = memo[key]
            continue
        (f, by), dims = sh.compute(op.name)
        flops[i] = f
        if isinstance(op, Gemm) and eff:
            gemms.append((i, *(np.broadcast_to(np.asarray(x, dtype=float), (N,)) for x in dims)))
            continue
        if isinstance(op, Gemm):
            peak, fe, me = h["peak"], 1.0, 1.0
        elif isinstance(op, Attention):
            peak, fe, me = h["peak"], cm.attn_eff, cm.mem_eff
        else:
            peak, fe, me = h["vec"], 1.0, mem_eff_rows(h["gpu_objs"], h["gpu_index"], cm)  # cost/published.py
        t_math = np.where(f != 0, f / (peak * fe), 0.0)
        t_mem = by / (h["hbm"] * me)
        t[i] = np.where(t_math > t_mem, t_math, t_mem)
        if (eff and not isinstance(op, Gemm)) or isinstance(op, Attention):
            shape = sh.ops[op.name].shape
            key = (t[i].tobytes(), _shape_key(shape))
            hit = calibrated.get(key)
            if hit is None:
                _calibrated_rows(t[i], shape, h, cm, by_gpu)
                calibrated[key] = t[i].copy()
            else:
                t[i] = hit
    return t, flops, sh


def _shape_key(shape) -> tuple:
    """A hashable key equal for two op shapes whose fields hold the same values (arrays by dtype, shape and bytes)."""
    def val(x):
        if isinstance(x, np.ndarray):
            return (x.dtype.str, x.shape, x.tobytes())
        if isinstance(x, tuple):
            return tuple(val(y) for y in x)
        return (type(x).__name__, x)

    return (type(shape).__name__, *(val(getattr(shape, f.name)) for f in dataclasses.fields(shape)))


def _calibrated_rows(row: np.ndarray, shape, h: dict, cm=None, by_gpu: list | None = None) -> None:
    """Overwrite an attention or memory-bound op's roofline times with its measured class (cost/opclass.py)
    on the scenarios whose GPU has one (own, transferred or projected), and an attention's with its backend's
    price (cost/attention.py), as cost.time does per op."""
    from c3kit.cost.opclass import calibration_for
    from c3kit.workload.layer import AttnShape, MemShape

    cls = "attention" if isinstance(shape, AttnShape) else "memory"
    if isinstance(shape, MemShape) and not shape.parts:
        return
    idx = h["gpu_index"]
    # each part's columns at full length once per op, then the scenarios of each GPU taken from them (the same
    # arrays as broadcasting per GPU; the broadcasts were a fifth of this function's time)
    full = None if isinstance(shape, AttnShape) else tuple(
        (k, np.broadcast_to(np.asarray(e, float), row.shape), np.broadcast_to(np.asarray(w, float), row.shape))
        for k, e, w in shape.parts)
    for gi, sel in by_gpu if by_gpu is not None else ((gi, idx == gi) for gi in np.unique(idx)):
        if full is None:
            from c3kit.cost import time as op_time
            from c3kit.cost.attention import attention_rows

            t = attention_rows(shape, h["gpu_objs"][gi], cm, row.shape[0], sel, price=op_time)
            if t is not None:
                row[sel] = t
            continue
        cal = calibration_for(h["gpu_objs"][gi], cls)
        if cal is None:
            continue
        t = cal.parts_time(tuple((k, e[sel], w[sel]) for k, e, w in full))
        if t is not None:
            row[sel] = t


_TEMPLATES: dict = {}


def _check(a: dict) -> None:
    """Reject rows that Parallelism.validate would reject (the sweep builds one graph per structure only)."""
    sizes = ("hidden", "layers", "heads", "kv_heads", "ffn_hidden", "vocab", "seq", "micro_batch", "global_batch",
             "tp", "dp", "pp")
    bad = np.zeros(len(a["tp"]), dtype=bool)
    for k in sizes:
        bad |= a[k] <= 0
    if bad.any():
        raise C3kitError(f"{int(bad.sum())} scenario(s) have non-positive sizes (first row {int(np.argmax(bad))})")
    rules = {"heads % tp": a["heads"] % a["tp"], "layers >= pp": a["layers"] < a["pp"],
             "ffn_hidden % tp": a["ffn_hidden"] % a["tp"], "hidden % heads": a["hidden"] % a["heads"],
             "heads % kv_heads": a["heads"] % a["kv_heads"],
             "kv_heads vs tp": np.minimum(a["kv_heads"] % a["tp"], a["tp"] % a["kv_heads"]),
             "global_batch % (micro_batch x dp)": a["global_batch"] % (a["micro_batch"] * a["dp"]),
             "recompute code": ~np.isin(a["recompute"], range(len(RECOMPUTE_CODES))),
             "recompute_every >= 1": a.get("recompute_every", 2) < 1,
             "fsdp_sync code": ~np.isin(a.get("fsdp_sync", 0), (0, 1))}
    for what, r in rules.items():
        if np.any(r != 0):
            raise C3kitError(f"{int(np.count_nonzero(r))} scenario(s) fail {what} (first row {int(np.argmax(r != 0))})")


def _curve_fill(pending: list, cm, gpu_objs: list) -> None:
    """Time every deferred GEMM with one curve_times call per GPU and write the rows back."""
    from c3kit.cost.efficiency import DEFAULT_CURVE, curve_times

    try:
        from c3kit.cost.model import curve_of
    except ImportError:  # older cost layer: the model's own curve or the default
        def curve_of(model, gpu):
            return model.curve or DEFAULT_CURVE
    if not pending:
        return
    parts = [(t, i, m, n, k, gi) for t, gi, gemms in pending for i, m, n, k in gemms]
    cols = [np.concatenate([p[j] for p in parts]) for j in (5, 2, 3, 4)]
    # a sweep repeats few GEMM shapes (100k scenarios: about 1.6M GEMM rows, 1.5k distinct per GPU): each distinct
    # (GPU, M, N, K) is priced once, elementwise as before, and every row takes its shape's time
    first, inv = _distinct_rows(cols)
    G, M, N, K = (c[first] for c in cols)
    out = np.empty(len(M))
    for gi in np.unique(G):
        sel = G == gi
        gpu = gpu_objs[gi]
        out[sel] = curve_times(curve_of(cm, gpu), gpu, M[sel], N[sel], K[sel], np.full(int(sel.sum()), "bf16"))
        _small_m_fill(out, sel, M, N, K, gpu)
        if getattr(cm, "power", "burst") == "sustained":
            from c3kit.cost.power import sustained_for

            eff = 2.0 * M[sel] * N[sel] * K[sel] / out[sel] / gpu.peak_flops("bf16")
            out[sel] *= sustained_for(gpu.name).factors(eff)
    out = out[inv]
    pos = 0
    for t, i, m, _, _, _ in parts:
        t[i] = out[pos:pos + len(m)]
        pos += len(m)


def _distinct_rows(cols: list) -> tuple[np.ndarray, np.ndarray]:
    """(the first row of each distinct row of the equal-length columns, each row's distinct-row number), by hashing
    (pandas.factorize) rather than sorting."""
    key = np.zeros(len(cols[0]), dtype=np.int64)
    for c in cols:
        codes, uniq = pd.factorize(c, use_na_sentinel=False)
        key = pd.factorize(key * len(uniq) + codes)[0]  # renumbered each time: stays below the row count
    n = int(key.max()) + 1 if len(key) else 0
    first = np.empty(n, dtype=np.int64)
    first[key[::-1]] = np.arange(len(key) - 1, -1, -1)  # the last write for each number is its first row
    return first, key


def _small_m_fill(out: np.ndarray, sel: np.ndarray, M, N, K, gpu) -> None:
    """GEMMs of at most SMALL_M_MAX rows priced by the measured small-M class, as cost.time does."""
    from c3kit.cost.gemmclass import SMALL_M_MAX, gemm_classes_for

    small = gemm_classes_for(gpu).small_m
    if small is None:
        return
    few = sel & (M <= SMALL_M_MAX) & small.covers(N, K)
    if few.any():
        out[few] = small(M[few], N[few], K[few])


_SAVED: dict = {}  # engine prices of pairs on the grid: (gpu, pattern, mode, power) -> {(ranks, m, n, k): saved}


def _saved(pattern: str, r: int, m: int, n: int, k: int, gpu, mode: str, power: str) -> float:
    """step.policy.price_pair's saved share for one grid shape (nan where the mode does not apply)."""
    from c3kit.overlap.problem import OverlapProblem
    from c3kit.step.policy import price_pair

    if r < 2 or m % (r * r):
        return float("nan")
    try:
        prob = OverlapProblem(pattern, m, n, k, "bf16", r)
    except C3kitError:
        return float("nan")
    price = price_pair(prob, gpu, mode, power)
    return float("nan") if price is None else price.saved


def _grid_shapes(gpu_index: np.ndarray, ranks: np.ndarray, dims: list) -> tuple[list[tuple], np.ndarray]:
    """Distinct (gpu index, ranks, M, N, K) rows with M, N, K on the power-of-two grid, and each scenario's row.

    The five columns are packed into one integer per scenario (grid exponents, not the values), so np.unique
    sorts plain integers rather than rows: the same rows, in the same order, as np.unique(..., axis=0)."""
    exps = [np.rint(np.log2(np.maximum(np.broadcast_to(np.asarray(d, dtype=np.int64), gpu_index.shape), 1)))
            .astype(np.int64) for d in dims]
    cols = [np.asarray(gpu_index, dtype=np.int64), np.asarray(ranks, dtype=np.int64), *exps]
    sizes = [int(c.max()) + 1 if c.size else 1 for c in cols]
    flat = np.ravel_multi_index(cols, sizes)  # lexicographic in the columns: np.unique's row order
    uniq, inv = np.unique(flat, return_inverse=True)
    gi, r, em, en, ek = (c.tolist() for c in np.unravel_index(uniq, sizes))
    rows = [(g, rr, 1 << a, 1 << b, 1 << c) for g, rr, a, b, c in zip(gi, r, em, en, ek)]
    return rows, inv.ravel()


def _bind_engine(policy, template, sh, h, power: str):
    """An EngineOverlap bound to a structure group: each pair's engine price per scenario, looked up by
    distinct pair shape on a power-of-two grid of M, N, K (np.unique over the group's scenarios)."""
    from c3kit.step.pairs import find_pairs
    from c3kit.step.policy import BoundEngineOverlap
    from c3kit.workload.layer import intra

    pairs = find_pairs(template)
    saved: dict[int, np.ndarray] = {}
    objs = h["gpu_objs"]
    ok = intra(sh.tp, sh.gpn) & (sh.tp > 1)
    gpu_index = np.asarray(h["gpu_index"])
    tp = np.broadcast_to(np.asarray(sh.tp, dtype=np.int64), gpu_index.shape)
    for i, pr in pairs.items():
        _, gemm_dims = sh.compute(template.nodes[pr.gemm].op.name)
        rows, inv = _grid_shapes(gpu_index, tp, list(gemm_dims))
        vals = []
        last = memo = None
        for gi, r, m, n, k in rows:  # sorted by GPU first: one memo per run of rows of a GPU
            if gi != last:
                last = gi
                memo = _SAVED.setdefault((objs[gi].name, pr.pattern, policy.mode, power), {})
            v = memo.get((r, m, n, k))
            if v is None:
                v = memo[(r, m, n, k)] = _saved(pr.pattern, r, m, n, k, objs[gi], policy.mode, power)
            vals.append(v)
        saved[i] = np.where(ok, np.array(vals, dtype=float)[inv], np.nan)
    return BoundEngineOverlap(policy, pairs, saved, {i: [] for i in pairs})


def _without_cycle_collection(fn):
    """fn with Python's cyclic garbage collector paused while it runs (then as it was before)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return run


# The sweep allocates millions of short-lived tuples (tasks, memo keys) that form no cycles (gc.collect() after a
# cold 100k auto run of bench_scale finds nothing), while each of the collector's passes walks every container
# object alive, the engine's memos included: about 6% of that run, for nothing.
@_without_cycle_collection
def project_many(df: pd.DataFrame, gpus: dict, cost_model=None, policy=None, progress=None,
                 compare: dict | None = None, glue: str = "split", grad_acc: str = "") -> pd.DataFrame:
    """Project every scenario row of df (MODEL_ and PAR_COLUMNS, "gpu" naming a key of gpus); OUT_COLUMNS back.

    compare: {name: policy} evaluated on the same op times; adds columns exposed_<name> and
    step_time_<name>. A policy with `bind` (step.policy.EngineOverlap) is bound per structure group.
    glue, grad_acc: the backward's glue and gradient accumulation of every scenario (workload.layer.GLUE, GRAD_ACC;
    "" = from glue and micro-batches), as build_step takes them.
    """
    from c3kit.cost.model import as_model
    from c3kit.workload.graph import build_step

    cm = as_model(cost_model)
    if cm.kind == "table":
        raise C3kitError("the vectorized sweep supports the roofline and efficiency cost models, not table")
    policy = policy or DEFAULT_POLICY
    missing = [c for c in (*MODEL_COLUMNS, *PAR_COLUMNS, *HW_COLUMNS) if c not in df.columns]
    if missing:
        raise C3kitError(f"scenario table lacks column(s) {', '.join(missing)}")
    out = np.zeros((len(df), len(OUT_COLUMNS)))
    compare = dict(compare or {})
    extra = {k: np.zeros((len(df), 2)) for k in compare}
    power = getattr(cm, "power", "burst")
    h_all = gpu_arrays(df["gpu"].to_numpy(), gpus)
    arrays = {k: df[k].to_numpy() for k in (*MODEL_COLUMNS, *PAR_COLUMNS)}
    # optional columns: rotary embeddings (their own kernels; absent = learned / no RoPE ops) and how often FSDP
    # gathers and reduce-scatters (FSDP_SYNC_CODES; absent = every micro-batch)
    arrays["rope"] = df["rope"].to_numpy() if "rope" in df.columns else np.zeros(len(df), dtype=bool)
    arrays["fsdp_sync"] = (df["fsdp_sync"].to_numpy().astype(np.int64) if "fsdp_sync" in df.columns
                           else np.zeros(len(df), dtype=np.int64))
    arrays["recompute_every"] = (df["recompute_every"].to_numpy().astype(np.int64) if "recompute_every" in df.columns
                                 else np.full(len(df), 2, dtype=np.int64))
    _check(arrays)
    codes = _structure(df)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    groups, pending = [], []
    for idx in np.split(order, bounds):
        if len(idx) == 0:
            continue
        h = {k: (v if k == "gpu_objs" else v[idx]) for k, v in h_all.items()}
        cols = {k: v[idx] for k, v in arrays.items()}
        code = int(codes[idx[0]])
        key = (code, glue, grad_acc)
        if key not in _TEMPLATES:  # node set and plan depend only on the structure code and the glue switches
            model, par = scenario_objects({k: v[0] for k, v in cols.items()})
            template = build_step(model, par, "train", int(cols["seq"][0]), "bf16", int(h["gpn"][0]), glue=glue,
                                  grad_acc=grad_acc)
            _TEMPLATES[key] = (template, make_plan(template))
        template, plan = _TEMPLATES[key]
        gemms: list = []
        t, flops, sh = _group_times(template, cols, h, cm, gemms, glue, grad_acc)
        if gemms:
            pending.append((t, h["gpu_index"], gemms))
        groups.append((idx, template, plan, t, flops, sh, cols, h))
    _curve_fill(pending, cm, h_all["gpu_objs"])
    for idx, template, plan, t, flops, sh, cols, h in groups:
        L = sh.stage_layers.astype(float)
        m = (cols["global_batch"] // (cols["micro_batch"] * cols["dp"])).astype(float)
        others = cols["layers"].astype(float) / L - 1.0  # the other ranks' layers over the fullest rank's
        for name, pol in compare.items():
            bound = _bind_engine(pol, template, sh, h, power) if hasattr(pol, "bind") else pol
            tlx = evaluate(plan, t, bound, layers=L, micro_batches=m, pp=cols["pp"].astype(float), vpp=1.0,
                           others=others)
            extra[name][idx] = np.column_stack([tlx.exposed.sum(axis=0), tlx.step_time])
        pol = _bind_engine(policy, template, sh, h, power) if hasattr(policy, "bind") else policy
        tl = evaluate(plan, t, pol, layers=L, micro_batches=m, pp=cols["pp"].astype(float), vpp=1.0,
                           others=others)
        comp, comm, exp = tl.compute.sum(axis=0), tl.comm.sum(axis=0), tl.exposed.sum(axis=0)
        step = tl.step_time
        lay = np.where(plan.in_layer[:, None], L, 1.0)
        mult = (plan.per_micro[:, None] * m + plan.const[:, None]) * lay
        fwd = np.array([nd.phase == "fwd" for nd in template.nodes])
        model_flops = 3.0 * (flops[fwd] * mult[fwd]).sum(axis=0)
        streams = np.array([nd.stream for nd in template.nodes])
        by_stream = {s: tl.comm[streams == s].sum(axis=0) for s in ("tp", "dp", "pp")}
        tokens = sh.T * m * cols["dp"]
        out[idx] = np.column_stack([
            comp, comm, exp, np.maximum(comm - exp, 0.0), tl.bubble, step,
            np.divide(comm, comp + comm, out=np.zeros(len(idx)), where=(comp + comm) > 0),
            exp / step, model_flops / (step * h["peak"]), tokens / step,
            by_stream["tp"], by_stream["dp"], by_stream["pp"]])
        if progress is not None:
            progress(len(idx))
    res = pd.DataFrame(out, columns=list(OUT_COLUMNS), index=df.index)
    for name, v in extra.items():
        res[f"exposed_{name}"] = v[:, 0]
        res[f"step_time_{name}"] = v[:, 1]
    return res
