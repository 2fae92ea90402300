"""Resolve a step request (model, GPU, sizes, partly given parallelism) into a checked, fitting config."""

from __future__ import annotations

from dataclasses import dataclass, field

from c3kit.errors import C3kitError, MemoryFitError, WorkloadError


@dataclass(frozen=True)
class StepConfig:
    """Everything one projection needs, plus notes on what was chosen automatically."""

    model: object  # ModelConfig
    hw: object  # GPU
    par: object  # Parallelism
    phase: str
    seq: int
    dtype: str
    graph: object  # StepGraph
    memory: object = None  # workload.memory report, when the workload layer provides one
    chosen: tuple[str, ...] = field(default=())


def _positive(name: str, v) -> None:
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
        raise C3kitError(f"--{name} must be a positive whole number, got {v!r}")


def check_memory(model, par, phase: str, seq: int, dtype: str, hw):
    """The workload layer's memory verdict (raises MemoryFitError when it does not fit); None if unavailable."""
    try:
        from c3kit.workload import memory
    except ImportError:
        return None
    return memory.check_fits(model, hw, par=par, phase=phase, seq=seq, dtype=dtype)


def resolve(model: str = "llama-3-70b", hw: str = "H200-SXM", gpus: int | None = None, tp: int | None = None,
            sp: bool | None = None, dp: int | None = None, fsdp: bool = False, pp: int | None = None, ep: int = 1,
            seq: int = 8192, batch: int | None = None, micro_batch: int | None = None, dtype: str = "bf16",
            phase: str = "train", recompute: str | None = None, vpp: int = 1,
            dist_optimizer: bool | None = None) -> StepConfig:
    """Build the model, GPU, parallelism and graph; fill unset sizes with defaults that fit in memory."""
    from c3kit.hw import get_gpu
    from c3kit.hw.model import dtype_bytes
    from c3kit.workload.graph import PHASES, build_step
    from c3kit.workload.model import get_model
    from c3kit.workload.parallel import RECOMPUTE, Parallelism

    for name, v in (("gpus", gpus), ("tp", tp), ("dp", dp), ("pp", pp), ("ep", ep), ("seq", seq),
                    ("batch", batch), ("micro-batch", micro_batch), ("vpp", vpp)):
        _positive(name, v)
    if phase not in PHASES:
        raise C3kitError(f"unknown phase {phase!r}: use one of {', '.join(PHASES)}")
    if recompute is not None and recompute not in RECOMPUTE:
        raise C3kitError(f"unknown recompute {recompute!r}: use one of {', '.join(RECOMPUTE)}")
    dtype_bytes(dtype)
    m = get_model(model)
    gpu = get_gpu(hw)
    gpu.peak_flops(dtype)
    chosen: list[str] = []
    node = gpu.gpus_per_node
    auto_gpus = gpus is None and dp is None
    if gpus is None:
        gpus = (tp or 1) * (pp or 1) * dp if dp is not None else max(node, (tp or 1) * (pp or 1))
    if tp is None:
        tp = next((t for t in (8, 4, 2, 1) if t <= gpus and gpus % t == 0 and m.heads % t == 0), 1)
        chosen.append(f"tp={tp}")
    if sp is None:
        sp = tp > 1 and phase == "train"
    if gpus % tp:
        raise WorkloadError(f"{gpus} GPUs are not divisible by tp {tp}: change --gpus or --tp")
    pps = [pp] if pp is not None else [p for p in range(1, min(m.layers, 64) + 1) if gpus % (tp * p) == 0
                                       and m.layers % (p * vpp) == 0 and (p > 1 or vpp == 1)]
    rcs = [recompute] if recompute is not None else (["none", "selective", "full"] if phase == "train" else ["none"])
    # candidates in order of preference: the given GPUs first (fewest pipeline stages, least
    # recomputation), then, when the GPU count was left open and training state does not fit in
    # one node, more nodes of data parallelism with the optimizer state sharded over them (ZeRO-1)
    zero1s = [dist_optimizer] if dist_optimizer is not None else ([False, True] if phase == "train" else [False])
    candidates = [(gpus, p, rc, z) for p in pps for z in zero1s for rc in rcs]
    if auto_gpus and phase == "train":
        for nodes in (2, 4, 8, 16, 32, 64):
            candidates += [(gpus * nodes, p, rc, True if dist_optimizer is None else dist_optimizer)
                           for p in pps for rc in rcs]
    last_fit: Exception | None = None
    for n, p, rc, zero1 in candidates:
        if n % (tp * p):
            raise WorkloadError(f"{n} GPUs are not divisible by tp {tp} x pp {p} = {tp * p}: "
                                "change --gpus, --tp or --pp")
        d = dp if dp is not None else n // (tp * p)
        if tp * p * d != n:
            raise WorkloadError(f"{n} GPUs != tp {tp} x pp {p} x dp {d} = {tp * p * d}: "
                                "change --gpus or the parallel sizes")
        if micro_batch is not None:
            mb = micro_batch
        elif phase != "train" and batch is not None and batch % d == 0:
            mb = batch // d  # inference: every sequence of a DP rank in one forward pass
        else:
            mb = 1
        gb = batch if batch is not None else mb * d * (max(8, 4 * p) if phase == "train" else 1)
        par = Parallelism(tp=tp, sp=sp, dp=d, fsdp=fsdp, pp=p, ep=ep, micro_batch=mb, global_batch=gb,
                          recompute=rc, vpp=vpp, dist_optimizer=bool(zero1) and d > 1 and not fsdp)
        par.validate(m, n)
        try:
            mem = check_memory(m, par, phase, seq, dtype, gpu)
        except MemoryFitError as e:
            last_fit = e
            continue
        graph = build_step(m, par, phase, seq, dtype, gpu.gpus_per_node)
        if n != gpus:
            chosen.append(f"gpus={n} ({n // node} nodes: one node cannot hold the training state)")
        elif auto_gpus:
            chosen.append(f"gpus={n}")
        if pp is None and len(pps) > 1:
            chosen.append(f"pp={p}")
        if dp is None:
            chosen.append(f"dp={d}")
        if par.dist_optimizer and dist_optimizer is None:
            chosen.append("distributed optimizer (ZeRO-1)")
        if batch is None:
            chosen.append(f"batch={gb}")
        if recompute is None and phase == "train":
            chosen.append(f"recompute={rc}")
        return StepConfig(m, gpu, par, phase, seq, dtype, graph, mem, tuple(chosen))
    assert last_fit is not None
    hint = "" if (pp is None and recompute is None) else " (or leave --pp and --recompute unset to search them)"
    raise MemoryFitError(f"{last_fit}{hint}")
