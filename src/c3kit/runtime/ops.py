"""Overlapped collective-matmul ops: all-gather + GEMM, GEMM + reduce-scatter, MoE all-to-all + grouped GEMM.

Every op runs in one of the schedules of c3kit.runtime.schedules over one comm backend:
- "nccl" / "gloo": torch.distributed collectives (serial, ficco) and P2P send/recv (ring);
- "copy-engine": every rank exposes its data in a symmetric-memory buffer; peers pull with contiguous
  copy_ on side streams (CUDA memcpy, so the copy engines move the data, not SM kernels), and
  device-side barriers order the steps.
The ops agree with the serial schedule (the unoverlapped reference) up to rounding: reductions of
partial sums are accumulated in fp32.
"""

from __future__ import annotations

from c3kit.errors import RuntimeSetupError
from c3kit.runtime._torch import dtype_name, require_torch
from c3kit.runtime.comm import Comm, SymmBuffer, host_emulation, wait
from c3kit.runtime.schedules import check_backend, check_schedule, resolve_schedule

SIDE_STREAMS = 2  # copy-engine pulls alternate over this many streams, so that several engines work at once
REGION_ALIGN = 256  # bytes: the regions of the MoE copy-engine buffer start at multiples of this
_streams: dict = {}


# ---------------------------------------------------------------------------------------------- checks

def _check_tensors(op: str, x, w, w_dims: int = 2):
    torch = require_torch()
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor):
        raise RuntimeSetupError(f"{op}: x and w must be torch tensors")
    if x.dim() != 2 or w.dim() != w_dims:
        raise RuntimeSetupError(f"{op}: x must be 2-D and w {w_dims}-D, got x {tuple(x.shape)} and w {tuple(w.shape)}")
    if x.dtype != w.dtype:
        raise RuntimeSetupError(f"{op}: x is {dtype_name(x.dtype)} but w is {dtype_name(w.dtype)}: use one dtype")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise RuntimeSetupError(f"{op}: dtype {dtype_name(x.dtype)} is not supported: use bf16, fp16 or fp32")
    if x.device != w.device:
        raise RuntimeSetupError(f"{op}: x is on {x.device} but w on {w.device}")
    if x.shape[1] != w.shape[-2]:
        raise RuntimeSetupError(f"{op}: inner sizes differ: x is {tuple(x.shape)}, w is {tuple(w.shape)} "
                                f"(x's columns must equal w's rows)")
    return torch


def _comm(group, comm: str | None, x) -> Comm:
    if comm is None:
        comm = "nccl" if x.device.type == "cuda" else "gloo"
    check_backend(comm)
    if comm == "gloo" and x.device.type != "cpu":
        raise RuntimeSetupError("comm='gloo' runs on CPU tensors; use comm='nccl' or 'copy-engine' on CUDA")
    if comm == "copy-engine" and x.device.type == "cpu" and host_emulation():
        return Comm(group, comm)
    if comm in ("nccl", "copy-engine") and x.device.type != "cuda":
        raise RuntimeSetupError(f"comm={comm!r} needs CUDA tensors; on the CPU use comm='gloo'")
    return Comm(group, comm)


def _pieces(op: str, rows: int, splits: int, what: str) -> int:
    if splits < 1:
        raise RuntimeSetupError(f"{op}: splits must be >= 1, got {splits}")
    if rows % splits:
        raise RuntimeSetupError(f"{op}: {what} = {rows} rows do not divide into splits = {splits} pieces "
                                f"(FiCCO schedule); pass splits= that divides {rows}, or schedule='ring'")
    return rows // splits


def _dense_inputs(op: str, x, w, group, comm: str | None):
    """torch, the Comm and x made contiguous, after the checks of a dense op (x and w 2-D)."""
    torch = _check_tensors(op, x, w)
    return torch, _comm(group, comm, x), x.contiguous()


def _dense_schedule(op: str, schedule: str, splits: int | None, c: Comm, x, sizes: tuple[int, int, int],
                    rows: int, what: str) -> tuple[str | None, int]:
    """The concrete schedule and FiCCO piece count of a dense op of global sizes (m, n, k); None on one rank.

    `rows` (named `what` in errors) is what FiCCO splits: "auto" falls back to ring when it does not
    divide, an explicit "ficco" raises.
    """
    sched = resolve_schedule(schedule, op, *sizes, c.world, x.element_size(), c.backend)
    if c.world == 1:
        return None, 1
    nsplit = splits or c.world
    if sched == "ficco" and schedule == "auto" and rows % nsplit:
        sched = "ring"  # auto never fails on a valid shape: FiCCO needs pieces that divide
    if sched == "ficco":
        _pieces(op, rows, nsplit, what)
    return sched, nsplit


