"""Vectorized step projection: many dense training scenarios at once, numpy over scenarios.

The per-node path (build_step -> cost.time per node -> plan.evaluate) costs about half a millisecond
per scenario. Here scenarios are grouped by graph structure (which nodes exist: TP, SP, DP, FSDP,
ZeRO-1, PP, recomputation, one or several micro-batches); each group gets one template graph and
one overlap plan, and the op shapes and times of every node are computed as numpy arrays over the
group's scenarios with the same formulas as c3kit.workload.graph (shapes) and c3kit.cost's roofline
and ring models (times). tests/step/test_fast.py checks agreement with the per-node path to 1e-9.

Cost models: c3kit.cost's "roofline" and "efficiency" kinds (GEMMs through the cost layer's own
vectorized curve, cost.efficiency.curve_times), collectives with any algorithm setting (ring, tree,
direct, hierarchical, auto = the fastest valid), the same as the per-node path's step_timer.

Scope: dense decoder models, phase "train", no virtual pipeline stages. Anything else goes through
`c3kit.step.project`.
"""

from __future__ import annotations

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
RECOMPUTE_CODES = ("none", "selective", "full")
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
            "layernorm": model.norm == "layernorm", "tied_embeddings": model.tied_embeddings}


def par_columns(par, seq: int) -> dict:
    """The parallelism columns of a scenario table for one Parallelism."""
    if par.vpp != 1:
        raise C3kitError("the vectorized sweep covers vpp = 1 only")
    return {"seq": seq, "micro_batch": par.micro_batch, "global_batch": par.global_batch, "tp": par.tp,
            "sp": par.sp, "dp": par.dp, "pp": par.pp, "fsdp": par.fsdp, "dist_optimizer": par.dist_optimizer,
            "recompute": RECOMPUTE_CODES.index(par.recompute)}


def scenario_objects(row):
    """(ModelConfig, Parallelism) of one scenario row (for the per-node path and the template graphs)."""
    from c3kit.workload.model import ModelConfig
    from c3kit.workload.parallel import Parallelism

    m = ModelConfig(name="sweep", hidden=int(row["hidden"]), layers=int(row["layers"]), heads=int(row["heads"]),
                    kv_heads=int(row["kv_heads"]), ffn_hidden=int(row["ffn_hidden"]), vocab=int(row["vocab"]),
                    gated_mlp=bool(row["gated_mlp"]), norm="layernorm" if row["layernorm"] else "rmsnorm",
                    tied_embeddings=bool(row["tied_embeddings"]), max_seq=int(row["seq"]))
    p = Parallelism(tp=int(row["tp"]), sp=bool(row["sp"]), dp=int(row["dp"]), pp=int(row["pp"]),
                    fsdp=bool(row["fsdp"]), dist_optimizer=bool(row["dist_optimizer"]),
                    micro_batch=int(row["micro_batch"]), global_batch=int(row["global_batch"]),
                    recompute=RECOMPUTE_CODES[int(row["recompute"])])
    return m, p


def _structure(df: pd.DataFrame) -> np.ndarray:
    """An integer code per scenario naming which nodes its graph has."""
    tp1 = df["tp"].to_numpy() > 1
    dp1 = df["dp"].to_numpy() > 1
    fsdp = df["fsdp"].to_numpy().astype(bool) & dp1
    zero1 = df["dist_optimizer"].to_numpy().astype(bool) & dp1 & ~fsdp
    m = df["global_batch"].to_numpy() // (df["micro_batch"].to_numpy() * df["dp"].to_numpy())
    bits = [tp1, df["sp"].to_numpy().astype(bool) & tp1, dp1, fsdp, zero1, df["pp"].to_numpy() > 1, m > 1]
    code = df["recompute"].to_numpy().astype(np.int64)
    for i, b in enumerate(bits):
        code = code + (b.astype(np.int64) << (i + 2))
    return code


