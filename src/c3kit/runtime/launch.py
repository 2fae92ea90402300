"""Starting the ranks of a runtime job: process groups with a timeout, free ports, local multi-process runs."""

from __future__ import annotations

import datetime as _dt
import os
import pickle
import socket
import tempfile
import time as _time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

from c3kit.errors import RuntimeSetupError
from c3kit.runtime._torch import require_torch

# Multicast (NVLS) stays off everywhere the runtime starts ranks: on shared hosts it can take the
# host's GPUs out of service (see the device notes in docs/runtime.md).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on host that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def init_group(rank: int, world: int, backend: str = "gloo", port: int | None = None, host: str = "127.0.0.1",
               timeout_s: float = 60.0, device_index: int | None = None):
    """init_process_group over tcp://host:port with a timeout, so that a hung peer raises instead of hanging."""
    torch = require_torch()
    dist = torch.distributed
    for k, v in SAFE_ENV.items():
        os.environ.setdefault(k, v)
    if backend == "nccl":
        # Blocking wait turns an NCCL timeout into an exception in wait(), not a process abort.
        os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")
        if not torch.cuda.is_available():
            raise RuntimeSetupError("backend 'nccl' needs CUDA GPUs; use backend 'gloo' on the CPU")
        torch.cuda.set_device(rank if device_index is None else device_index)
    port = port or int(os.environ.get("MASTER_PORT", "0")) or None
    if port is None:
        raise RuntimeSetupError("init_group needs a port shared by every rank (pass port= or set MASTER_PORT)")
    kwargs: dict[str, Any] = {}
    if backend == "nccl":
        kwargs["device_id"] = torch.device("cuda", torch.cuda.current_device())
    try:
        dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world,
                                timeout=_dt.timedelta(seconds=timeout_s), **kwargs)
    except TypeError:
        dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world,
                                timeout=_dt.timedelta(seconds=timeout_s))
    return dist.group.WORLD


def _worker(rank: int, world: int, backend: str, port: int, timeout_s: float, fn: Callable, args: tuple,
            outdir: str) -> None:
    torch = require_torch()
    result: dict[str, Any]
    try:
        torch.set_num_threads(1)  # several ranks share few cores in tests
        init_group(rank, world, backend, port, timeout_s=timeout_s)
        result = {"ok": True, "value": fn(rank, world, *args)}
    except BaseException as e:  # noqa: BLE001 - report every failure to the parent
        result = {"ok": False, "type": type(e).__name__, "error": str(e), "trace": traceback.format_exc()}
    try:
        Path(outdir, f"rank{rank}.pkl").write_bytes(pickle.dumps(result))
    finally:
        try:
            if torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def run_local(fn: Callable, world: int, backend: str = "gloo", args: Sequence = (), timeout_s: float = 60.0,
              join_timeout_s: float = 300.0) -> list[dict]:
    """Run fn(rank, world, *args) in `world` spawned processes on this host; one result dict per rank.

    Each dict has ok=True and value, or ok=False with type, error and trace. fn must be importable
    (a module-level function), since ranks are started with the spawn method.
    """
    torch = require_torch()
    import torch.multiprocessing as mp

    port = free_port()
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="c3kit-run-") as outdir:
        procs = [ctx.Process(target=_worker, args=(r, world, backend, port, timeout_s, fn, tuple(args), outdir),
                             daemon=False) for r in range(world)]
        for p in procs:
            p.start()
        deadline = _time.monotonic() + join_timeout_s
        for p in procs:
            p.join(max(0.0, deadline - _time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        results = []
        for r, p in enumerate(procs):
            f = Path(outdir, f"rank{r}.pkl")
            if f.is_file():
                results.append(pickle.loads(f.read_bytes()))
            else:
                results.append({"ok": False, "type": "Died", "error": f"rank {r} exited with code {p.exitcode} "
                                                                      "without a result", "trace": ""})
    del torch
    return results
