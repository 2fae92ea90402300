"""Collective benchmarks in the nccl-tests manner, run on every rank of a group (`c3kit bench comm`).

S is the nccl-tests size: the gathered output of an all-gather, the unreduced input of a
reduce-scatter, the buffer of an all-reduce and of an all-to-all. algbw = S / t; busbw = algbw x
(2 (n - 1) / n for all-reduce, (n - 1) / n otherwise). t is the slowest rank's median time.

Backends: "nccl" (default channels), "nccl-ctas<k>" (a process group whose NCCL config has
max_ctas = k, i.e. the collective on at most k SMs), "copy-engine" (all-gather and all-to-all as
contiguous copy_ pulls from symmetric-memory peer buffers, one side stream per peer; reductions
cannot be done by copy engines), "gloo" (CPU). With a GEMM: the same collective concurrent with a
bf16 GEMM on another stream (the multi-GPU C3 / ConCCL table).
"""

from __future__ import annotations

from typing import Sequence

from c3kit.runtime._torch import require_torch, torch_dtype
from c3kit.runtime.bench.timing import median_time, slowest_rank

COLUMNS = ["collective", "backend", "ranks", "bytes", "count", "dtype", "time_s", "algbw", "busbw"]
C3_COLUMNS = ["collective", "backend", "ranks", "bytes", "gemm", "m", "n", "k", "t_comp_s", "t_comm_s",
              "t_concurrent_s", "serial_s", "ideal_s", "s_ideal", "s_real", "fraction_of_ideal", "class"]
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
CE_COLLECTIVES = ("all_gather", "all_to_all")


