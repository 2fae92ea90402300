"""Overlapped ops against serial NCCL + cuBLAS, PyTorch's fused symm_mem ops and ideal (`c3kit bench overlap`).

Shapes are tensor-parallel layers of real models at TP = the group size, read from the layer
description (c3kit.workload.layer): all-gather + GEMM is the column-parallel FC1 (x [T/tp, H]
gathered, times W [H, g F/tp], g = 2 for a gated MLP's fused gate and up projections); GEMM +
reduce-scatter is the row-parallel FC2 (x [T, F/tp] times W [F/tp, H], scattered over tokens); MoE
is dispatch -> grouped GEMM of the local experts (W [E/tp, H, g F_moe]) -> combine, balanced
routing, T/tp x top-k token rows per GPU.
For every case: t_comp (the GEMM alone on the whole input), t_comm (the collective alone), serial =
both, ideal = max, then every schedule x comm backend of c3kit, and the fused op where PyTorch has one.
"""

from __future__ import annotations

from typing import Sequence

from c3kit.errors import RuntimeSetupError
from c3kit.runtime._torch import require_torch, torch_dtype
from c3kit.runtime.bench.timing import median_time, slowest_rank
from c3kit.workload.layer import comm_gemm_pairs, describe_tokens
from c3kit.workload.model import ModelConfig, get_model
from c3kit.workload.parallel import Parallelism

COLUMNS = ["op", "model", "tp", "m", "n", "k", "experts", "dtype", "impl", "schedule", "comm", "time_s", "t_comp_s",
           "t_comm_s", "serial_s", "ideal_s", "speedup_vs_serial", "fraction_of_ideal"]


# model presets by benchmark name; "tiny" is a small MoE for CPU tests
MODELS = {
    "llama3-70b": "Llama-3-70B",
    "llama3-405b": "Llama-3-405B",
    "mixtral-8x7b": "Mixtral-8x7B",
    # trying the benchmark on a CPU (--quick): seconds, not hours
    "small": ModelConfig(name="small", hidden=1024, layers=1, heads=8, ffn_hidden=4096, n_experts=4, top_k=2),
    "tiny": ModelConfig(name="tiny", hidden=64, layers=1, heads=4, ffn_hidden=128, n_experts=4, top_k=2),
}
FULL_MODELS = ("llama3-70b", "llama3-405b", "mixtral-8x7b")
FULL_TOKENS = 8192
QUICK_MODELS = ("small",)
QUICK_TOKENS = 1024


def sweep_cases(models: Sequence[str], ops_: Sequence[str] = ("ag", "rs", "moe")) -> list[tuple[str, str]]:
    """The (model, op) pairs overlap_sweep times, in its order (MoE only for models with experts)."""
    return [(name, op) for name in models for op in ops_ if op != "moe" or _is_moe(name)]


def case_shape(name: str, op: str, tp: int, tokens: int) -> tuple[int, int, int, int]:
    """(m, n, k, local experts) of one benchmark case, read from the layer description at TP = tp.

    ag: the column-parallel FC1 (all-gather -> GEMM); rs: the row-parallel FC2 (GEMM -> reduce-scatter);
    moe: dispatch -> the local experts' up projection with EP = tp, rows trimmed to a multiple of
    tp x local experts so that routing is balanced.
    """
    model = MODELS[name] if isinstance(MODELS[name], ModelConfig) else get_model(MODELS[name])
    ep = tp if op == "moe" else 1
    layer = describe_tokens(model, Parallelism(tp=tp, sp=True, ep=ep), tokens)
    pattern, gemm = {"ag": ("ag_gemm", "fc1"), "rs": ("gemm_rs", "fc2"), "moe": ("moe", "expert_fc1")}[op]
    for p in comm_gemm_pairs(layer):
        if p.pattern == pattern and p.gemm.name.removeprefix("expert_") == gemm.removeprefix("expert_"):
            if op != "moe":
                return int(p.m), int(p.n), int(p.k), 0
            e_loc = int(p.gemm.shape.batch)
            return int(p.m - p.m % (tp * e_loc)), int(p.n), int(p.k), e_loc
    raise RuntimeSetupError(f"{name} has no {op} pair at tp {tp} (a dense model has no moe case)")


def _is_moe(name: str) -> bool:
    m = MODELS[name]
    return (m if isinstance(m, ModelConfig) else get_model(m)).is_moe


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
                  comms: Sequence[str] | None = None, iters: int = 5, ops_: Sequence[str] = ("ag", "rs", "moe"),
                  progress=None) -> dict:
    """Every op x model x schedule x backend at TP = world on this rank; rank 0 holds the rows.

    progress: a queue (or anything with put) that rank 0 sends (done, total, label) to as (model, op) pairs
    start and finish; the launcher's parent process turns it into a progress bar.
    """
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
    todo = sweep_cases(models, ops_)

    def report(label: str) -> None:
        if progress is not None and rank == 0:
            progress.put((done[0], len(todo), label))

    done = [0]
    for name in models:
        for op in ops_:
            if op == "moe" and not _is_moe(name):
                continue
            report(f"{name} {op}")
            try:
                m, n, k, e_loc = case_shape(name, op, tp, tokens)
                if op == "ag":
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
                    experts = e_loc * tp
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
                    report(f"{name} {op}: {impl} {s} {c}")
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
            done[0] += 1
            report(f"{name} {op}")
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
