"""The c3kit runtime ops under torchrun: every rank runs the overlapped ops and checks them against fp64.

CPU (gloo), 2 processes:
    torchrun --standalone --nproc-per-node 2 examples/runtime_torchrun.py
One node of GPUs (nccl), 8 processes:
    torchrun --standalone --nproc-per-node 8 examples/runtime_torchrun.py --cuda

torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; the process group is started from them
(env://), and the ops run on that default group. Rank 0 prints one line per op; the exit code is 1 if
any rank's result is off by more than the tolerance.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist

from c3kit.runtime import ops
from c3kit.runtime.selftest import TOLERANCE, check_ops, rel_error


def main() -> int:
    """Start the group from torchrun's environment, run the ops, report on rank 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuda", action="store_true", help="one GPU per rank, nccl (default: CPU, gloo)")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    backend = "nccl" if args.cuda else "gloo"
    if args.cuda:
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # multicast off, as c3kit.runtime.launch does
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=120))
    device = torch.device("cuda", torch.cuda.current_device()) if args.cuda else torch.device("cpu")
    dtype = torch.bfloat16 if args.cuda else torch.float32

    # one op by hand: all-gather of row shards, then GEMM, overlapped by the ring schedule
    g = torch.Generator().manual_seed(0)
    x_all = torch.randn(world * 64, 256, generator=g)
    w = torch.randn(256, 128, generator=g)
    x_shard = x_all[rank * 64:(rank + 1) * 64].to(device, dtype)
    out = ops.all_gather_matmul(x_shard, w.to(device, dtype), schedule="ring", comm=backend)
    err = rel_error(out, x_all.double() @ w.double())

    # every op x schedule on random shapes (c3kit.runtime.selftest)
    res = check_ops(rank, world, device=device.type, comm=backend, cases=2,
                    dtypes=("bf16",) if args.cuda else ("fp32",))
    bad = err > TOLERANCE["bf16" if args.cuda else "fp32"] or bool(res["failures"])
    flag = torch.tensor([int(bad)], device=device)
    dist.all_reduce(flag)
    if rank == 0:
        print(f"{world} ranks, {backend}: all_gather_matmul (ring) relative error {err:.1e}; selftest: "
              f"{res['checks']} op x schedule checks, {len(res['failures'])} failures, worst relative error "
              f"{max(res['worst'].values(), default=0.0):.1e}; ranks with errors: {int(flag.item())}")
    dist.destroy_process_group()
    return 1 if int(flag.item()) else 0


if __name__ == "__main__":
    sys.exit(main())
