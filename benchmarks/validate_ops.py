"""Held-out check of the op classes beyond GEMMs on the H200 (cost/opclass.py): memory-bound kinds,
attention forward / backward per backend (cudnn, flash2, efficient), decode attention, the batched
GEMMs of unfused attention (torch.bmm rows priced by the GEMM model, which was calibrated on other
shapes: every row is out of sample), and the kernel floor.

The fit uses the shipped ops files with the held-out rows left out (memory-bound: every row of width
5120, the CUDA-graph memory_graph rows of opclass.MEMORY_GRAPH_HELD_OUT_TOKENS tokens, and the norm_width rows of
opclass.is_held_out_norm_width (widths 5120, 6144, 12288 and 16k tokens); attention: every third shape by a fixed
hash, opclass.is_held_out_attention (decode rows, CUDA-graph ones too, alike), for the backends
measured widely enough; a backend with fewer rows is checked leave-one-out, each row against a fit
without it; unfused attention: the same rule, its eager backward rows under opclass.UNFUSED_BWD_MIN_SCORES score
elements (host-bound) in neither fit nor check, printed as a reference; FP8 GEMMs: the fp8_mm shapes
gemmclass.is_held_out_fp8 picks by a hash; the FP8 cast: every third fp8_cast row, fp8cast.held_out_every_third,
and every third fp8_cast_parts size, fp8cast.is_held_out_parts_size);
this script prices the held-out rows and prints median / p90 |error| per class against the target (median <= 5%,
p90 <= 10%). Nothing here is fitted to a step time.

Usage: python benchmarks/validate_ops.py [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TARGET_MEDIAN, TARGET_P90 = 5.0, 10.0
# What the rows show about a class that still misses the target (printed under its FAIL line; the status of the model,
# not an excuse for it): the mechanism seen in the measured rows and what was tried.
NOT_YET_MODELLED = {
    "bmm qk at attention shapes by the GEMM model": "the big-GEMM curve prices these batched GEMMs slow on average, "
                                                    "most at 512-1024 tokens (kernels of a few us); from 4096 tokens "
                                                    "it is close; no bmm class is built on these rows yet",
    "bmm pv at attention shapes by the GEMM model": "as for qk: no bmm class is built on these rows yet",
    "attention cudnn bwd": "rows of <= 1024 tokens take 115-170 us whatever their size (cudnn 1 x 8 heads x 512: "
                           "125 us, 4 x 16 x 512: 151 us): a floor of the eager backward, not FLOPs; a max(floor, "
                           "linear) form fitted on the training split reached p90 18-19%",
    "attention cudnn fwd": "few blocks run longer than their FLOPs say (1 x 8 heads x 4096: -22%, 1 x 16 x 2048: "
                           "-16%); flash2's makespan feature passes these rows (d64 1.2 / 4.4%, d128 3.8 / 6.6%) but "
                           "worsened the whole-layer check, where SDPA runs cudnn: not adopted (opclass.py)",
    "gemm grouped wgrad": "rows are differences of two timings (forward + wgrad - forward), and one shape timed twice "
                          "differs by up to 16% where the routing cannot matter (mixtral-8x7b ep8 gate_up, one "
                          "group: 3396 us random, 3955 us balanced); the direct _grouped_mm rows (grouped_wgrad) show "
                          "a tile time concave in the rows reduced: at 64 rows an expert they run above the a + b x "
                          "rows line (2048 x 768, 64 experts: priced -16%), at 512 below it (+8 to +15%); joining "
                          "them to the fit gave 5.1 / 11.0% on the moe_grad held-out rows, 6.3 / 9.0% on their own "
                          "held-out 12; fitted on them alone the class priced all 72 moe_grad wgrads at 5.2 / 14.0%, "
                          "bias -4.7% (the wgrad inside autograd's backward runs longer than the lone _grouped_mm of "
                          "its shape): not adopted",
    "fp8 cast": "priced as its kernels (cost/fp8cast.py; the parts pass on their held-out size), the unfused "
                "composite's divide-by-the-scale the one term fitted on its rows (0.8 ps an element); the held-out "
                "rows it misses run slower than the same element counts elsewhere (512 x 8192: 51.3 us against "
                "43.7-48.3 us for 1024 x 4096 in the ops-fp8 run and 37.9 us for the parts at 512 x 8192; "
                "8192 x 3584: 226.9 us against 208.5 us for the 16384 x 1792 fit row); in the ops-fp8 rows the same "
                "shape timed again differs by up to 21% (4096 x 8192: 226.7-289.6 us), and some shapes run slower "
                "than the composite in both runs (16384 x 5120: -17.9% there, -8.3% held out here; 8192 x 14336: "
                "-12.7%) for a reason not profiled",
    "memory rmsnorm (CUDA-graph rows)": "1536 tokens sit on the L2 edge (x 4096: -11%, x 8192: +12%) and 16384 x 8192 "
                                        "runs 2.7 TB/s, priced -8%: the one re-read edge of forwards and backwards is "
                                        "still rising at 8192; the fit's own rows show the same strain (width 2048: "
                                        "-12% at 4k tokens, +12% at 32k)",
    "memory residual_add": "the rows step from L2 to HBM speed between 25 and 50 MB (1024 x 4096: 6.8 TB/s, "
                           "1024 x 8192: 4.1 TB/s); priced with the fitted L2 edge of the memory_graph rows",
    "memory layernorm (CUDA-graph rows)": "1536 tokens sit on the L2 edge (x 4096: -14%, x 8192: +10%); 16384 x 8192 "
                                          "-7%",
    "bmm by the GEMM model": "the torch.bmm rows are MoE-like shapes (K 1024-4096, N 1536-14336), none at unfused "
                             "attention's (K = head_dim, or N = head_dim): the curve prices M <= 64 slow (bias +4.6%) and "
                             "M >= 1024 fast (bias -10.0%: 610-710 TFLOP/s measured); the small-M class over groups x N "
                             "columns (one launch streaming every group's weights) gave 8.4 / 15.6%, bias -8.4%; the small-M "
                             "class's form fitted on the bmm rows themselves (gemmclass.fit_streaming, fit split by "
                             "is_held_out_grouped: 49 rows; math at 660 TFLOP/s over M padded to a 15-row tile, "
                             "operands streamed at 4.29 TB/s) gave 2.9 / 6.1% on the other 23: not adopted, as no "
                             "workload op runs a bmm in their range (unfused attention's have K or N = head_dim, "
                             "outside it); rows at attention's own shapes (bmm_attn, call 38) are checked on the lines below",
    "[unfused": "the timed code runs 7 kernels (matmul, scale, mask, triu, masked_fill, softmax, matmul) where Megatron's "
                "path, which the kernel sum prices, runs 3-4 (matmul, fused scale-mask-softmax, dropout, matmul): not a "
                "check of the sum. The rows past the L2 run 7.8-11.0 ps a score element forward, 9.5-11.4 backward (d64 "
                "and d128 within 0-4%: streaming-bound). Priced kernel by kernel as the timed code runs them (its 2 or 4 bmm by the GEMM "
                "model, the scale and masked_fill passes as measured copies, softmax as RMSNorm), the 4 x 16-head rows "
                "come to 0.49-0.63 of the measured forward and 0.60-0.75 of the backward (4096 tokens, d64 forward: "
                "5.26 of 10.68 ms): which kernels run slower than their prices is not yet profiled",
    "memory rmsnorm_eager": "64-token rows are eager host floors, not monotone in width (64 x 2048: 17.6 us, "
                            "64 x 5120: 24.2 us, 64 x 8192: 17.8 us)",
}


def _doc(directory: Path | None, fam: str, missing_ok: bool = False) -> dict | None:
    if directory is None:
        from c3kit.cost.opclass import ops_file

        path = ops_file("H200-SXM", fam)
        if missing_ok and not path.is_file():
            return None
    else:
        path = next(directory.glob(f"*-ops-{fam}.json"), None)
        if path is None and missing_ok:
            return None
    return json.loads(Path(path).read_text())


def _check_doc(directory: Path | None, fam: str) -> dict | None:
    """An ops file that no fit reads (a check only): from --dir, else from benchmarks/ops_h200; None if absent."""
    path = next((directory or ROOT / "benchmarks" / "ops_h200").glob(f"*-ops-{fam}.json"), None)
    return json.loads(path.read_text()) if path is not None else None


def _family_rows(directory: Path | None, *fams: str) -> list[dict]:
    """The rows of every named family found (as the calibration reads them: memory + eager_ops, attention +
    decode_attention)."""
    from c3kit.cost import opclass as oc

    docs = ((fam, _doc(directory, fam, missing_ok=True)) for fam in fams)
    return [r for fam, doc in docs if doc for r in oc.family_rows(fam, doc)]


def held_out_errors(directory: Path | None = None) -> dict[str, np.ndarray]:
    """class -> relative errors (predicted / measured - 1) on the rows the fit did not see."""
    from c3kit.cost import opclass as oc

    out: dict[str, list] = {}
    mem_rows = _family_rows(directory, "memory", "eager_ops", "memory_graph")
    from c3kit.hw.catalog import get_gpu

    gpu = get_gpu("H200-SXM")
    sms = gpu.sms
    l2 = gpu.l2_bytes
    mem_rows += oc.norm_width_rows(_family_rows(directory, "norm_width"))
    edge = oc.fit_l2_edge(mem_rows, l2_bytes=l2, sms=sms)
    row_edge = oc.fit_row_edge(mem_rows, l2_bytes=l2, sms=sms, edge=edge)
    fit = oc.fit_memory(mem_rows, l2_bytes=l2, sms=sms, edge=edge, row_edge=row_edge)
    for r in oc.gpu_time_memory_rows(mem_rows):  # eager rows of width 5120, CUDA-graph rows of the held-out tokens
        kind = oc._memory_kind(r)
        widths = oc.is_held_out_norm_width(r)
        graph = oc.is_held_out_memory_graph(r) and not widths
        if kind not in fit or not (widths or graph or r.get("mode") != "graph" and int(r["width"]) == oc.HELD_OUT_WIDTH):
            continue
        elements = float(r["tokens"]) * float(r["width"])
        p = fit[kind](oc.memory_features(kind, elements, r["width"], l2, sms=sms, edge=edge, row_edge=row_edge))
        label = " (norm_width CUDA-graph rows)" if widths else " (CUDA-graph rows)" if graph else ""
        out.setdefault("memory " + kind + label, []).append(p / r["time_s"] - 1)
    norm = _check_doc(directory, "norm_bwd")
    for r in oc._rows(norm) if norm else []:  # CUDA-graph norm backwards: no fit reads them (out of sample)
        kind = r["norm"] + ".bwd"
        if r["part"] == "bwd" and r["mode"] == "graph" and kind in fit:
            el = float(r["rows"]) * float(r["hidden"])
            p = fit[kind](oc.memory_features(kind, el, r["hidden"], l2, sms=sms, edge=edge, row_edge=row_edge))
            out.setdefault(f"memory {kind} (norm_bwd CUDA-graph rows, out of sample)", []).append(p / r["time_s"] - 1)
    dec_rows = oc.decode_kernel_rows(_family_rows(directory, "decode_kernels"))
    for r in dec_rows:  # the decode kernels: each row against a fit of its kind without it (leave-one-out)
        kind = r["op"]
        fit = oc.fit_memory(mem_rows + [q for q in dec_rows if q is not r], l2_bytes=l2, sms=sms, held_out_width=None,
                            edge=edge, row_edge=row_edge)
        m = fit.get(kind)
        if m is not None:
            elements = float(r["tokens"]) * float(r["width"])
            f = oc.memory_features(kind, elements, r["width"], l2, sms=sms, cache_bytes=r.get("cache_bytes"), edge=edge,
                                   row_edge=row_edge)
            out.setdefault(f"memory {kind} (decode kernels, leave-one-out)", []).append(m(f) / r["time_s"] - 1)
    # kernels right after a weight stream: each row's cold time against its own warm time plus the extra fitted
    # without it (leave-one-out), over the rows the extra is priced for (up to AFTER_STREAM_MAX_ROWS rows)
    cold = oc.decode_cold_rows(_family_rows(directory, "decode_cold"), _family_rows(directory, "decode_fresh"),
                               _family_rows(directory, "after_stream_large"))
    cold = [r for r in cold if r["rows"] <= oc.AFTER_STREAM_MAX_ROWS]
    for r in cold:
        m = oc.fit_after_stream([q for q in cold if q is not r]).get(r["op"])
        if m is not None:
            warm = r["time_s"] - r["extra_s"]
            out.setdefault(f"memory {r['op']} (after a weight stream, leave-one-out)", []).append(
                (warm + float(m(r["rows"], r["width"]))) / r["time_s"] - 1)
    att_rows = oc.gpu_time_rows(_family_rows(directory, *oc.ATTENTION_FAMILIES))
    att, dec = oc.fit_attention(att_rows, sms=sms)
    shape = oc.fit_decode_shape(att_rows, l2_bytes=l2, sms=sms)
    dec_hd = oc.fit_decode_by_head_dim(att_rows, shape=shape, l2_bytes=l2, sms=sms)
    hashed = oc.hash_held_out_backends(att_rows)
    for r in att_rows:
        backend = oc.attention_row_backend(r)
        if backend is None or r["time_s"] is None:
            continue
        f = None  # the row's features (decode rows: with the fitted decode shape)
        if r["pass"] == "decode":
            if backend != "cudnn" or not oc.is_held_out_attention(r):
                continue
            name, m = "attention decode", dec_hd[oc.nearest(dec_hd, r["head_dim"])] if dec_hd else dec
            f = oc._row_features(r, sms, shape, l2) if dec_hd else oc._row_features(r, sms)
        elif backend in hashed:
            if not oc.is_held_out_attention(r):
                continue
            name, m = f"attention {backend} {r['pass']} d{r['head_dim']}", att.get((backend, r["pass"],
                                                                                   int(r["head_dim"])))
        else:  # too few rows to hold a third out: each row predicted by a fit without it (leave-one-out)
            loo, _ = oc.fit_attention(att_rows, leave_out=r, sms=sms)
            name = f"attention {backend} {r['pass']} d{r['head_dim']} (leave-one-out)"
            m = loo.get((backend, r["pass"], int(r["head_dim"])))
        if m is not None:
            f = f if f is not None else oc._row_features(r, sms)
            out.setdefault(name, []).append(m(f) / r["time_s"] - 1)
            if r.get("mode") == "graph":  # the same class on its held-out CUDA-graph rows alone (attn_graph)
                out.setdefault(name + " (CUDA graph rows)", []).append(out[name][-1])
    from c3kit.cost import time as op_time
    from c3kit.cost.model import as_model
    from c3kit.workload.attention import UNFUSED_GEMM
    from c3kit.workload.ops import Gemm

    from c3kit.cost.attention import unfused_breakdown

    unf = oc.fit_unfused(att_rows, l2_bytes=l2, edge=edge)
    h200 = get_gpu("H200-SXM")
    timed_kernels = {id(r) for r in oc.gpu_time_unfused_rows(att_rows)}
    for r in att_rows:  # unfused attention: its class on held-out rows that time kernels; the kernel sum on all
        if r.get("backend") == "unfused" and r["time_s"]:
            bwd = r["pass"] == "bwd"
            if oc.is_held_out_attention(r) and r["pass"] in unf and id(r) in timed_kernels:
                f = oc.unfused_features(r["batch"], r["heads"], r["q_len"], r["kv_len"], r["head_dim"], bwd, l2, edge)
                out.setdefault(f"attention unfused {r['pass']}", []).append(unf[r["pass"]](f) / r["time_s"] - 1)
            parts = unfused_breakdown(r["batch"], r["heads"], r["q_len"], r["kv_len"], r["head_dim"], bwd, False, h200,
                                      as_model("efficiency"), price=op_time)
            out.setdefault(f"[unfused {r['pass']} as Megatron's kernels (no class): not the code timed]", []).append(
                sum(t for _, t in parts) / r["time_s"] - 1)

    h200, burst = get_gpu("H200-SXM"), as_model("efficiency")  # as timed: a short window, burst clocks
    for r in oc._rows(_doc(directory, "gemm")):
        if oc.is_bmm_row(r):  # none of these rows is in the GEMM calibration: all are out of sample
            t = op_time(Gemm(UNFUSED_GEMM, int(r["m"]), int(r["n"]), int(r["k"]), "bf16", int(r["groups"])), h200, burst)
            out.setdefault("bmm by the GEMM model (unfused attention)", []).append(t / r["time_s"] - 1)
    bmm_attn = _check_doc(directory, "bmm_attn")  # call 38: torch.bmm at attention's own shapes; no fit reads them
    for r in oc._rows(bmm_attn) if bmm_attn else ():
        t = op_time(Gemm(UNFUSED_GEMM, int(r["m"]), int(r["n"]), int(r["k"]), "bf16", int(r["groups"])), h200, burst)
        out.setdefault(f"bmm {r['kind']} at attention shapes by the GEMM model (bmm_attn rows)", []).append(
            t / r["time_s"] - 1)
    for name, e in steady_attention_errors(directory).items():
        out[name] = e
    for name, e in cp_chunk_errors(directory).items():
        out[name] = e
    return {k: np.array(v) for k, v in out.items()}


STEADY_BACKENDS = {"flash": "flash2", "cudnn": "cudnn"}  # steady_ops' SDPA backend -> c3kit's attention class


def steady_attention_errors(directory: Path | None = None) -> dict[str, list]:
    """Attention timed in steady state (steady_ops rows: after 0.6 s back to back, at the power-capped clock; no fit
    reads them) against the shipped attention classes, which were fitted on rows timed in short windows."""
    from c3kit.cost.opclass import _rows, calibration_for
    from c3kit.hw.catalog import get_gpu

    doc = _check_doc(directory, "steady_ops")
    if doc is None:
        return {}
    cal = calibration_for(get_gpu("H200-SXM"), "attention")
    out: dict[str, list] = {}
    for r in _rows(doc):
        if r["op"] != "attention" or r["mode"] != "steady" or r["backend"] not in STEADY_BACKENDS:
            continue
        b = max(1, int(r["tokens"]) // int(r["seq"]))
        p = cal.attention_time(b, r["heads"], r["kv_heads"], r["seq"], r["seq"], r["head_dim"], True,
                               r["pass"] == "bwd", backend=STEADY_BACKENDS[r["backend"]])
        out.setdefault("attention at steady state (steady_ops rows, out of sample)", []).append(float(p) / r["time_s"] - 1)
    return out


def cp_chunk_errors(directory: Path | None = None) -> dict[str, list]:
    """The attention calls of torch's load-balanced ring attention (cp_attention rows: the causal diagonal, half-shard
    and whole-shard chunks of S = 64k-256k at cp 2-8; no fit reads them) against the shipped flash class."""
    from c3kit.cost.opclass import _rows, calibration_for
    from c3kit.hw.catalog import get_gpu

    doc = _check_doc(directory, "cp_attention")
    if doc is None:
        return {}
    cal = calibration_for(get_gpu("H200-SXM"), "attention")
    out: dict[str, list] = {}
    for r in _rows(doc):
        p = cal.attention_time(r["batch"], r["heads"], r["kv_heads"], r["q_len"], r["kv_len"], r["head_dim"],
                               bool(r["causal"]), r["pass"] == "bwd", backend="flash2")
        out.setdefault(f"attention flash2 {r['pass']} as context-parallel chunks (cp_attention rows, out of sample)",
                       []).append(float(p) / r["time_s"] - 1)
    return out


def gemm_held_out_errors(directory: Path | None = None) -> dict[str, np.ndarray]:
    """GEMM class -> relative errors on the ops-gemm rows its fit did not see (cost/gemmclass.py), and the
    same rows priced the way they were before the class existed ('... [before: ...]')."""
    from c3kit.cost import gemmclass as gc
    from c3kit.cost.default_curve import bf16_curve_for
    from c3kit.cost.opclass import _rows
    from c3kit.hw.catalog import get_gpu

    gpu = get_gpu("H200-SXM")
    rows = _rows(_doc(directory, "gemm"))
    cold = _doc(directory, "gemm_cold", missing_ok=True)
    rows += _rows(cold) if cold else []
    curve = bf16_curve_for(gpu)[0]
    out: dict[str, list] = {}
    small, kind = gc.fit_small_m(rows), gc.small_m_kind(rows)
    for r in rows:
        if r["kind"] == kind and gc.is_held_out_small_m(r):
            out.setdefault("gemm small-M", []).append(small(r["m"], r["n"], r["k"]) / r["time_s"] - 1)
            out.setdefault("gemm small-M [before: big-GEMM curve]", []).append(
                curve.gemm_time(r["m"], r["n"], r["k"], "bf16", gpu) / r["time_s"] - 1)
    moe = _doc(directory, "moe_train", missing_ok=True)
    pairs_moe = gc.moe_train_pairs(_rows(moe) if moe else [])
    rows += [f for f, _ in pairs_moe]  # the MoE layers' forwards join the grouped class's rows
    grouped = gc.fit_grouped(rows, sms=gpu.sms)
    mg = _doc(directory, "moe_grad", missing_ok=True)
    parts = gc.moe_grad_parts(_rows(mg) if mg else [])
    graph = gc.graph_wgrad_rows(parts)
    wrows = graph or gc.wgrad_rows(pairs_moe, grouped)
    wgrad = gc.fit_grouped_wgrad(wrows, sms=gpu.sms)
    for r in wrows:
        if wgrad is not None and gc.is_held_out_grouped(r):
            out.setdefault("gemm grouped wgrad (moe_grad, CUDA graph)" if graph else "gemm grouped wgrad (MoE training)",
                           []).append(wgrad(r["m"], r["n"], r["k"], r["groups"]) / r["time_s"] - 1)
    gw = _check_doc(directory, "grouped_wgrad")
    for r in _rows(gw) if gw and wgrad is not None else []:  # one _grouped_mm per wgrad in a CUDA graph: no fit reads it
        if r["impl"].startswith("grouped_mm") and r["mode"] == "graph":
            p = wgrad(r["hidden"], r["ffn"], r["tokens_per_expert"], r["experts"])
            out.setdefault("gemm grouped wgrad (grouped_wgrad rows, out of sample)", []).append(p / r["time_s"] - 1)
    for p in parts:  # no moe_grad row is in the grouped class's fit: every row is out of sample
        m, n, k, g, rt = p["m"], p["n"], p["k"], p["groups"], p["routed"]
        out.setdefault("moe_grad forward by the grouped class (out of sample)", []).append(
            grouped(m, n, k, g, routed=rt) / p["fwd"] - 1)
        out.setdefault("moe_grad dgrad by the grouped class (out of sample)", []).append(
            grouped(m, k, n, g, routed=rt) / p["dgrad"] - 1)
        if wgrad is not None:
            out.setdefault("moe_grad dgrad + wgrad vs both in one backward (composition)", []).append(
                (grouped(m, k, n, g, routed=rt) + wgrad(k, n, m, g)) / p["both"] - 1)
    for f, fb in pairs_moe:  # the expert GEMMs' forward + backward as the layer description prices them (all rows)
        g = fb["groups"]
        dg = grouped(f["m"], f["k"], f["n"], g, routed=True)
        fw = grouped(f["m"], f["n"], f["k"], g, routed=True)
        wg = wgrad(f["k"], f["n"], f["m"], g) if wgrad is not None else grouped(f["k"], f["n"], f["m"], g)
        out.setdefault("MoE expert fwd+bwd eager (moe_train) as fwd+dgrad+wgrad (in-sample)", []).append(
            (fw + dg + wg) / fb["time_s"] - 1)
        out.setdefault("MoE expert fwd+bwd [before: grouped class x3]", []).append(
            (fw + dg + grouped(f["k"], f["n"], f["m"], g)) / fb["time_s"] - 1)
    for r in rows:
        if r["kind"] == "grouped_mm" and gc.is_held_out_grouped(r):
            out.setdefault("gemm grouped (_grouped_mm)", []).append(
                grouped(r["m"], r["n"], r["k"], r["groups"], routed=r.get("routed", False)) / r["time_s"] - 1)
            out.setdefault("gemm grouped [before: curve, batched]", []).append(
                curve.gemm_time(r["m"], r["n"], r["k"], "bf16", gpu, r["groups"]) / r["time_s"] - 1)
    full_small = gc.fit_small_m(rows, hold_out=False)
    for r in rows:  # a composition: nothing is fitted to these rows
        if r["kind"] == "expert_loop":
            one = (full_small(r["m"], r["n"], r["k"]) if r["m"] <= gc.SMALL_M_MAX
                   else curve.gemm_time(r["m"], r["n"], r["k"], "bf16", gpu))
            out.setdefault("gemm expert loop (groups x one GEMM)", []).append(r["groups"] * one / r["time_s"] - 1)
    for r in _rows(gw) if gw else []:  # the same wgrads as one torch.mm per expert in a CUDA graph (a composition)
        if r["impl"] == "mm_loop" and r["mode"] == "graph":
            m, n, k = r["hidden"], r["ffn"], r["tokens_per_expert"]
            one = full_small(m, n, k) if m <= gc.SMALL_M_MAX else curve.gemm_time(m, n, k, "bf16", gpu)
            out.setdefault("gemm expert loop wgrad (grouped_wgrad mm_loop rows, out of sample)", []).append(
                r["experts"] * one / r["time_s"] - 1)
    for name, e in fp8_gemm_errors(directory, rows, curve, gpu).items():
        out[name] = e
    out.update(fp8_cast_errors(directory, rows, gpu))
    return {k: np.array(v, dtype=float) for k, v in out.items()}


def fp8_cast_errors(directory: Path | None, gemm_rows: list[dict], gpu) -> dict[str, list]:
    """The FP8 cast as the sum of its kernels (cost/fp8cast.py): each part at the fp8_cast_parts size held out, the
    unfused composite on the held-out fp8_cast rows and on the ops-fp8 file's cast_tensorwise rows (no fit reads
    them), and what priced the held-out fp8_cast rows before."""
    from c3kit.cost import fp8cast as fc
    from c3kit.cost import gemmclass as gc
    from c3kit.cost.opclass import _rows

    out: dict[str, list] = {}
    cr = gc.cast_rows(gemm_rows)
    pdoc = _doc(directory, "fp8_cast_parts", missing_ok=True)
    prow = fc.graph_part_rows(_rows(pdoc)) if pdoc else []
    parts = fc.fit_cast_parts(prow, cr) if prow else None
    line = gc.fit_cast(gemm_rows)
    for r, held in zip(cr, gc.held_out_every_third(cr)):
        if held:
            el = float(r["m"]) * float(r["n"])
            if parts is not None:
                out.setdefault("fp8 cast (amax+scale+cast)", []).append(float(parts.composite(el)) / r["time_s"] - 1)
            out.setdefault("fp8 cast [before: a line through the fp8_cast rows]", []).append(
                float(line([el])) / r["time_s"] - 1)
            out.setdefault("fp8 cast [before: 4 B/element at 0.85 HBM]", []).append(
                4.0 * el / (gpu.hbm_bw * 0.85) / r["time_s"] - 1)
    if parts is None:
        return out
    held = fc.is_held_out_parts_size([float(r["elements"]) for r in prow])
    price = {"amax": parts.amax, "scale": lambda el: parts.scale(), "cast": parts.cast}
    for r, h in zip(prow, held):
        if h and r["part"] in price:
            out.setdefault("fp8 cast parts (fp8_cast_parts: amax, scale, cast)", []).append(
                float(price[r["part"]](float(r["elements"]))) / r["time_s"] - 1)
    doc = _check_doc(directory, "fp8")
    same: dict = {}
    for r in _rows(doc) if doc else []:
        if r["kind"] == "cast_tensorwise" and r["time_s"]:
            out.setdefault("fp8 cast (ops-fp8 cast_tensorwise rows, out of sample)", []).append(
                float(parts.composite(float(r["m"]) * float(r["n"]))) / r["time_s"] - 1)
            same.setdefault((r["m"], r["n"]), []).append(float(r["time_s"]))
    for ts in same.values():  # the rows' own repeatability: each timing of a repeated shape against the shape's median
        if len(ts) > 1:
            out.setdefault("fp8 cast [reference: ops-fp8 repeated shapes vs their median]", []).extend(
                t / float(np.median(ts)) - 1 for t in ts)
    return out


def fp8_gemm_errors(directory: Path | None, gemm_rows: list[dict], curve, gpu) -> dict[str, list]:
    """The FP8 GEMM classes (gemmclass.Fp8Gemm, fitted on the fp8_mm rows) on their held-out shapes, against the
    normalised targets the class is fitted to (FP8 time x the BF16 curve / the measured BF16 time), and on the ops-gemm
    file's per-tensor _scaled_mm rows of an earlier run (no fit reads them): its 4 shapes held out before and all 12."""
    from c3kit.cost import gemmclass as gc
    from c3kit.cost.opclass import _rows

    doc = _doc(directory, "fp8_mm", missing_ok=True)
    if doc is None:
        return {}
    rows = _rows(doc)
    out: dict[str, list] = {}

    def add(name, cls, f, b):
        pred = cls(f["m"], f["n"], curve.gemm_time(f["m"], f["n"], f["k"], "bf16", gpu))
        out.setdefault(name, []).append(pred / gc.fp8_target(f, b, curve, gpu) - 1)

    for kind in gc.FP8_KINDS:
        cls = gc.fit_fp8_gemm(rows, curve, gpu, kind)
        if cls is None:
            continue
        label = kind.removeprefix("fp8_")
        for f, b in gc.fp8_pairs(rows, kind):
            if gc.is_held_out_fp8(f):
                add(f"gemm fp8 {label} (_scaled_mm)", cls, f, b)
                if kind in gc.ROWWISE_TILE_KINDS:
                    add(f"gemm fp8 {label} [before: no rowwise tile rule]",
                        gc.fit_fp8_gemm(rows, curve, gpu, kind, rowwise_tiles=False), f, b)
                if kind == "fp8_tensorwise":  # the measured time itself: the BF16 curve's own error included
                    p = cls(f["m"], f["n"], curve.gemm_time(f["m"], f["n"], f["k"], "bf16", gpu))
                    out.setdefault("gemm fp8 tensorwise vs measured time [BF16 curve error included]", []).append(
                        p / f["time_s"] - 1)
        if kind == "fp8_tensorwise":
            old = gc.fp8_pairs(gemm_rows, "fp8_scaled_mm")  # per-tensor scales, timed in an earlier run
            before = gc.fit_fp8_frac(gemm_rows, curve, gpu, hold_out=False, kind="fp8_scaled_mm")
            frac = curve.with_(peak_frac={**dict(curve.peak_frac), "fp8": before})
            for i, (f, b) in enumerate(old):
                add("gemm fp8 tensorwise on the ops-gemm rows (out of sample)", cls, f, b)
                if i % 3 == 2:  # the rows the previous class held out
                    add("gemm fp8 tensorwise on the ops-gemm rows held out before (out of sample)", cls, f, b)
            for f, b in gc.fp8_pairs(rows, kind):
                if gc.is_held_out_fp8(f):
                    out.setdefault("gemm fp8 [before: curve fp8 fraction on the ops-gemm rows]", []).append(
                        frac.gemm_time(f["m"], f["n"], f["k"], "fp8", gpu) / gc.fp8_target(f, b, curve, gpu) - 1)
    bf = [b for _, b in gc.fp8_pairs(rows, "fp8_tensorwise")]
    for b in bf:  # no BF16 curve fit reads the fp8_mm rows
        out.setdefault("gemm bf16 curve on the fp8_mm BF16 rows [reference: not an FP8 class]", []).append(
            curve.gemm_time(b["m"], b["n"], b["k"], "bf16", gpu) / b["time_s"] - 1)
    return out


