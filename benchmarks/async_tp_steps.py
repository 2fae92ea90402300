"""PyTorch async TP step by step on one multi-GPU node: for every all-gather / reduce-scatter case of the published overlap
dataset, the whole fused op timed as kraken's harness times it, and the parts of one step of its loop alone: the per-step
GEMM with kraken's layouts (B K-major), one copy-engine pull of a step's bytes from a peer's symmetric buffer, the same pull
beside the per-step GEMM on a second stream, and one symmetric-memory barrier; plus the kernel and copy times of one fused
call from the profiler. docs/async_tp.md says why (the published rows' excess per step is in the multi-GPU parts, which no
op-level measurement covers yet).

Run on a node (device tool, repo root):
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONPATH=src \\
      torchrun --nproc-per-node 8 benchmarks/async_tp_steps.py --out $OUT/h200-sxm-async-tp-steps.json
Rank 0 writes the file. Without torchrun (no RANK in the environment) it prints one error line and exits 2.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

COLUMNS = ["case", "pattern", "m", "n", "k", "world", "fused_s", "step_gemm_s", "pull_s", "pull_beside_gemm_s",
           "barrier_s", "trace_gemm_s", "trace_copy_s", "trace_barrier_s", "trace_other_s"]
FLUSH_BYTES = 256 * 2**20  # kraken's L2 flush before each timed call
CALLS = 25  # timed calls per figure (median), as kraken
WARMUP = 200  # warm-up calls of the fused op, as kraken


def _cases(world: int) -> list[tuple[str, str, int, int, int]]:
    """(case, pattern, m, n, k) of the dataset's all-gather and reduce-scatter cases whose rows divide by world."""
    from c3kit.overlap.validate import load

    df = load()
    df = df[df["pattern"].isin(["ag_gemm", "gemm_rs"])].drop_duplicates("case")
    return [(str(r.case), str(r.pattern), int(r.m), int(r.n), int(r.k)) for r in df.itertuples() if r.m % world == 0]


def _timed(torch, fn, flush) -> float:
    """Median seconds of fn() over CALLS calls, each timed by CUDA events after an L2 flush, the host queued ahead."""
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e7))  # let the host queue the calls ahead of the GPU, as kraken's harness does
    events = []
    for _ in range(CALLS):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        events.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) * 1e-3


def _trace(torch, fn) -> tuple[float, float, float, float]:
    """Device seconds of one fn() call by kind: GEMM kernels, copies, barrier kernels, everything else."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = [0.0, 0.0, 0.0, 0.0]
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", None)
        if t is None:
            t = getattr(ev, "cuda_time_total", 0.0)
        name = ev.key.lower()
        if t <= 0 or name.startswith("fused_") or "record_function" in name:
            continue
        if "memcpy" in name or "memset" in name:
            i = 1
        elif "barrier" in name or "signal" in name:
            i = 2
        elif any(w in name for w in ("gemm", "nvjet", "cutlass", "sm90", "xmma", "matmul")):
            i = 0
        else:
            i = 3
        out[i] += t * 1e-6
    return out[0], out[1], out[2], out[3]


def measure(torch, dist, symm_mem, group_name: str, rank: int, world: int) -> list[list]:
    """Rows of COLUMNS for every case (bf16, random operands)."""
    dev = torch.device("cuda", torch.cuda.current_device())
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=dev)
    side = torch.cuda.Stream(dev)
    rows = []
    for case, pattern, m, n, k in _cases(world):
        rows_step = m // world
        B = torch.randn(k, n, device=dev, dtype=torch.bfloat16).T.contiguous().T  # K-major, as kraken
        if pattern == "ag_gemm":
            A = symm_mem.empty(rows_step, k, dtype=torch.bfloat16, device=dev).normal_()
            symm_mem.rendezvous(A, group_name)

            def fused():
                torch.ops.symm_mem.fused_all_gather_matmul(A, [B], gather_dim=0, group_name=group_name)
            pull_shape = (rows_step, k)  # a step pulls one peer's shard of A
        else:
            A = symm_mem.empty(m, k, dtype=torch.bfloat16, device=dev).normal_()
            symm_mem.rendezvous(A, group_name)

            def fused():
                torch.ops.symm_mem.fused_matmul_reduce_scatter(A, B, "sum", scatter_dim=0, group_name=group_name)
            pull_shape = (rows_step, n)  # a step pulls this GPU's rows of one peer's partial output
        a_step = torch.randn(rows_step, k, device=dev, dtype=torch.bfloat16)
        c_step = torch.empty(rows_step, n, device=dev, dtype=torch.bfloat16)
        src = symm_mem.empty(*pull_shape, dtype=torch.bfloat16, device=dev).normal_()
        hdl = symm_mem.rendezvous(src, group_name)
        peer = hdl.get_buffer((rank + 1) % world, list(pull_shape), torch.bfloat16)
        dst = torch.empty(pull_shape, device=dev, dtype=torch.bfloat16)

        def gemm():
            torch.mm(a_step, B, out=c_step)

        def pull():
            dst.copy_(peer)

        def both():
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                pull()
            gemm()
            torch.cuda.current_stream(dev).wait_stream(side)

        def barrier():
            hdl.barrier(channel=0)

        for _ in range(WARMUP):
            fused()
        dist.barrier()
        t_fused = _timed(torch, fused, flush)
        for fn in (gemm, pull, both, barrier):
            fn()
        dist.barrier()
        t_gemm, t_pull, t_both = (_timed(torch, f, flush) for f in (gemm, pull, both))
        dist.barrier()
        t_barrier = _timed(torch, lambda: [barrier() for _ in range(100)], flush) / 100
        dist.barrier()
        tr = _trace(torch, fused)
        rows.append([case, pattern, m, n, k, world, t_fused, t_gemm, t_pull, t_both, t_barrier, *tr])
        if rank == 0:
            print(rows[-1], flush=True)
        dist.barrier()
    return rows


def main(argv: list[str] | None = None) -> int:
    """Measure on every rank of a torchrun job; rank 0 writes --out."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("error: run under torchrun on a multi-GPU node (RANK and WORLD_SIZE are not set)", file=sys.stderr)
        return 2
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    if not torch.cuda.is_available():
        print("error: no CUDA device: async TP needs GPUs with peer access", file=sys.stderr)
        return 2
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    group_name = dist.group.WORLD.group_name
    symm_mem.enable_symm_mem_for_group(group_name)
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = measure(torch, dist, symm_mem, group_name, rank, world)
    if rank == 0:
        from c3kit.runtime.calib import write_measurement

        write_measurement(a.out, "async-tp-steps", COLUMNS, rows,
                          f"torchrun --nproc-per-node {world} benchmarks/async_tp_steps.py --out", "benchmarks/async_tp_steps.py")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
