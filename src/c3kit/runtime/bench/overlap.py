"""Overlapped ops against serial NCCL + cuBLAS, PyTorch's fused symm_mem ops and ideal (`c3kit bench overlap`).

Shapes are tensor-parallel layers of real models at TP = the group size: all-gather + GEMM is the
column-parallel FC1 (x [T/tp, H] gathered, times W [H, F/tp]); GEMM + reduce-scatter is the
row-parallel FC2 (x [T, F/tp] times W [F/tp, H], scattered over tokens); MoE is dispatch ->
grouped GEMM of the local experts (W [E/tp, H, F_moe]) -> combine, balanced routing, top-k tokens.
For every case: t_comp (the GEMM alone on the whole input), t_comm (the collective alone), serial =
both, ideal = max, then every schedule x comm backend of c3kit, and the fused op where PyTorch has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from c3kit.runtime._torch import require_torch, torch_dtype
from c3kit.runtime.bench.timing import median_time, slowest_rank

COLUMNS = ["op", "model", "tp", "m", "n", "k", "experts", "dtype", "impl", "schedule", "comm", "time_s", "t_comp_s",
           "t_comm_s", "serial_s", "ideal_s", "speedup_vs_serial", "fraction_of_ideal"]


@dataclass(frozen=True)
class ModelShape:
    """Hidden size, FFN size, experts (0 = dense) and experts per token of a model preset."""

    hidden: int
    ffn: int
    experts: int = 0
    topk: int = 1


MODELS = {
    "llama3-70b": ModelShape(8192, 28672),
    "llama3-405b": ModelShape(16384, 53248),
    "mixtral-8x7b": ModelShape(4096, 14336, 8, 2),
    "tiny": ModelShape(64, 128, 4, 2),  # for CPU tests
}


def _timed(fn, device, iters: int) -> float:
    """The slowest rank's median seconds of fn() after one warm-up call, each timing after a barrier of the ranks."""
    torch = require_torch()
    return slowest_rank(median_time(fn, device, iters, warmup=1, before=torch.distributed.barrier), device)


def _fused(torch, kind: str):
    """PyTorch's fused op callable, or None when this torch lacks it."""
    ops = getattr(torch.ops, "symm_mem", None)
    name = {"ag": "fused_all_gather_matmul", "rs": "fused_matmul_reduce_scatter"}[kind]
    try:
        return getattr(ops, name)
    except (AttributeError, RuntimeError):
        return None