class _HostStream:
    """Stands in for a CUDA stream in the host emulation of copy-engine (tests): work runs in order."""

    def wait_stream(self, other) -> None:
        """Nothing to wait for: host work is already ordered."""

    def wait_event(self, event) -> None:
        """Nothing to wait for: host work is already ordered."""


def _current_stream(torch, device):
    return torch.cuda.current_stream(device) if device.type == "cuda" else _HostStream()


def _side_streams(torch, device):
    key = str(device)
    if key not in _streams:
        make = (lambda: torch.cuda.Stream(device)) if device.type == "cuda" else _HostStream
        _streams[key] = [make() for _ in range(SIDE_STREAMS)]
    return _streams[key]


def _pull(torch, stream, main, dst, src):
    """Copy src (a peer's buffer) into dst on a side stream after main's pending work; return the event."""
    if isinstance(stream, _HostStream):
        dst.copy_(src)
        return None
    stream.wait_stream(main)
    with torch.cuda.stream(stream):
        dst.copy_(src, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record(stream)
    return ev


def _acc_dtype(torch, dtype):
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


# ----------------------------------------------------------------------------------- all-gather + GEMM

def all_gather_matmul(x_shard, w, group=None, schedule: str = "serial", comm: str | None = None,
                      splits: int | None = None):
    """all_gather(x_shard, dim 0) @ w on every rank: x_shard [m, k] per rank, w [k, n] -> [world * m, n]."""
    torch, c, x = _dense_inputs("all_gather_matmul", x_shard, w, group, comm)
    (m, k), n, world, r = x.shape, w.shape[1], c.world, c.rank
    sched, nsplit = _dense_schedule("all_gather_matmul", schedule, splits, c, x, (m * world, n, k), m,
                                    "m (rows per rank)")
    out = torch.empty(world * m, n, dtype=x.dtype, device=x.device)
    if sched is None:
        return torch.mm(x, w, out=out)
    if c.backend == "copy-engine":
        return _ag_copy_engine(torch, c, x, w, out, sched, nsplit)
    if sched == "serial":
        gathered = torch.empty(world * m, k, dtype=x.dtype, device=x.device)
        wait(c.all_gather(gathered, x), "all_gather")
        return torch.mm(gathered, w, out=out)
    if sched == "ring":
        recv = {s: torch.empty_like(x) for s in range(1, world)}

        def issue(s):
            return c.exchange(x, (r + s) % world, recv[s], (r - s) % world)

        works = {1: issue(1)}
        torch.mm(x, w, out=out[r * m:(r + 1) * m])
        for s in range(1, world):
            if s + 1 < world:
                works[s + 1] = issue(s + 1)  # the next shard moves while this one is multiplied
            wait(works.pop(s), "ring step")
            src = (r - s) % world
            torch.mm(recv[s], w, out=out[src * m:(src + 1) * m])
        return out
    # ficco: step j gathers piece j of every rank's shard (one all-gather over all links), then its GEMM
    p = m // nsplit
    stage = [torch.empty(world * p, k, dtype=x.dtype, device=x.device) for _ in range(nsplit)]
    ov = out.view(world, m, n)
    works = {0: c.all_gather(stage[0], x[:p])}
    for j in range(nsplit):
        if j + 1 < nsplit:
            works[j + 1] = c.all_gather(stage[j + 1], x[(j + 1) * p:(j + 2) * p])
        wait(works.pop(j), "ficco step")
        ov[:, j * p:(j + 1) * p].copy_(torch.mm(stage[j], w).view(world, p, n))
    return out


def _ag_copy_engine(torch, c: Comm, x, w, out, sched: str, nsplit: int):
    m, k = x.shape
    n = w.shape[1]
    world, r = c.world, c.rank
    buf = SymmBuffer.get(c, m * k * x.element_size(), x.device)
    buf.view(r, (m, k), x.dtype).copy_(x)
    main = _current_stream(torch, x.device)
    buf.barrier()  # every rank's shard is in its buffer
    side = _side_streams(torch, x.device)
    if sched == "serial":
        gathered = torch.empty(world * m, k, dtype=x.dtype, device=x.device)
        gathered[r * m:(r + 1) * m].copy_(x)
        evs = [_pull(torch, side[i % len(side)], main, gathered[p * m:(p + 1) * m], buf.view(p, (m, k), x.dtype))
               for i, p in enumerate((r + s) % world for s in range(1, world))]
        for ev in evs:
            main.wait_event(ev)
        torch.mm(gathered, w, out=out)
    elif sched == "ring":
        gathered = torch.empty(world * m, k, dtype=x.dtype, device=x.device)
        evs = {}
        for s in range(1, world):
            p = (r + s) % world
            evs[s] = _pull(torch, side[s % len(side)], main, gathered[p * m:(p + 1) * m], buf.view(p, (m, k), x.dtype))
        torch.mm(x, w, out=out[r * m:(r + 1) * m])
        for s in range(1, world):
            p = (r + s) % world
            main.wait_event(evs[s])
            torch.mm(gathered[p * m:(p + 1) * m], w, out=out[p * m:(p + 1) * m])
    else:
        pc = m // nsplit
        ov = out.view(world, m, n)
        stage = [torch.empty(world * pc, k, dtype=x.dtype, device=x.device) for _ in range(nsplit)]
        evs: dict = {}
        for j in range(nsplit):
            stage[j][r * pc:(r + 1) * pc].copy_(x[j * pc:(j + 1) * pc])
            evs[j] = [_pull(torch, side[(j + s) % len(side)], main, stage[j][p * pc:(p + 1) * pc],
                            buf.view(p, (pc, k), x.dtype, j * pc * k))
                      for s in range(1, world) for p in [(r + s) % world]]
        for j in range(nsplit):
            for ev in evs[j]:
                main.wait_event(ev)
            ov[:, j * pc:(j + 1) * pc].copy_(torch.mm(stage[j], w).view(world, pc, n))
    buf.barrier()  # no rank rewrites its buffer before every peer has pulled from it
    return out


# ------------------------------------------------------------------------------- GEMM + reduce-scatter

def matmul_reduce_scatter(x, w, group=None, schedule: str = "serial", comm: str | None = None,
                          splits: int | None = None):
    """reduce_scatter(x @ w, sum, dim 0): x [M, k_local], w [k_local, n] per rank -> [M / world, n]."""
    torch, c, x = _dense_inputs("matmul_reduce_scatter", x, w, group, comm)
    (big_m, k), n, world, r = x.shape, w.shape[1], c.world, c.rank
    if big_m % world:
        raise RuntimeSetupError(f"matmul_reduce_scatter: M = {big_m} rows do not divide over {world} ranks; "
                                f"pad M to a multiple of {world}")
    mloc = big_m // world
    sched, nsplit = _dense_schedule("matmul_reduce_scatter", schedule, splits, c, x, (big_m, n, k * world), mloc,
                                    "M / world (rows per rank)")
    out = torch.empty(mloc, n, dtype=x.dtype, device=x.device)
    if sched is None:
        return torch.mm(x, w, out=out)
    if c.backend == "copy-engine":
        return _rs_copy_engine(torch, c, x, w, out, sched, nsplit)
    acc = _acc_dtype(torch, x.dtype)
    if sched == "serial":
        wait(c.reduce_scatter(out, torch.mm(x, w)), "reduce_scatter")
        return out
    if sched == "ring":
        recv = {s: torch.empty(mloc, n, dtype=x.dtype, device=x.device) for s in range(1, world)}
        works, parts = [], []
        for s in range(1, world):
            d = (r + s) % world
            parts.append(torch.mm(x[d * mloc:(d + 1) * mloc], w))  # overlaps the previous step's send/recv
            works.append(c.exchange(parts[-1], d, recv[s], (r - s) % world))
        total = torch.mm(x[r * mloc:(r + 1) * mloc], w).to(acc)
        for s in range(1, world):
            wait(works[s - 1], "ring step")
            total += recv[s].to(acc)
        return out.copy_(total)
    p = mloc // nsplit
    xv = x.view(world, mloc, k)
    works = []
    ys = []
    for j in range(nsplit):
        ys.append(torch.matmul(xv[:, j * p:(j + 1) * p], w).reshape(world * p, n))
        works.append(c.reduce_scatter(out[j * p:(j + 1) * p], ys[-1]))  # piece j reduces while j+1 multiplies
    wait(works, "ficco step")
    return out


def _rs_copy_engine(torch, c: Comm, x, w, out, sched: str, nsplit: int):
    big_m, k = x.shape
    n = w.shape[1]
    world, r = c.world, c.rank
    mloc = big_m // world
    acc = _acc_dtype(torch, x.dtype)
    buf = SymmBuffer.get(c, big_m * n * x.element_size(), x.device)
    main = _current_stream(torch, x.device)
    side = _side_streams(torch, x.device)
    recv = torch.empty(world, mloc, n, dtype=x.dtype, device=x.device)
    evs = []
    if sched in ("serial", "ring"):
        # slot d of my buffer holds my partial sum for rank d's rows
        if sched == "serial":
            torch.mm(x, w, out=buf.view(r, (big_m, n), x.dtype))
            buf.barrier()
        for s in range(1, world):
            d = (r + s) % world
            if sched == "ring":
                torch.mm(x[d * mloc:(d + 1) * mloc], w, out=buf.view(r, (mloc, n), x.dtype, d * mloc * n))
                buf.barrier()  # every rank has written its step-s slot
            p = (r - s) % world
            evs.append(_pull(torch, side[s % len(side)], main, recv[p], buf.view(p, (mloc, n), x.dtype, r * mloc * n)))
        if sched == "serial":
            total = buf.view(r, (mloc, n), x.dtype, r * mloc * n).to(acc, copy=True)
        else:
            total = torch.mm(x[r * mloc:(r + 1) * mloc], w).to(acc)
        for ev in evs:
            main.wait_event(ev)
        for p in range(world):
            if p != r:
                total += recv[p].to(acc)
        out.copy_(total)
    else:
        pc = mloc // nsplit
        xv = x.view(world, mloc, k)
        recv = torch.empty(nsplit, world, pc, n, dtype=x.dtype, device=x.device)
        for j in range(nsplit):
            region = buf.view(r, (world, pc, n), x.dtype, j * world * pc * n)
            region.copy_(torch.matmul(xv[:, j * pc:(j + 1) * pc], w))
            buf.barrier()
            for s in range(1, world):
                p = (r + s) % world
                evs.append(_pull(torch, side[(j + s) % len(side)], main, recv[j, p],
                                 buf.view(p, (pc, n), x.dtype, (j * world + r) * pc * n)))
            recv[j, r].copy_(region[r])
        for ev in evs:
            main.wait_event(ev)
        out.copy_(recv.to(acc).sum(dim=1).reshape(mloc, n))
    buf.barrier()
    return out


# ------------------------------------------------------------------- MoE all-to-all + grouped GEMM

def _counts(torch, counts, world: int, experts: int, rows: int):
    if counts is None:
        if rows % (world * experts):
            raise RuntimeSetupError(f"moe_all_to_all_gemm: T = {rows} tokens do not split evenly over {world} ranks "
                                    f"x {experts} experts; pass counts= (rows per destination rank and expert)")
        return [[rows // (world * experts)] * experts for _ in range(world)]
    cl = counts.tolist() if hasattr(counts, "tolist") else [list(r) for r in counts]
    if len(cl) != world or any(len(row) != experts for row in cl):
        raise RuntimeSetupError(f"moe_all_to_all_gemm: counts must be {world} x {experts} (ranks x local experts)")
    if any(int(v) < 0 for row in cl for v in row) or sum(int(v) for row in cl for v in row) != rows:
        raise RuntimeSetupError(f"moe_all_to_all_gemm: counts must be >= 0 and sum to the {rows} rows of x")
    return [[int(v) for v in row] for row in cl]


def grouped_gemm(rows, w, seg_counts, out=None):
    """Rows ordered as blocks, each block ordered by local expert with seg_counts[b][e] rows, times w[e].

    Writes into `out` ([rows, n]; e.g. a view of a symmetric buffer) when given; returns it.
    """
    torch = require_torch()
    if out is None:
        out = torch.empty(rows.shape[0], w.shape[2], dtype=rows.dtype, device=rows.device)
    experts = w.shape[0]
    if len(seg_counts) == 1:
        start = 0
        for e in range(experts):
            c = seg_counts[0][e]
            if c:
                torch.mm(rows[start:start + c], w[e], out=out[start:start + c])
            start += c
        return out
    # several blocks: one GEMM per expert over its rows from every block (gather, multiply, scatter back)
    idx = [[] for _ in range(experts)]
    start = 0
    for block in seg_counts:
        for e in range(experts):
            idx[e].append((start, start + block[e]))
            start += block[e]
    for e in range(experts):
        ix = torch.cat([torch.arange(a, b, device=rows.device) for a, b in idx[e]]) if idx[e] else None
        if ix is not None and ix.numel():
            out.index_copy_(0, ix, torch.mm(rows.index_select(0, ix), w[e]))
    return out


def _piece_bounds(c: int, j: int, nsplit: int) -> tuple[int, int]:
    return c * j // nsplit, c * (j + 1) // nsplit


def _piece_counts(block: list[int], lo: int, hi: int) -> list[int]:
    out, start = [], 0
    for c in block:
        a, b = max(start, lo), min(start + c, hi)
        out.append(max(0, b - a))
        start += c
    return out


def moe_all_to_all_gemm(x, w, counts=None, group=None, schedule: str = "serial", comm: str | None = None,
                        splits: int | None = None):
    """MoE layer: dispatch rows of x to expert ranks (all-to-all), grouped GEMM with w [E, k, n], combine back.

    x [T, k] holds this rank's rows ordered by destination rank, then by that rank's local expert;
    counts [world][E] gives the rows per (destination, expert) (default: T split evenly).
    Returns [T, n] in x's row order.
    """
    torch = _check_tensors("moe_all_to_all_gemm", x, w, w_dims=3)
    c = _comm(group, comm, x)
    world, r = c.world, c.rank
    t_rows, k = x.shape
    experts, n = w.shape[0], w.shape[2]
    cnt = _counts(torch, counts, world, experts, t_rows)
    check_schedule(schedule)
    nsplit = splits or world
    if schedule in ("ficco", "auto") and nsplit < 1:
        raise RuntimeSetupError(f"moe_all_to_all_gemm: splits must be >= 1, got {nsplit}")
    x = x.contiguous()
    total_rows = t_rows * world
    if world > 1 and c.backend == "copy-engine":
        # every rank learns every rank's counts (and so every buffer's layout) from the symmetric buffers
        allc, buf = _moe_exchange_counts(torch, c, cnt, x.device)
        total_rows = max(sum(map(sum, allc[p])) for p in range(world)) * world
    elif schedule == "auto" and world > 1:
        # Ranks route different token counts: agree on one size so that every rank picks the same schedule.
        t_max = torch.tensor([t_rows], dtype=torch.int64, device=x.device)
        wait(c.all_reduce(t_max, "max"), "moe auto size")
        total_rows = int(t_max.item()) * world
    sched = resolve_schedule(schedule, "moe", total_rows, n, k, world, x.element_size(), c.backend,
                             experts=experts * world)
    if world == 1:
        return grouped_gemm(x, w, cnt)
    if c.backend == "copy-engine":
        return _moe_copy_engine(torch, c, x, w, cnt, allc, buf, sched, nsplit)
    # every rank learns how many rows of each expert it receives from each source
    dev = x.device
    send_c = torch.tensor(cnt, dtype=torch.int64, device=dev)
    recv_c = torch.empty_like(send_c)
    wait(c.all_to_all(recv_c, send_c), "moe counts all_to_all")
    rcnt = recv_c.tolist()
    send_rows = [sum(row) for row in cnt]
    recv_rows = [sum(row) for row in rcnt]
    send_off = [sum(send_rows[:d]) for d in range(world)]
    y = torch.empty(t_rows, n, dtype=x.dtype, device=dev)
    if sched == "serial":
        recv = torch.empty(sum(recv_rows), k, dtype=x.dtype, device=dev)
        wait(c.all_to_all(recv, x, recv_rows, send_rows), "moe dispatch")
        h = grouped_gemm(recv, w, rcnt)
        wait(c.all_to_all(y, h, send_rows, recv_rows), "moe combine")
        return y
    if sched == "ring":
        blocks = {s: torch.empty(recv_rows[(r - s) % world], k, dtype=x.dtype, device=dev) for s in range(1, world)}

        def dispatch(s):
            d, src = (r + s) % world, (r - s) % world
            send = x[send_off[d]:send_off[d] + send_rows[d]] if send_rows[d] else None
            recv = blocks[s] if recv_rows[src] else None
            return c.exchange(send, d, recv, src)

        works = {1: dispatch(1)}
        y[send_off[r]:send_off[r] + send_rows[r]] = grouped_gemm(x[send_off[r]:send_off[r] + send_rows[r]], w, [cnt[r]])
        combines, keep = [], []
        for s in range(1, world):
            if s + 1 < world:
                works[s + 1] = dispatch(s + 1)
            wait(works.pop(s), "moe ring dispatch")
            d, src = (r + s) % world, (r - s) % world
            h = grouped_gemm(blocks[s], w, [rcnt[src]])
            keep.append(h)
            mine = y[send_off[d]:send_off[d] + send_rows[d]]
            combines.append(c.exchange(h if recv_rows[src] else None, src, mine if send_rows[d] else None, d))
        wait(combines, "moe ring combine")
        return y
    # ficco: step j moves piece j of every (source, destination) block in one all-to-all, then its GEMM
    steps = []
    for j in range(nsplit):
        sb = [_piece_bounds(send_rows[d], j, nsplit) for d in range(world)]
        rb = [_piece_bounds(recv_rows[s], j, nsplit) for s in range(world)]
        send = torch.cat([x[send_off[d] + a:send_off[d] + b] for d, (a, b) in enumerate(sb)])
        recv = torch.empty(sum(b - a for a, b in rb), k, dtype=x.dtype, device=dev)
        steps.append((sb, rb, send, recv))
    works = {0: c.all_to_all(steps[0][3], steps[0][2], [b - a for a, b in steps[0][1]], [b - a for a, b in steps[0][0]])}
    combines = []
    for j in range(nsplit):
        sb, rb, send, recv = steps[j]
        if j + 1 < nsplit:
            nsb, nrb, nsend, nrecv = steps[j + 1]
            works[j + 1] = c.all_to_all(nrecv, nsend, [b - a for a, b in nrb], [b - a for a, b in nsb])
        wait(works.pop(j), "moe ficco dispatch")
        pcs = [_piece_counts(rcnt[s], a, b) for s, (a, b) in enumerate(rb)]
        h = grouped_gemm(recv, w, pcs)
        back = torch.empty(send.shape[0], n, dtype=x.dtype, device=dev)
        combines.append((c.all_to_all(back, h, [b - a for a, b in sb], [b - a for a, b in rb]), back, sb, h))
    for work, back, sb, _h in combines:
        wait(work, "moe ficco combine")
        start = 0
        for d, (a, b) in enumerate(sb):
            y[send_off[d] + a:send_off[d] + b] = back[start:start + b - a]
            start += b - a
    return y


def _moe_exchange_counts(torch, c: Comm, cnt: list[list[int]], device):
    """Every rank's counts [world][E] through the symmetric buffers: allc[src][dst][e], and the buffer.

    Each rank writes its counts at the start of its buffer; after a barrier every rank copies every
    peer's, so that each knows where its rows sit in every peer's buffer.
    """
    world, experts = c.world, len(cnt[0])
    buf = SymmBuffer.get(c, world * experts * 8, device)
    buf.view(c.rank, (world, experts), torch.int64).copy_(torch.tensor(cnt, dtype=torch.int64))
    buf.barrier()  # every rank's counts are in its buffer
    allc = torch.empty(world, world, experts, dtype=torch.int64, device=device)
    for p in range(world):
        allc[p].copy_(buf.view(p, (world, experts), torch.int64))
    return allc.tolist(), buf  # tolist waits for the copies: no rank moves on before it has read the headers


class _MoELayout:
    """Where every rank's rows sit in every rank's symmetric buffer, from the counts of all ranks.

    The buffer of rank p, offsets in elements of the data dtype: the counts header, then the dispatch
    region (p's x as it is: rows by destination, then by expert), then the combine region (p's
    grouped-GEMM results: by source for serial and ring; by FiCCO step, then source, for ficco); each
    region starts at a multiple of REGION_ALIGN bytes. Every rank computes the same sizes, so every
    rank asks SymmBuffer for the same number of bytes.
    """

    def __init__(self, allc, k: int, n: int, esize: int, nsplit: int) -> None:
        world, experts = len(allc), len(allc[0][0])
        self.world, self.nsplit = world, nsplit
        self.rows = [[sum(allc[s][d]) for d in range(world)] for s in range(world)]  # rows[src][dst]
        sent = [sum(self.rows[p]) for p in range(world)]
        self.got = got = [sum(self.rows[s][p] for s in range(world)) for p in range(world)]
        align = lambda nbytes: -(-nbytes // REGION_ALIGN) * REGION_ALIGN // esize  # noqa: E731 - in elements
        self.dispatch0 = align(world * experts * 8)
        self.combine0 = align((self.dispatch0 + max(sent) * k) * esize)
        self.nbytes = (self.combine0 + max(got) * n) * esize

    def send_off(self, p: int, d: int) -> int:
        """First row of p's block for d in p's x (and dispatch region)."""
        return sum(self.rows[p][:d])

    def recv_off(self, p: int, s: int) -> int:
        """First row of the block from s among the rows p receives (ordered by source)."""
        return sum(self.rows[q][p] for q in range(s))

    def piece(self, s: int, d: int, j: int) -> tuple[int, int]:
        """Rows of FiCCO piece j of the block s sends to d, from the block's start."""
        return _piece_bounds(self.rows[s][d], j, self.nsplit)

    def step_rows(self, p: int, j: int, upto: int | None = None) -> int:
        """Rows p receives in FiCCO step j from the sources below `upto` (all when None)."""
        return sum(b - a for a, b in (self.piece(s, p, j) for s in range(self.world if upto is None else upto)))

    def step_off(self, p: int, j: int, s: int) -> int:
        """First row, in p's ficco combine region, of piece j of the block from s."""
        return sum(self.step_rows(p, i) for i in range(j)) + self.step_rows(p, j, s)


def _moe_copy_engine(torch, c: Comm, x, w, cnt, allc, buf, sched: str, nsplit: int):
    """MoE dispatch -> grouped GEMM -> combine as copy_ pulls from the peers' symmetric buffers."""
    world, r = c.world, c.rank
    k, n = x.shape[1], w.shape[2]
    dt, dev = x.dtype, x.device
    lay = _MoELayout(allc, k, n, x.element_size(), nsplit)
    rows = lay.rows
    rcnt = [allc[s][r] for s in range(world)]  # expert counts of the block from each source
    buf = SymmBuffer.get(c, lay.nbytes, dev)  # the counts' buffer, or a larger one (same size on every rank)
    if x.shape[0]:
        buf.view(r, tuple(x.shape), dt, lay.dispatch0).copy_(x)
    main = _current_stream(torch, dev)
    buf.barrier()  # every rank's rows are in its dispatch region
    side = _side_streams(torch, dev)

    def pull(i, dst, peer, off):
        """Pull dst's shape from peer's buffer at off on side stream i; the event, or None."""
        if not dst.shape[0]:
            return None
        return _pull(torch, side[i % len(side)], main, dst, buf.view(peer, tuple(dst.shape), dt, off))

    def waited(evs):
        for ev in evs:
            if ev is not None:
                main.wait_event(ev)

    def dispatched(p, a=0):  # row a of p's block for r, in p's dispatch region
        return lay.dispatch0 + (lay.send_off(p, r) + a) * k

    def mine(d, a=0, b=None):  # rows a..b of my block for d, in y (x's order)
        o = lay.send_off(r, d)
        return y[o + a:o + (rows[r][d] if b is None else b)]

    def result(p, row):  # row of p's combine region
        return lay.combine0 + row * n

    y = torch.empty(x.shape[0], n, dtype=dt, device=dev)
    own = x[lay.send_off(r, r):lay.send_off(r, r) + rows[r][r]]
    back = []  # events of the combine pulls
    if sched == "serial":
        recv = torch.empty(lay.got[r], k, dtype=dt, device=dev)
        evs = [pull(s, recv[lay.recv_off(r, p):lay.recv_off(r, p) + rows[p][r]], p, dispatched(p))
               for s in range(1, world) for p in [(r + s) % world]]
        recv[lay.recv_off(r, r):lay.recv_off(r, r) + rows[r][r]].copy_(own)
        waited(evs)
        if lay.got[r]:
            grouped_gemm(recv, w, rcnt, out=buf.view(r, (lay.got[r], n), dt, result(r, 0)))
        buf.barrier()  # every rank's results are in its combine region
        for s in range(1, world):
            d = (r + s) % world
            back.append(pull(s, mine(d), d, result(d, lay.recv_off(d, r))))
        if rows[r][r]:
            mine(r).copy_(buf.view(r, (rows[r][r], n), dt, result(r, lay.recv_off(r, r))))
    elif sched == "ring":
        # step s: the block from r - s (pulled ahead) is multiplied into slot r - s of my combine region;
        # after the step's barrier, r + s has done the same with my block and I pull it back
        blocks = {s: torch.empty(rows[(r - s) % world][r], k, dtype=dt, device=dev) for s in range(1, world)}
        evs = {s: pull(s, blocks[s], (r - s) % world, dispatched((r - s) % world)) for s in range(1, world)}
        if rows[r][r]:
            grouped_gemm(own, w, [cnt[r]], out=mine(r))  # my own block while the first pulls run
        for s in range(1, world):
            src, d = (r - s) % world, (r + s) % world
            waited([evs[s]])
            if rows[src][r]:
                grouped_gemm(blocks[s], w, [rcnt[src]],
                             out=buf.view(r, (rows[src][r], n), dt, result(r, lay.recv_off(r, src))))
            buf.barrier()  # every rank has written its step-s results
            back.append(pull(s, mine(d), d, result(d, lay.recv_off(d, r))))
    else:
        # ficco: step j pulls piece j of every peer's block (every step issued ahead), multiplies the stacked
        # pieces into step j's part of my combine region and, after the step's barrier, pulls piece j of my
        # results back from every peer while step j + 1 multiplies
        stages, evs = [], []
        for j in range(nsplit):
            stage = torch.empty(lay.step_rows(r, j), k, dtype=dt, device=dev)
            step_evs = []
            for s in range(world):
                p = (r + s) % world
                a, b = lay.piece(p, r, j)
                at = lay.step_rows(r, j, p)
                if p == r:
                    stage[at:at + b - a].copy_(own[a:b])
                else:
                    step_evs.append(pull(j + s, stage[at:at + b - a], p, dispatched(p, a)))
            stages.append(stage)
            evs.append(step_evs)
        for j in range(nsplit):
            waited(evs[j])
            if stages[j].shape[0]:
                pcs = [_piece_counts(rcnt[s], *lay.piece(s, r, j)) for s in range(world)]
                grouped_gemm(stages[j], w, pcs,
                             out=buf.view(r, (stages[j].shape[0], n), dt, result(r, lay.step_off(r, j, 0))))
            buf.barrier()  # every rank has written its step-j results
            for s in range(1, world):
                d = (r + s) % world
                back.append(pull(j + s, mine(d, *lay.piece(r, d, j)), d, result(d, lay.step_off(d, j, r))))
            a, b = lay.piece(r, r, j)
            if b > a:
                mine(r, a, b).copy_(buf.view(r, (b - a, n), dt, result(r, lay.step_off(r, j, r))))
    waited(back)
    buf.barrier()  # no rank rewrites its buffer before every peer has pulled from it
    return y


# -------------------------------------------------------------------------------------- references

def reference_all_gather_matmul(x_shards, w):
    """What all_gather_matmul must return, from every rank's shard (list) and w, computed in fp64."""
    torch = require_torch()
    return torch.cat([s.double() for s in x_shards]) @ w.double()


def reference_matmul_reduce_scatter(xs, ws, rank: int):
    """What rank `rank` gets from matmul_reduce_scatter, from every rank's x and w (lists), in fp64."""
    total = sum(x.double() @ w.double() for x, w in zip(xs, ws))
    m = total.shape[0] // len(xs)
    return total[rank * m:(rank + 1) * m]


def reference_moe_all_to_all_gemm(x, w_all, counts, rank: int, experts: int):
    """What moe_all_to_all_gemm returns on `rank`: each row block (dest d, expert e) times w_all[d * E + e], fp64."""
    torch = require_torch()
    outs, start = [], 0
    for d, row in enumerate(counts):
        for e, c in enumerate(row):
            outs.append(x[start:start + c].double() @ w_all[d * experts + e].double())
            start += c
    return torch.cat(outs) if outs else x.new_empty(0, w_all.shape[2], dtype=torch.float64)
