"""Comm backends behind the runtime ops: torch.distributed collectives and P2P (nccl, gloo), and
copy-engine pulls from symmetric-memory peer buffers (copy-engine).

Every wait goes through `wait`, which turns a process-group timeout into CommTimeoutError, so a hung
peer ends in an error rather than a hang.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import dataclass, field

from c3kit.errors import RuntimeSetupError
from c3kit.runtime._torch import require_torch
from c3kit.runtime.schedules import check_backend

TIMEOUT_WORDS = ("timed out", "timeout", "deadline", "connection closed", "connection reset", "pair closure")


EMULATE_ENV = "C3KIT_EMULATE_SYMM_MEM"


def host_emulation() -> bool:
    """True when copy-engine may run on CPU ranks over shared host memory (C3KIT_EMULATE_SYMM_MEM=1; tests only)."""
    return os.environ.get(EMULATE_ENV, "") == "1"


class CommTimeoutError(RuntimeSetupError):
    """A peer did not take part in a collective within the process group's timeout."""


def _wrap(e: Exception, what: str) -> Exception:
    text = str(e)
    if any(w in text.lower() for w in TIMEOUT_WORDS):
        return CommTimeoutError(f"{what}: a peer did not answer within the process group's timeout ({text[:300]}); "
                                "check that every rank calls the same ops in the same order")
    return RuntimeSetupError(f"{what} failed: {type(e).__name__}: {text[:300]}")


def wait(work, what: str = "collective") -> None:
    """Wait for an async work handle (or a list of them), raising CommTimeoutError on a timeout."""
    if work is None:
        return
    if isinstance(work, (list, tuple)):
        for w in work:
            wait(w, what)
        return
    for w in [work]:
        try:
            w.wait()
        except Exception as e:  # noqa: BLE001 - torch raises RuntimeError / DistBackendError subclasses
            raise _wrap(e, what) from None


def guarded(fn, what: str):
    """Call fn(), turning torch.distributed failures into CommTimeoutError / RuntimeSetupError."""
    try:
        return fn()
    except RuntimeSetupError:
        raise
    except Exception as e:  # noqa: BLE001
        raise _wrap(e, what) from None


@dataclass
class Comm:
    """A process group and a backend name; methods issue async collectives and P2P on it."""

    group: object = None
    backend: str = "nccl"
    rank: int = field(init=False, default=0)
    world: int = field(init=False, default=1)

    def __post_init__(self) -> None:
        torch = require_torch()
        dist = torch.distributed
        check_backend(self.backend)
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeSetupError("torch.distributed is not initialized: call c3kit.runtime.launch.init_group "
                                    "(or torch.distributed.init_process_group) on every rank first")
        self.rank = dist.get_rank(self.group)
        self.world = dist.get_world_size(self.group)
        pg_backend = str(dist.get_backend(self.group)).lower()
        if self.backend == "gloo" and "gloo" not in pg_backend:
            raise RuntimeSetupError(f"comm='gloo' needs a gloo process group, this one is {pg_backend!r}")
        if self.backend == "copy-engine" and "gloo" in pg_backend and host_emulation():
            return
        if self.backend in ("nccl", "copy-engine") and "nccl" not in pg_backend:
            raise RuntimeSetupError(f"comm={self.backend!r} needs an NCCL process group on CUDA, this one is "
                                    f"{pg_backend!r}: use comm='gloo' on the CPU")

    def global_rank(self, group_rank: int) -> int:
        """The global rank of a rank of this group (P2P ops address global ranks)."""
        dist = require_torch().distributed
        if self.group is None:
            return group_rank
        return dist.get_global_rank(self.group, group_rank)

    def all_gather(self, out, x):
        """Async all-gather of x (dim 0) into out [world * rows, ...]; returns the work handle."""
        dist = require_torch().distributed
        fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
        return guarded(lambda: fn(out, x.contiguous(), group=self.group, async_op=True), "all_gather")

    def reduce_scatter(self, out, x):
        """Async sum reduce-scatter of x (dim 0) into out [rows / world, ...]; returns the work handle."""
        dist = require_torch().distributed
        fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor  # renamed in torch 2.13
        return guarded(lambda: fn(out, x.contiguous(), group=self.group, async_op=True), "reduce_scatter")

    def all_to_all(self, out, x, out_splits=None, in_splits=None):
        """Async all-to-all of rows of x into out with the given row splits; returns the work handle."""
        dist = require_torch().distributed
        return guarded(lambda: dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=self.group,
                                                      async_op=True), "all_to_all")

    def all_reduce(self, x, op: str = "sum"):
        """Async all-reduce of x in place (op "sum" or "max"); returns the work handle."""
        dist = require_torch().distributed
        rop = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op]
        return guarded(lambda: dist.all_reduce(x, op=rop, group=self.group, async_op=True), "all_reduce")

    def exchange(self, send, send_to: int, recv, recv_from: int):
        """Async P2P: send `send` to group rank send_to and receive into `recv` from recv_from; list of works."""
        dist = require_torch().distributed
        ops = []
        if send is not None:
            ops.append(dist.P2POp(dist.isend, send.contiguous(), self.global_rank(send_to), self.group))
        if recv is not None:
            ops.append(dist.P2POp(dist.irecv, recv, self.global_rank(recv_from), self.group))
        if not ops:
            return []
        return guarded(lambda: dist.batch_isend_irecv(ops), "send/recv")

    def barrier(self) -> None:
        """A blocking barrier over the group (raises CommTimeoutError on a timeout)."""
        dist = require_torch().distributed
        guarded(lambda: dist.barrier(group=self.group), "barrier")