def moe_out_of_sample_errors(directory: Path | None = None) -> dict[str, np.ndarray]:
    """The MoE op rows of the ops-moe file (none used by any fit) priced as the layer description prices them:
    balanced grouped GEMMs by the grouped class; router softmax / top-k, permute and unpermute by their
    memory-class stand-ins (workload/layer.py moe_router, moe_permute)."""
    from c3kit.cost import gemmclass as gc
    from c3kit.cost.opclass import _rows, calibration_for
    from c3kit.hw.catalog import get_gpu

    try:
        rows = _rows(_doc(directory, "moe"))
    except (StopIteration, FileNotFoundError):
        return {}
    gpu = get_gpu("H200-SXM")
    grouped = gc.fit_grouped(_rows(_doc(directory, "gemm")), hold_out=False, sms=gpu.sms)
    mem = calibration_for(gpu, "memory")
    out: dict[str, list] = {}
    for r in rows:
        T, H, E, k, t = r["tokens"], r["hidden"], r["experts"], r["top_k"], r["time_s"]
        if r["kind"] in ("grouped_mm_balanced", "grouped_mm_routed"):
            p = grouped(T * k // E, r["n"], H, E, routed=r["kind"] == "grouped_mm_routed")
        elif r["kind"] == "router_topk":
            p = mem.parts_time((("cross_entropy", T * E, E),))
        elif r["kind"] in ("permute", "unpermute"):
            p = mem.parts_time((("embedding", T * k * H, H),))
        else:
            continue
        if p is not None and t:
            out.setdefault(f"moe {r['kind']}", []).append(float(p) / t - 1)
    bal = {(r["tokens"], r["hidden"], r["experts"], r["top_k"], r["n"]): r["time_s"] for r in rows
           if r["kind"] == "grouped_mm_balanced"}
    for r in rows:  # routed (random logits) over balanced: the measured cost of imbalance at op level
        key = (r["tokens"], r["hidden"], r["experts"], r["top_k"], r["n"])
        if r["kind"] == "grouped_mm_routed" and key in bal:
            out.setdefault("moe grouped routed / balanced - 1 (measured)", []).append(r["time_s"] / bal[key] - 1)
    return {k: np.array(v, dtype=float) for k, v in out.items()}


def unfused_host_bound_errors(directory: Path | None = None) -> np.ndarray:
    """Relative errors of the unfused class on the eager backward rows it leaves out as host-bound
    (opclass.UNFUSED_BWD_MIN_SCORES): what a step that waits on its host would see; a reference, not a check."""
    from c3kit.cost import opclass as oc
    from c3kit.hw.catalog import get_gpu

    gpu = get_gpu("H200-SXM")
    edge = oc.fit_l2_edge(_family_rows(directory, "memory", "eager_ops", "memory_graph")
                          + oc.norm_width_rows(_family_rows(directory, "norm_width")), l2_bytes=gpu.l2_bytes, sms=gpu.sms)
    rows = _family_rows(directory, "attn_backends")
    m = oc.fit_unfused(rows, l2_bytes=gpu.l2_bytes, edge=edge).get("bwd")
    kept = {id(r) for r in oc.gpu_time_unfused_rows(rows)}
    return np.array([m(oc.unfused_features(r["batch"], r["heads"], r["q_len"], r["kv_len"], r["head_dim"], True,
                                           gpu.l2_bytes, edge)) / r["time_s"] - 1
                     for r in rows if m is not None and r.get("backend") == "unfused" and r["pass"] == "bwd"
                     and r["time_s"] and id(r) not in kept])


def _note(name: str, good: bool) -> None:
    """Print what the rows show about a failing class that is not modelled yet (NOT_YET_MODELLED)."""
    if good:
        return
    hit = next((v for k, v in NOT_YET_MODELLED.items() if name == k or name.startswith(k + " ")
                or k.startswith("[") and name.startswith(k)), None)
    if hit:
        print(f"    not yet modelled: {hit}")


def main(argv: list[str] | None = None) -> int:
    """Print the held-out error per op class and the verdict."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=None, help="folder of *-ops-*.json (default: the shipped H200 files)")
    a = ap.parse_args(argv)
    from c3kit.cost import opclass as oc

    floor = oc.fit_floor(oc._rows(_doc(a.dir, "floor")))
    print(f"kernel floor: {floor[0] * 1e6:.2f} us per kernel in a CUDA graph, {floor[1] * 1e6:.2f} us eager")
    print("memory kinds: launch shapes by PyTorch's kernel configuration for index_copy, embedding, argmax, and the "
          "norm backward's weight-gradient waves; the norms' rows and second-pass re-read past L1 (fitted edge)")
    ok = True
    for name, e in sorted(held_out_errors(a.dir).items()):
        e = np.abs(e) * 100
        med, p90 = float(np.median(e)), float(np.percentile(e, 90))
        good = med <= TARGET_MEDIAN and p90 <= TARGET_P90
        check = not name.startswith("[")  # '[...]': a reference, not a check of a class
        ok &= good or not check
        verdict = ("PASS" if good else "FAIL") if check else "(reference)"
        print(f"{name:28s} n={len(e):3d}  median {med:5.1f}%  p90 {p90:5.1f}%  -> {verdict}")
        _note(name, good)
    e = np.abs(unfused_host_bound_errors(a.dir)) * 100
    if len(e):
        print(f"{'[attention unfused bwd, eager rows under 2^26 scores: host-bound, in no fit or check]':28s} "
              f"n={len(e):3d}  median {float(np.median(e)):5.1f}%  p90 {float(np.percentile(e, 90)):5.1f}%  -> (reference)")
    print("GEMM classes (cost/gemmclass.py; '[before: ...]' rows: the same held-out rows as priced before them; "
          "other '[...]' rows: references, not checks of a class):")
    for name, e in gemm_held_out_errors(a.dir).items():
        bias = float(np.mean(e)) * 100
        e = np.abs(e) * 100
        med, p90 = float(np.median(e)), float(np.percentile(e, 90))
        good = med <= TARGET_MEDIAN and p90 <= TARGET_P90
        check = "[" not in name and "(in-sample)" not in name
        if check:
            ok &= good
        verdict = ("PASS" if good else "FAIL") if "[" not in name else "(reference)"
        if "(in-sample)" in name:
            verdict = "(composition of fitted classes, not a held-out check)"
        print(f"{name:44s} n={len(e):3d}  median {med:5.1f}%  p90 {p90:5.1f}%  bias {bias:+5.1f}%  -> {verdict}")
        if check:
            _note(name, good)
    print("MoE ops of the ops-moe file, none used by a fit, priced as the layer description prices them:")
    for name, e in moe_out_of_sample_errors(a.dir).items():
        bias = float(np.mean(e)) * 100
        e = np.abs(e) * 100
        print(f"{name:44s} n={len(e):3d}  median {float(np.median(e)):5.1f}%  p90 {float(np.percentile(e, 90)):5.1f}%"
              f"  bias {bias:+6.1f}%")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