def busbw_factor(kind: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor."""
    if n <= 1:
        return 1.0
    return 2.0 * (n - 1) / n if kind == "all_reduce" else (n - 1) / n


def default_sizes(lo: float = 1024, hi: float = 2**30, factor: int = 4) -> list[int]:
    """1 KiB .. 1 GiB in steps of `factor` (bytes)."""
    out, s = [], int(lo)
    while s <= hi * 1.0001:
        out.append(s)
        s *= factor
    return out


def _group_for(backend: str, dist):
    """The process group for a backend name (a new NCCL group with max_ctas for nccl-ctas<k>)."""
    if backend.startswith("nccl-ctas"):
        k = int(backend[len("nccl-ctas"):])
        opts = dist.ProcessGroupNCCL.Options()
        opts.config.max_ctas = k
        opts.config.min_ctas = 1
        return dist.new_group(backend="nccl", pg_options=opts)
    return None


class _Op:
    """Buffers and a launch function for one collective of S bytes on one backend."""

    def __init__(self, kind: str, backend: str, nbytes: int, dtype, device, comm, group) -> None:
        torch = require_torch()
        n = comm.world
        esize = torch.tensor([], dtype=dtype).element_size()
        per = max(1, nbytes // (esize * n))  # elements per rank chunk
        self.count = per * n
        self.kind, self.backend, self.comm, self.group = kind, backend, comm, group
        self.nbytes = self.count * esize
        g = torch.Generator(device="cpu").manual_seed(comm.rank)
        if kind == "all_gather":
            self.inp = torch.randn(per, generator=g).to(dtype).to(device)
            self.out = torch.empty(self.count, dtype=dtype, device=device)
        elif kind == "reduce_scatter":
            self.inp = torch.randn(self.count, generator=g).to(dtype).to(device)
            self.out = torch.empty(per, dtype=dtype, device=device)
        else:
            self.inp = torch.randn(self.count, generator=g).to(dtype).to(device)
            self.out = torch.empty(self.count, dtype=dtype, device=device)
        if backend == "copy-engine":
            from c3kit.runtime.comm import SymmBuffer

            from c3kit.runtime.ops import _HostStream

            self.buf = SymmBuffer.get(comm, self.inp.numel() * esize, device)
            cuda = getattr(device, "type", str(device)) == "cuda"
            self.streams = [torch.cuda.Stream(device) if cuda else _HostStream() for _ in range(max(1, n - 1))]

    def launch(self) -> None:
        """Issue the collective on the current stream (nccl/gloo) or as peer pulls (copy-engine)."""
        torch = require_torch()
        dist = torch.distributed
        if self.backend == "copy-engine":
            self._pull()
            return
        kw = {"group": self.group} if self.group is not None else {"group": self.comm.group}
        if self.kind == "all_gather":
            (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(self.out, self.inp, **kw)
        elif self.kind == "reduce_scatter":
            (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(self.out, self.inp, **kw)
        elif self.kind == "all_reduce":
            dist.all_reduce(self.inp, **kw)
        else:
            dist.all_to_all_single(self.out, self.inp, **kw)

    def _pull(self) -> None:
        torch = require_torch()
        from c3kit.runtime.ops import _current_stream, _pull

        n, r = self.comm.world, self.comm.rank
        per = self.out.numel() // n
        main = _current_stream(torch, self.out.device)
        self.buf.view(r, (self.inp.numel(),), self.inp.dtype).copy_(self.inp)
        self.buf.barrier()
        evs = []
        for s in range(1, n):
            p = (r + s) % n
            off = 0 if self.kind == "all_gather" else r * per  # all-to-all: my chunk of p's buffer
            evs.append(_pull(torch, self.streams[s - 1], main, self.out[p * per:(p + 1) * per],
                             self.buf.view(p, (per,), self.inp.dtype, off)))
        own = self.inp if self.kind == "all_gather" else self.inp[r * per:(r + 1) * per]
        self.out[r * per:(r + 1) * per].copy_(own)
        for ev in evs:
            main.wait_event(ev)
        self.buf.barrier()


def _timed(fn, device, iters: int) -> float:
    """The slowest rank's median seconds of fn() over `iters` single timings, after two warm-up calls."""
    return slowest_rank(median_time(fn, device, iters, warmup=2), device)


def comm_sweep(rank: int, world: int, backends: Sequence[str] = ("nccl",), sizes: Sequence[int] | None = None,
               kinds: Sequence[str] = COLLECTIVES, dtype: str = "bf16", iters: int = 10,
               with_gemm: bool = False, gemm: tuple[int, int, int] = (8192, 8192, 8192)) -> dict:
    """Every collective x backend x size on this rank; rank 0's dict holds rows, c3 rows and errors."""
    torch = require_torch()
    from c3kit.runtime.bench.c3 import classify, fraction_of_ideal
    from c3kit.runtime.comm import Comm

    dist = torch.distributed
    cuda = torch.cuda.is_available() and "nccl" in str(dist.get_backend()).lower()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    tdt = torch_dtype(dtype) if cuda or dtype == "fp32" else torch.float32
    sizes = list(sizes or default_sizes())
    rows, c3rows, errors = [], [], []
    for backend in backends:
        try:
            group = _group_for(backend, dist)
            comm = Comm(group, "copy-engine" if backend == "copy-engine" else ("nccl" if cuda else "gloo"))
        except Exception as e:  # noqa: BLE001 - a backend this machine lacks is reported, not fatal
            errors.append(f"{backend}: {type(e).__name__}: {e}")
            continue
        for kind in kinds:
            if backend == "copy-engine" and kind not in CE_COLLECTIVES:
                continue
            for s in sizes:
                try:
                    op = _Op(kind, backend, s, tdt, device, comm, group)
                    t = _timed(op.launch, device, iters)
                    algbw = op.nbytes / t
                    rows.append([kind, backend, world, op.nbytes, op.count, dtype, t, algbw,
                                 algbw * busbw_factor(kind, world)])
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{backend} {kind} {s} B: {type(e).__name__}: {str(e)[:200]}")
                    break
            if with_gemm and cuda:
                try:
                    c3rows += _with_gemm(kind, backend, world, comm, group, device, tdt, gemm, iters,
                                         classify, fraction_of_ideal)
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{backend} {kind} with GEMM: {type(e).__name__}: {str(e)[:200]}")
    dma_rows = []
    if "copy-engine" in backends:
        try:
            dma_rows = single_copies(Comm(None, "copy-engine"), device, sizes, iters)
        except Exception as e:  # noqa: BLE001
            errors.append(f"single copies: {type(e).__name__}: {str(e)[:200]}")
    return {"rank": rank, "rows": rows, "c3_rows": c3rows, "dma_rows": dma_rows, "errors": errors}


DMA_COLUMNS = ["bytes", "seconds", "ranks"]


def single_copies(comm, device, sizes: Sequence[int], iters: int) -> list[list]:
    """Seconds of one contiguous copy_ of S bytes pulled from the next rank's symmetric buffer (one copy
    engine command), slowest rank's median; rows (bytes, seconds, ranks) for cost.dma's fit."""
    torch = require_torch()
    from c3kit.runtime.comm import SymmBuffer
    from c3kit.runtime.ops import _current_stream, _pull, _side_streams

    world, r = comm.world, comm.rank
    top = max(sizes)
    buf = SymmBuffer.get(comm, top, device)
    dst = torch.empty(top, dtype=torch.uint8, device=device)
    buf.view(r, (top,), torch.uint8).fill_(r + 1)
    buf.barrier()
    side = _side_streams(torch, device)[0]
    rows = []
    for s in sizes:
        peer = (r + 1) % world

        def one():
            main = _current_stream(torch, device)
            ev = _pull(torch, side, main, dst[:s], buf.view(peer, (s,), torch.uint8))
            if ev is not None:
                main.wait_event(ev)

        t = _timed(one, device, iters)
        rows.append([int(s), t, world])
    buf.barrier()
    return rows


def _with_gemm(kind, backend, world, comm, group, device, dtype, gemm, iters, classify, fraction_of_ideal):
    """The collective concurrent with a GEMM on a second stream, sized for comm/comp ratios 0.5, 1, 2."""
    torch = require_torch()
    m, n, k = gemm
    a = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(k, n, dtype=dtype, device=device)
    c = torch.empty(m, n, dtype=dtype, device=device)
    gs = torch.cuda.Stream(device)
    t_comp = _timed(lambda: torch.mm(a, b, out=c), device, iters)
    probe = _Op(kind, backend, 64 << 20, dtype, device, comm, group)
    bw = probe.nbytes / _timed(probe.launch, device, iters)
    out = []
    for ratio in (0.5, 1.0, 2.0):
        op = _Op(kind, backend, int(ratio * t_comp * bw), dtype, device, comm, group)
        t_comm = _timed(op.launch, device, iters)

        def both():
            main = torch.cuda.current_stream(device)
            gs.wait_stream(main)
            with torch.cuda.stream(gs):
                torch.mm(a, b, out=c)
            op.launch()
            main.wait_stream(gs)

        t_conc = _timed(both, device, iters)
        s_i, s_r, frac = fraction_of_ideal(t_comp, t_comm, t_conc)
        out.append([kind, backend, world, op.nbytes, "gemm", m, n, k, t_comp, t_comm, t_conc, t_comp + t_comm,
                    max(t_comp, t_comm), s_i, s_r, frac, classify(t_comp, t_comm)])
    return out