class _Shapes:
    """Op sizes of every node of a dense training graph, as arrays over scenarios (mirrors workload.graph)."""

    def __init__(self, c: dict):
        i64 = lambda k: np.asarray(c[k], dtype=np.int64)  # noqa: E731
        self.H, self.heads, self.kvh = i64("hidden"), i64("heads"), i64("kv_heads")
        self.F, self.V, self.seq = i64("ffn_hidden"), i64("vocab"), i64("seq")
        self.mb, self.tp, self.dp, self.pp = i64("micro_batch"), i64("tp"), i64("dp"), i64("pp")
        self.g = np.where(np.asarray(c["gated_mlp"], dtype=bool), 2, 1)
        self.norm_w = np.where(np.asarray(c["layernorm"], dtype=bool), 2, 1)
        self.tied = np.asarray(c["tied_embeddings"], dtype=bool)
        self.sp = np.asarray(c["sp"], dtype=bool) & (self.tp > 1)
        self.fsdp = np.asarray(c["fsdp"], dtype=bool)
        self.zero1 = np.asarray(c["dist_optimizer"], dtype=bool)
        self.stage_layers = i64("layers") // self.pp
        self.b, self.gb = 2, 4  # bf16 activations and weights, fp32 gradients
        H, tp = self.H, self.tp
        self.hd = H // self.heads
        self.T = self.mb * self.seq
        self.Tsp = np.where(self.sp, -(-self.T // tp), self.T)
        self.qn = self.heads // tp
        self.kvn = np.maximum(1, self.kvh // tp)
        self.n_qkv = (self.qn + 2 * self.kvn) * self.hd
        self.k_proj = self.qn * self.hd
        self.Fl = self.F // tp
        self.Vl = -(-self.V // tp)
        attn_w = H * self.n_qkv + self.k_proj * H + 2 * H * self.norm_w
        self.layer_w = attn_w + (self.g + 1) * H * self.Fl
        self.emb_w = self.Vl * H
        self.emb_params = self.emb_w * np.where(self.tied, 1, 2)
        self.act_bytes = self.T * H * self.b
        gpn = np.asarray(c["gpn"], dtype=np.int64)
        self.gpn = gpn
        self._memo: dict = {}
        self.intra = {k: (blk <= gpn) & (gpn % blk == 0) for k, blk in
                      (("tp", tp), ("dp", tp * self.dp), ("pp", tp * self.dp * self.pp))}

    def gemm(self, m, n, k, batch=1):
        self.dims = (m, n, k)  # read back by the efficiency-curve path
        return 2.0 * m * n * k * batch, (m * k + k * n + m * n).astype(float) * self.b * batch

    def mem(self, nbytes, flops=0):
        return np.asarray(flops, dtype=float) + 0.0 * self.T, np.asarray(nbytes, dtype=float) + 0.0 * self.T

    def attention(self, backward: bool):
        f = 4.0 * self.mb * self.qn * self.seq * self.seq * self.hd * 0.5
        q_o = 2 * self.mb * self.qn * self.seq * self.hd
        kv = 2 * self.mb * self.kvn * self.seq * self.hd
        by = (q_o + kv).astype(float) * self.b
        return (f * 2.5, by * 2.0) if backward else (f, by)

    def compute(self, name: str):
        """(flops, bytes) of a compute node by op name (recomputed "re." ops have the forward's shape)."""
        base = name[3:] if name.startswith("re.") else name
        hit = self._memo.get(base)
        if hit is None:
            self.dims = None
            fb = self._compute(base)
            hit = self._memo[base] = (fb, self.dims)
        self.dims = hit[1]
        return hit[0]

    def _compute(self, base: str):
        T, Tsp, H, b, g, Fl = self.T, self.Tsp, self.H, self.b, self.g, self.Fl
        table = {
            "attn_norm": lambda: self.mem(4 * Tsp * H * b, 5 * Tsp * H),
            "mlp_norm": lambda: self.mem(4 * Tsp * H * b, 5 * Tsp * H),
            "qkv": lambda: self.gemm(T, self.n_qkv, H),
            "attn": lambda: self.attention(False),
            "proj": lambda: self.gemm(T, H, self.k_proj),
            "fc1": lambda: self.gemm(T, g * Fl, H),
            "act": lambda: self.mem((g + 1) * T * Fl * b, 8 * g * T * Fl),
            "fc2": lambda: self.gemm(T, H, Fl),
            "embed": lambda: self.mem(2 * T * H * b),
            "final_norm": lambda: self.mem(2 * Tsp * H * b),
            "lm_head": lambda: self.gemm(T, self.Vl, H),
            "loss": lambda: self.mem(3 * T * self.Vl * 4, 5 * T * self.Vl),
            "loss.bwd": lambda: self.mem(2 * T * self.Vl * b, 2 * T * self.Vl),
            "lm_head.dgrad": lambda: self.gemm(T, H, self.Vl),
            "lm_head.wgrad": lambda: self.gemm(H, self.Vl, T),
            "final_norm.bwd": lambda: self.mem(4 * Tsp * H * b),
            "fc2.dgrad": lambda: self.gemm(T, Fl, H),
            "fc2.wgrad": lambda: self.gemm(Fl, H, T),
            "act.bwd": lambda: self.mem((2 * g + 1) * T * Fl * b, 8 * g * T * Fl),
            "fc1.dgrad": lambda: self.gemm(T, H, g * Fl),
            "fc1.wgrad": lambda: self.gemm(H, g * Fl, T),
            "mlp_norm.bwd": lambda: self.mem(8 * Tsp * H * b, 8 * Tsp * H),
            "proj.dgrad": lambda: self.gemm(T, self.k_proj, H),
            "proj.wgrad": lambda: self.gemm(self.k_proj, H, T),
            "attn.bwd": lambda: self.attention(True),
            "qkv.dgrad": lambda: self.gemm(T, H, self.n_qkv),
            "qkv.wgrad": lambda: self.gemm(H, self.n_qkv, T),
            "attn_norm.bwd": lambda: self.mem(8 * Tsp * H * b, 8 * Tsp * H),
            "embed.bwd": lambda: self.mem(2 * T * H * b + self.emb_w * 4),
        }
        if base == "optimizer":
            shard = np.where(self.fsdp | self.zero1, self.dp, 1)
            p = (self.stage_layers * self.layer_w + self.emb_params) / shard
            return self.mem(30 * p, 12 * p)
        if base not in table:
            raise C3kitError(f"vectorized sweep: no shape rule for node {base!r}")
        return table[base]()

    def collective(self, name: str, kind: str, group: str):
        """(bytes, ranks, intra mask, GPUs of the group per node) of a collective node by op name."""
        ones = np.ones_like(self.T)
        if group == "tp":
            nbytes = (2 * self.T * 4) if name == "loss.ar" else self.act_bytes
            return nbytes.astype(float), self.tp, self.intra["tp"], self.contiguous(self.tp)
        if group == "pp":
            pp_bytes = np.where(self.sp, self.T // self.tp, self.T) * self.H * self.b
            return pp_bytes.astype(float), 2 * ones, self.intra["pp"], self.contiguous(2 * ones)
        sizes = {
            "layer.fsdp_ag": self.layer_w * self.b, "layer.fsdp_ag.bwd": self.layer_w * self.b,
            "layer.fsdp_rs": self.layer_w * self.gb, "layer.dp_grad": self.layer_w * self.gb,
            "embed.fsdp_ag": self.emb_w * self.b * np.where(self.tied, 1, 2),
            "embed.fsdp_rs": self.emb_params * self.gb, "embed.dp_grad": self.emb_params * self.gb,
            "dp_param_ag": (self.stage_layers * self.layer_w + self.emb_params) * self.b,
        }
        if name not in sizes:
            raise C3kitError(f"vectorized sweep: no size rule for collective {name!r}")
        # step.project.placement: a cross-node DP group has gpus_per_node / tp ranks per node
        g = np.where((self.tp <= self.gpn) & (self.gpn % self.tp == 0), self.gpn // np.maximum(self.tp, 1), 1)
        g = np.where(self.dp % g == 0, g, 1)
        return sizes[name].astype(float), self.dp, self.intra["dp"], g

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


def _collective(kind, s, n, intra, g, h, algo: str, eff: float) -> np.ndarray:
    """Vectorized cost.collectives.collective_estimate for arrays of sizes, ranks and placements."""
    n = n.astype(float)
    peer = np.where(h["switch"], h["su_bw"], h["su_bw"] / h["links"]) * eff
    # inside a node
    a, bw = h["su_lat"], _intra_bw(h, n) * eff
    ti = {"ring": ring_formula(kind, n, s, a, bw, peer),
          "tree": np.where(h["ring"] & (n > 3), _INF, _tree(kind, n, s, a, bw)),
          "direct": np.where(_direct_valid(h, n), _direct(kind, n, s, a, bw, peer), _INF),
          "hierarchical": np.full(np.shape(s), _INF)}
    # across nodes
    g = g.astype(float)
    nodes = n / g
    a_in, a_out = h["su_lat"], np.maximum(h["nic_lat"], h["su_lat"])
    nic = h["nic"] * eff
    b_in = _intra_bw(h, g) * eff
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


def _group_times(template, cols: dict, h: dict, cm, gemms: list):
    """Op times (n x N) and FLOPs (n x N) of one structure group under cost model cm.

    Efficiency-curve GEMM rows are left for the caller: (row, m, n, k) is appended to `gemms` so that
    all groups' GEMMs go through one cost.efficiency.curve_times call per GPU.
    """
    from c3kit.workload.ops import Attention, Collective, Gemm

    sh = _Shapes({**cols, "gpn": h["gpn"]})
    n, N = len(template.nodes), len(sh.T)
    t = np.empty((n, N))
    flops = np.zeros((n, N))
    eff = cm.kind != "roofline"
    memo: dict = {}  # TP collectives of one group share their size: time each kind once
    for i, nd in enumerate(template.nodes):
        op = nd.op
        if isinstance(op, Collective):
            key = (op.kind, op.group, "act" if op.group == "tp" and op.name != "loss.ar" else op.name)
            if key not in memo:
                nbytes, ranks, intra, g = sh.collective(op.name, op.kind, op.group)
                memo[key] = _collective(op.kind, nbytes, ranks, intra, g, h, cm.algo, cm.comm_eff)
            t[i] = memo[key]
            continue
        f, by = sh.compute(op.name)
        flops[i] = f
        if isinstance(op, Gemm) and eff:
            gemms.append((i, *(np.broadcast_to(np.asarray(x, dtype=float), (N,)) for x in sh.dims)))
            continue
        if isinstance(op, Gemm):
            peak, fe, me = h["peak"], 1.0, 1.0
        elif isinstance(op, Attention):
            peak, fe, me = h["peak"], cm.attn_eff, cm.mem_eff
        else:
            peak, fe, me = h["vec"], 1.0, cm.mem_eff
        t_math = np.where(f != 0, f / (peak * fe), 0.0)
        t_mem = by / (h["hbm"] * me)
        t[i] = np.where(t_math > t_mem, t_math, t_mem)
    return t, flops, sh


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
    rules = {"heads % tp": a["heads"] % a["tp"], "layers % pp": a["layers"] % a["pp"],
             "ffn_hidden % tp": a["ffn_hidden"] % a["tp"], "hidden % heads": a["hidden"] % a["heads"],
             "heads % kv_heads": a["heads"] % a["kv_heads"],
             "kv_heads vs tp": np.minimum(a["kv_heads"] % a["tp"], a["tp"] % a["kv_heads"]),
             "global_batch % (micro_batch x dp)": a["global_batch"] % (a["micro_batch"] * a["dp"]),
             "recompute code": ~np.isin(a["recompute"], (0, 1, 2))}
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
    M = np.concatenate([p[2] for p in parts])
    N = np.concatenate([p[3] for p in parts])
    K = np.concatenate([p[4] for p in parts])
    G = np.concatenate([p[5] for p in parts])
    out = np.empty(len(M))
    for gi in np.unique(G):
        sel = G == gi
        gpu = gpu_objs[gi]
        out[sel] = curve_times(curve_of(cm, gpu), gpu, M[sel], N[sel], K[sel], np.full(int(sel.sum()), "bf16"))
        if getattr(cm, "power", "burst") == "sustained":
            from c3kit.cost.power import sustained_for

            eff = 2.0 * M[sel] * N[sel] * K[sel] / out[sel] / gpu.peak_flops("bf16")
            out[sel] *= sustained_for(gpu.name).factors(eff)
    pos = 0
    for t, i, m, _, _, _ in parts:
        t[i] = out[pos:pos + len(m)]
        pos += len(m)


_SAVED: dict = {}  # engine price of a pair on the grid: (gpu, pattern, ranks, m, n, k, mode, power) -> saved


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


def _bind_engine(policy, template, sh, h, power: str):
    """An EngineOverlap bound to a structure group: each pair's engine price per scenario, looked up by
    distinct pair shape on a power-of-two grid of M, N, K (np.unique over the group's scenarios)."""
    from c3kit.step.pairs import find_pairs
    from c3kit.step.policy import BoundEngineOverlap

    pairs = find_pairs(template)
    N = len(sh.T)
    saved: dict[int, np.ndarray] = {}
    objs = h["gpu_objs"]
    ok = sh.intra["tp"] & (sh.tp > 1)
    for i, pr in pairs.items():
        sh.compute(template.nodes[pr.gemm].op.name)
        dims = [np.broadcast_to(np.asarray(x, dtype=np.int64), (N,)) for x in sh.dims]
        grid = [np.left_shift(1, np.rint(np.log2(np.maximum(d, 1))).astype(np.int64)) for d in dims]
        keys = np.column_stack([h["gpu_index"], sh.tp, *grid])
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        vals = np.full(len(uniq), np.nan)
        for u, (gi, r, m, n, k) in enumerate(uniq.tolist()):
            key = (objs[gi].name, pr.pattern, r, m, n, k, policy.mode, power)
            v = _SAVED.get(key)
            if v is None:
                v = _SAVED[key] = _saved(pr.pattern, r, m, n, k, objs[gi], policy.mode, power)
            vals[u] = v
        saved[i] = np.where(ok, vals[inv.ravel()], np.nan)
    return BoundEngineOverlap(policy, pairs, saved, {i: [] for i in pairs})


def project_many(df: pd.DataFrame, gpus: dict, cost_model=None, policy=None, progress=None,
                 compare: dict | None = None) -> pd.DataFrame:
    """Project every scenario row of df (MODEL_ and PAR_COLUMNS, "gpu" naming a key of gpus); OUT_COLUMNS back.

    compare: {name: policy} evaluated on the same op times; adds columns exposed_<name> and
    step_time_<name>. A policy with `bind` (step.policy.EngineOverlap) is bound per structure group.
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
        if code not in _TEMPLATES:  # node set and plan depend only on the structure code
            model, par = scenario_objects({k: v[0] for k, v in cols.items()})
            template = build_step(model, par, "train", int(cols["seq"][0]), "bf16", int(h["gpn"][0]))
            _TEMPLATES[code] = (template, make_plan(template))
        template, plan = _TEMPLATES[code]
        gemms: list = []
        t, flops, sh = _group_times(template, cols, h, cm, gemms)
        if gemms:
            pending.append((t, h["gpu_index"], gemms))
        groups.append((idx, template, plan, t, flops, sh, cols, h))
    _curve_fill(pending, cm, h_all["gpu_objs"])
    for idx, template, plan, t, flops, sh, cols, h in groups:
        L = sh.stage_layers.astype(float)
        m = (cols["global_batch"] // (cols["micro_batch"] * cols["dp"])).astype(float)
        for name, pol in compare.items():
            bound = _bind_engine(pol, template, sh, h, power) if hasattr(pol, "bind") else pol
            tlx = evaluate(plan, t, bound, layers=L, micro_batches=m, pp=cols["pp"].astype(float), vpp=1.0)
            extra[name][idx] = np.column_stack([tlx.exposed.sum(axis=0), tlx.step_time])
        pol = _bind_engine(policy, template, sh, h, power) if hasattr(policy, "bind") else policy
        tl = evaluate(plan, t, pol, layers=L, micro_batches=m, pp=cols["pp"].astype(float), vpp=1.0)
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