def overlap_sweep(rank: int, world: int, models: Sequence[str] = ("llama3-70b",), tokens: int = 8192,
                  dtype: str = "bf16", schedules: Sequence[str] = ("serial", "ring", "ficco", "auto"),
                  comms: Sequence[str] | None = None, iters: int = 5, ops_: Sequence[str] = ("ag", "rs", "moe")) -> dict:
    """Every op x model x schedule x backend at TP = world on this rank; rank 0 holds the rows."""
    torch = require_torch()
    from c3kit.runtime import ops
    from c3kit.runtime.comm import Comm

    dist = torch.distributed
    cuda = torch.cuda.is_available() and "nccl" in str(dist.get_backend()).lower()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    tdt = torch_dtype(dtype) if cuda else torch.float32
    comms = list(comms or (("nccl", "copy-engine") if cuda else ("gloo",)))
    base = "nccl" if cuda else "gloo"
    rows, errors, autos = [], [], []
    tp = world
    g = torch.Generator(device="cpu").manual_seed(rank)
    for name in models:
        ms = MODELS[name]
        for op in ops_:
            if op == "moe" and not ms.experts:
                continue
            try:
                if op == "ag":
                    m, n, k = tokens, ms.ffn // tp, ms.hidden
                    x = torch.randn(m // tp, k, generator=g).to(tdt).to(device)
                    w = torch.randn(k, n, generator=g).to(tdt).to(device)
                    full = torch.randn(m, k, generator=g).to(tdt).to(device)
                    gathered = torch.empty(m, k, dtype=tdt, device=device)
                    comp = lambda: torch.mm(full, w)  # noqa: E731
                    comm_only = lambda: dist.all_gather_into_tensor(gathered, x)  # noqa: E731
                    run = lambda s, c: ops.all_gather_matmul(x, w, schedule=s, comm=c)  # noqa: E731
                    fused = _fused(torch, "ag")
                    fused_call = (lambda: fused(x, [w], 0, dist.group.WORLD.group_name)) if fused else None
                    experts = 0
                elif op == "rs":
                    m, n, k = tokens, ms.hidden, ms.ffn // tp
                    x = torch.randn(m, k, generator=g).to(tdt).to(device)
                    w = torch.randn(k, n, generator=g).to(tdt).to(device)
                    part = torch.randn(m, n, generator=g).to(tdt).to(device)
                    outp = torch.empty(m // tp, n, dtype=tdt, device=device)
                    comp = lambda: torch.mm(x, w)  # noqa: E731
                    comm_only = lambda: dist.reduce_scatter_tensor(outp, part)  # noqa: E731
                    run = lambda s, c: ops.matmul_reduce_scatter(x, w, schedule=s, comm=c)  # noqa: E731
                    fused = _fused(torch, "rs")
                    fused_call = (lambda: fused(x, w, "sum", 0, dist.group.WORLD.group_name)) if fused else None
                    experts = 0
                else:
                    e_loc = max(1, ms.experts // tp)
                    experts = e_loc * tp
                    rows_tok = tokens // tp * ms.topk
                    rows_tok -= rows_tok % (tp * e_loc)
                    m, n, k = rows_tok, ms.ffn, ms.hidden
                    x = torch.randn(m, k, generator=g).to(tdt).to(device)
                    w = torch.randn(e_loc, k, n, generator=g).to(tdt).to(device)
                    recv = torch.empty_like(x)
                    comp = lambda: ops.grouped_gemm(x, w, [[m // e_loc] * e_loc])  # noqa: E731
                    comm_only = lambda: dist.all_to_all_single(recv, x)  # noqa: E731
                    run = lambda s, c: ops.moe_all_to_all_gemm(x, w, schedule=s, comm=c)  # noqa: E731
                    fused_call = None
                t_comp = _timed(comp, device, iters)
                t_comm = _timed(comm_only, device, iters) * (2 if op == "moe" else 1)  # dispatch + combine
                serial, ideal = t_comp + t_comm, max(t_comp, t_comm)
                cases = [("c3kit", s, c) for c in comms for s in schedules]
                if fused_call is not None and cuda:
                    cases.append(("torch-fused", "fused", "copy-engine"))
                cases.append(("ideal", "ideal", "-"))
                for impl, s, c in cases:
                    try:
                        if impl == "ideal":
                            t = ideal
                        elif impl == "torch-fused":
                            t = _timed(fused_call, device, iters)
                        else:
                            t = _timed(lambda: run(s, c), device, iters)
                    except Exception as e:  # noqa: BLE001 - one failing case must not lose the others
                        errors.append(f"{name} {op} {impl} {s} {c}: {type(e).__name__}: {str(e)[:200]}")
                        continue
                    frac = (serial / t - 1) / (serial / ideal - 1) if serial > ideal * (1 + 1e-9) else float("nan")
                    rows.append([op, name, tp, m, n, k, experts, dtype, impl, s, c, t, t_comp, t_comm, serial, ideal,
                                 serial / t, frac])
                rows.append([op, name, tp, m, n, k, experts, dtype, "reference", "serial-nccl-cublas", base, serial,
                             t_comp, t_comm, serial, ideal, 1.0, 0.0])
                if "auto" in schedules:  # what auto ran, and what the selector wanted that the runtime cannot realize
                    for c in comms:
                        ch = _auto_choice(op, m, n, k, tp, x.element_size(), c, experts)
                        autos.append({"op": op, "model": name, "comm": c, "schedule": ch.schedule,
                                      "engine_schedule": ch.engine_schedule, "engine_best": ch.engine_best,
                                      "note": ch.note})
            except Exception as e:  # noqa: BLE001
                errors.append(f"{name} {op}: {type(e).__name__}: {str(e)[:200]}")
    return {"rank": rank, "rows": rows, "errors": errors, "auto": autos}


def _auto_choice(op: str, m: int, n: int, k: int, tp: int, elem: int, comm: str, experts: int):
    """runtime.schedules.choose_auto with the global sizes the runtime ops pass for this sweep's case."""
    from c3kit.runtime.schedules import choose_auto

    if op == "ag":
        return choose_auto("all_gather_matmul", m, n, k, tp, elem, comm)
    if op == "rs":
        return choose_auto("matmul_reduce_scatter", m, n, k * tp, tp, elem, comm)
    return choose_auto("moe", m * tp, n, k, tp, elem, comm, experts=experts)


def summarize(rows: Sequence[Sequence]) -> list[list]:
    """Per case: auto's time over the best of (serial, PyTorch fused), and the best schedule's fraction of ideal."""
    ix = {c: i for i, c in enumerate(COLUMNS)}
    cases: dict[tuple, list] = {}
    for r in rows:
        cases.setdefault((r[ix["op"]], r[ix["model"]], r[ix["tp"]]), []).append(r)
    out = []
    for key, rs in cases.items():
        t = lambda pred: min((r[ix["time_s"]] for r in rs if pred(r)), default=float("nan"))  # noqa: E731
        auto = t(lambda r: r[ix["schedule"]] == "auto")
        serial = t(lambda r: r[ix["impl"]] == "reference")
        fused = t(lambda r: r[ix["impl"]] == "torch-fused")
        best_base = min(serial, fused) if fused == fused else serial
        best = t(lambda r: r[ix["impl"]] == "c3kit")
        comm_share = rs[0][ix["t_comm_s"]] / rs[0][ix["serial_s"]]
        ideal = rs[0][ix["ideal_s"]]
        s_ideal = serial / ideal
        frac_auto = (serial / auto - 1) / (s_ideal - 1) if s_ideal > 1 else float("nan")
        out.append([*key, comm_share, auto / best_base, best / best_base, frac_auto])
    return out
