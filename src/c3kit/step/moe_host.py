"""The host side of an expert-parallel rank's MoE layer in training, from the H200 measurement of device call 29
(family moe_host, runtime/bench/ops_moe.py; docs/measurements.md "Call 29").

Megatron-Core's alltoall token dispatcher waits on the host for the token counts once per MoE layer forward, so
the GPU's queue is empty after every wait and the host's time to issue the work up to the next wait is on the
critical path wherever it exceeds the GPU's time for that work. The backward has no wait, but the next micro-batch's
forward drains the queue again, so per pass the same holds. Three figures are reduced from the measured rows of
one whole MoE Transformer layer (attention block + MoE block in Megatron-Core's op order, plain PyTorch):

- sync_s: the median host wait for the token counts (.tolist() of the counts) over every case;
- base_s[pass]: the median host issue time of a layer pass ("fwd", "bwd") with the local experts issued as one
  call (torch._grouped_mm; Megatron-Core GroupedMLP, Transformer Engine GroupedLinear from Python);
- per_expert_s[pass]: the median over cases of (sequential - grouped host issue time) / local experts, the host
  cost of each local expert issued from a Python loop (Megatron-Core SequentialMLP).

Medians, because two sequential backward rows with 128 local experts took 0.53-0.57 s of host time (autograd over
a 128-way split), far off the others. Plain PyTorch issues fewer Python calls than Transformer Engine's modules, so
these host times are lower bounds for code built on them. Nothing here is taken from end-to-end step times.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

from c3kit.errors import C3kitError

FAMILY = "moe_host"
PASSES = ("fwd", "bwd")
# how a rank issues its local experts from the host: one call (grouped kernel, or TE GroupedLinear's per-expert
# cuBLAS loop in C++) or a Python loop with one GEMM per expert (Megatron-Core SequentialMLP)
HOST_IMPLS = ("grouped", "sequential")
# the host of GPUs without a measurement of their own: the host is a CPU, its launch costs transfer as measured
FALLBACK_GPU = "H200-SXM"


@dataclass(frozen=True)
class MoEHostCalibration:
    """Measured host figures of a MoE layer (seconds): the count wait, and issue time per pass and per expert."""

    sync_s: float
    base_s: dict
    per_expert_s: dict
    origin: str


def reduce_rows(rows: list[dict], origin: str = "") -> MoEHostCalibration:
    """The calibration from moe_host rows (dicts with experts_impl, model, tokens, local_experts, ep, pass, wall_s,
    host_s); C3kitError when a figure has no row."""
    syncs = [float(r["wall_s"]) for r in rows if r["pass"] == "sync"]
    if not syncs:
        raise C3kitError(f"{origin or 'moe_host'}: no token-count wait (sync) rows")
    base, per = {}, {}
    for ps in PASSES:
        layer = [r for r in rows if r["pass"] == "layer_" + ps and r["host_s"] is not None]
        grouped = {(r["model"], r["tokens"], r["ep"]): r for r in layer if r["experts_impl"] == "grouped"}
        if not grouped:
            raise C3kitError(f"{origin or 'moe_host'}: no grouped layer_{ps} rows")
        base[ps] = statistics.median(float(r["host_s"]) for r in grouped.values())
        slopes = [(float(r["host_s"]) - float(grouped[key]["host_s"])) / int(r["local_experts"]) for r in layer
                  if r["experts_impl"] == "sequential" and (key := (r["model"], r["tokens"], r["ep"])) in grouped]
        if not slopes:
            raise C3kitError(f"{origin or 'moe_host'}: no sequential layer_{ps} rows beside grouped ones")
        per[ps] = statistics.median(slopes)
    return MoEHostCalibration(statistics.median(syncs), base, per, origin)


@lru_cache(maxsize=8)
def moe_host_calibration(gpu_name: str) -> MoEHostCalibration:
    """The shipped moe_host calibration of a GPU's host, else the H200 host's; C3kitError when none is shipped."""
    from c3kit.cost.calib_store import op_calibration_path, op_rows

    for name in dict.fromkeys((gpu_name, FALLBACK_GPU)):
        p = op_calibration_path(name, FAMILY)
        if p.is_file():
            return reduce_rows(op_rows(p), p.name)
    raise C3kitError(f"no measured MoE host calibration (ops-{FAMILY}) is shipped")


def host_issue_s(cal: MoEHostCalibration, pass_: str, local_experts: int, impl: str = "grouped") -> float:
    """Seconds the host takes to issue one MoE layer pass ("fwd" or "bwd") with `local_experts` experts issued
    as one call ("grouped") or from a Python loop ("sequential")."""
    if pass_ not in PASSES:
        raise C3kitError(f"moe host: pass {pass_!r}: use one of {', '.join(PASSES)}")
    if impl not in HOST_IMPLS:
        raise C3kitError(f"moe host: experts {impl!r}: use one of {', '.join(HOST_IMPLS)}")
    if not (isinstance(local_experts, int) and local_experts >= 1):
        raise C3kitError(f"moe host: local experts must be a positive integer, got {local_experts!r}")
    extra = cal.per_expert_s[pass_] * local_experts if impl == "sequential" else 0.0
    return cal.base_s[pass_] + max(extra, 0.0)


def exposed_host_s(host_s: float, gpu_s: float) -> float:
    """Host time on the critical path of one pass: the part of host_s beyond the GPU time it overlaps with."""
    if not (math.isfinite(host_s) and math.isfinite(gpu_s)) or host_s < 0 or gpu_s < 0:
        raise C3kitError(f"moe host: times must be finite and >= 0, got host {host_s!r}, gpu {gpu_s!r}")
    return max(host_s - gpu_s, 0.0)


def is_router_forward(nd) -> bool:
    """A MoE layer's forward (or recomputed forward) top-k: where the dispatcher's host wait follows."""
    return nd.stream == "compute" and nd.name.removeprefix("re.") == "router_topk"


def moe_pass_gpu(graph, op_t, runs, gap_s: float) -> dict:
    """{pass: (GPU seconds of one MoE layer pass, passes per step)} for "fwd", "re" (a recomputed forward, which
    waits for the counts again) and "bwd": the pass's compute-stream layer ops plus one launch gap each ({} when
    the graph has no MoE router)."""
    nodes = graph.nodes
    tops = [i for i, nd in enumerate(nodes) if nd.scope == "layer" and is_router_forward(nd)]
    first = next((i for i in tops if not nodes[i].name.startswith("re.")), None)
    again = next((i for i in tops if nodes[i].name.startswith("re.")), None)
    if first is None:
        return {}
    ops = [(i, nd) for i, nd in enumerate(nodes) if nd.scope == "layer" and nd.stream == "compute"]
    fwd = sum(float(op_t[i]) + gap_s for i, nd in ops if nd.phase == "fwd")
    # a recomputed router waits again, splitting the recomputed forward off the backward's window
    bwd = sum(float(op_t[i]) + gap_s for i, nd in ops
              if nd.phase == "bwd" and not (again is not None and nd.name.startswith("re.")))
    out = {"fwd": (fwd, float(runs[first])), "bwd": (bwd, float(runs[first]))}
    if again is not None:
        out["re"] = (fwd, float(runs[again]))
    return out


def per_expert_gemms(graph, hw, timer, runs, op_t, gap_s: float) -> tuple[float, float, dict]:
    """(seconds per step, GEMM kernels per step, {pass: seconds per pass run}) the local experts' GEMMs add when
    each expert's GEMM runs alone at its own rows (batch one, on the GEMM curve, one launch gap per extra kernel)
    instead of one grouped GEMM; negative where the grouped price is higher. One critical path (no pipeline factor);
    passes as in moe_pass_gpu."""
    from dataclasses import replace

    from c3kit.step.placement import placed
    from c3kit.workload.ops import Gemm

    extra = kernels = 0.0
    per_pass = {"fwd": 0.0, "re": 0.0, "bwd": 0.0}
    cache: dict = {}
    for i, nd in enumerate(graph.nodes):
        op = nd.op
        if nd.stream != "compute" or nd.role.removeprefix("re_") != "experts" or not isinstance(op, Gemm):
            continue
        one = replace(placed(nd, graph), batch=1)
        t1 = cache.get(one)
        if t1 is None:
            t1 = cache[one] = float(timer(one, hw))
        d = op.batch * t1 + (op.batch - 1) * gap_s - float(op_t[i])
        per_pass["fwd" if nd.phase == "fwd" else "re" if nd.name.startswith("re.") else "bwd"] += d
        extra += d * runs[i]
        kernels += op.batch * runs[i]
    return extra, kernels, per_pass