class SymmBuffer:
    """A symmetric-memory buffer of `nbytes` on every rank; peers' parts are views for copy_ pulls."""

    _cache: dict = {}

    def __init__(self, comm: Comm, nbytes: int, device) -> None:
        torch = require_torch()
        try:
            import torch.distributed._symmetric_memory as symm_mem
        except ImportError as e:
            raise RuntimeSetupError(f"comm='copy-engine' needs torch.distributed._symmetric_memory ({e}); "
                                    "use a torch with CUDA symmetric memory (2.5 or newer)") from None
        if getattr(device, "type", str(device)) != "cuda":
            raise RuntimeSetupError("comm='copy-engine' needs CUDA tensors: peer buffers live in GPU memory")
        group = comm.group or torch.distributed.group.WORLD
        name = getattr(group, "group_name", None)
        if hasattr(symm_mem, "enable_symm_mem_for_group") and name is not None:
            try:
                symm_mem.enable_symm_mem_for_group(name)  # needed on older torch; a no-op or deprecated later
            except Exception:  # noqa: BLE001
                pass
        self.comm = comm
        self.nbytes = int(nbytes)
        self.buf = guarded(lambda: symm_mem.empty(self.nbytes, dtype=torch.uint8, device=device), "symm_mem.empty")
        self.handle = guarded(lambda: symm_mem.rendezvous(self.buf, group), "symm_mem.rendezvous")

    @classmethod
    def get(cls, comm: Comm, nbytes: int, device) -> "SymmBuffer":
        """A cached buffer of at least nbytes for this group and device (every rank asks for the same size)."""
        key = (id(comm.group), str(device))
        have = cls._cache.get(key)
        if have is None or have.nbytes < nbytes:
            # Grow to the next power of two so that a sweep of sizes rendezvouses only a few times.
            size = 1 << max(20, int(nbytes - 1).bit_length())
            cpu = getattr(device, "type", str(device)) == "cpu"
            have = HostSymmBuffer(comm, size) if cpu and host_emulation() else cls(comm, size, device)
            cls._cache[key] = have
        return have

    def view(self, rank: int, shape, dtype, offset_elems: int = 0):
        """The part of rank's buffer at offset_elems (in elements of dtype) as a tensor of shape."""
        return self.handle.get_buffer(rank, tuple(int(s) for s in shape), dtype, int(offset_elems))

    def barrier(self) -> None:
        """A device-side barrier on the current stream over every rank's buffer."""
        guarded(lambda: self.handle.barrier(channel=0), "symm_mem barrier")


class HostSymmBuffer:
    """Host emulation of SymmBuffer for CPU tests: one shared-memory file per rank, mapped by every peer.

    Same view() and barrier() as SymmBuffer (the barrier is a gloo barrier), so the copy-engine
    schedules' offsets and step order run on CPU ranks.
    """

    def __init__(self, comm: Comm, nbytes: int) -> None:
        torch = require_torch()
        dist = torch.distributed
        self.comm, self.nbytes = comm, int(nbytes)
        tag = [uuid.uuid4().hex if comm.rank == 0 else None]
        guarded(lambda: dist.broadcast_object_list(tag, src=comm.global_rank(0), group=comm.group), "emulation setup")
        root = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        self.paths = [os.path.join(root, f"c3kit-symm-{tag[0]}-{r}") for r in range(comm.world)]
        with open(self.paths[comm.rank], "wb") as f:
            f.truncate(self.nbytes)
        comm.barrier()
        self.maps = [torch.from_file(p, shared=True, size=self.nbytes, dtype=torch.uint8) for p in self.paths]
        comm.barrier()
        if comm.rank == 0:
            for p in self.paths:  # mapped by everyone: the names can go
                try:
                    os.unlink(p)
                except OSError:
                    pass

    def view(self, rank: int, shape, dtype, offset_elems: int = 0):
        """rank's buffer at offset_elems (elements of dtype) as a tensor of shape."""
        numel = 1
        for s in shape:
            numel *= int(s)
        flat = self.maps[rank].view(dtype)
        return flat[int(offset_elems):int(offset_elems) + numel].view(*[int(s) for s in shape])

    def barrier(self) -> None:
        """A gloo barrier (the host copies before it are complete)."""
        self.comm.barrier()
