"""Checks of the runtime ops against fp64 references, run on every rank (CPU tests with gloo, GPU smoke runs).

Every rank draws the same random shapes and every rank's inputs from one seed, so each can compute
the reference locally and use its own slice as input.
"""

from __future__ import annotations

import time as _time

from c3kit.errors import RuntimeSetupError
from c3kit.runtime._torch import require_torch, torch_dtype
from c3kit.runtime.comm import CommTimeoutError

# ||out - ref|| / ||ref|| bounds by dtype (METHOD.md: fp32 far under 1e-3; bf16 1e-3..1e-2).
TOLERANCE = {"fp32": 1e-5, "fp16": 5e-3, "bf16": 2e-2}


def rel_error(out, ref) -> float:
    """Relative Frobenius error of out against ref (NaN counts as failure: returns inf)."""
    torch = require_torch()
    o, r = out.double().cpu(), ref.double().cpu()
    if not torch.isfinite(o).all():
        return float("inf")
    den = float(r.norm()) or 1.0
    return float((o - r).norm()) / den


def check_ops(rank: int, world: int, device: str = "cpu", comm: str = "gloo", cases: int = 3, seed: int = 0,
              dtypes=("fp32", "bf16", "fp16"), schedules=("serial", "ring", "ficco", "auto"), max_dim: int = 48) -> dict:
    """Run every op x schedule x dtype on random shapes; return counts, failures and worst errors."""
    torch = require_torch()
    from c3kit.runtime import ops

    dev = torch.device(device if device != "cuda" else f"cuda:{torch.cuda.current_device()}")
    g = torch.Generator().manual_seed(seed)

    def rint(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    failures, checks, worst = [], 0, {}
    for case in range(cases):
        for dt in dtypes:
            tdt = torch_dtype(dt)
            tol = TOLERANCE[dt]
            # all-gather + GEMM: m rows per rank (a multiple of world so that ficco's pieces divide)
            m, k, n = world * rint(1, max(1, max_dim // (world * 2))), rint(1, max_dim), rint(1, max_dim)
            shards = [torch.randn(m, k, generator=g).to(tdt) for _ in range(world)]
            w = torch.randn(k, n, generator=g).to(tdt)
            ref = ops.reference_all_gather_matmul(shards, w)
            big_m = world * world * rint(1, max(1, max_dim // (world * world)))
            kl = rint(1, max_dim)
            xs = [torch.randn(big_m, kl, generator=g).to(tdt) for _ in range(world)]
            ws = [torch.randn(kl, n, generator=g).to(tdt) for _ in range(world)]
            ref_rs = ops.reference_matmul_reduce_scatter(xs, ws, rank)
            experts = rint(1, 2)
            counts = [[[rint(0, 5) for _ in range(experts)] for _ in range(world)] for _ in range(world)]
            xm = [torch.randn(sum(map(sum, counts[r])), k, generator=g).to(tdt) for r in range(world)]
            w_all = torch.randn(world * experts, k, n, generator=g).to(tdt)
            ref_moe = ops.reference_moe_all_to_all_gemm(xm[rank], w_all, counts[rank], rank, experts)
            for sched in schedules:
                runs = {
                    "all_gather_matmul": (lambda: ops.all_gather_matmul(shards[rank].to(dev), w.to(dev), schedule=sched,
                                                                        comm=comm), ref),
                    "matmul_reduce_scatter": (lambda: ops.matmul_reduce_scatter(xs[rank].to(dev), ws[rank].to(dev),
                                                                                schedule=sched, comm=comm), ref_rs),
                    "moe_all_to_all_gemm": (lambda: ops.moe_all_to_all_gemm(
                        xm[rank].to(dev), w_all[rank * experts:(rank + 1) * experts].to(dev), counts[rank],
                        schedule=sched, comm=comm), ref_moe),
                }
                for name, (fn, want) in runs.items():
                    checks += 1
                    try:
                        out = fn()
                        err = rel_error(out, want) if tuple(out.shape) == tuple(want.shape) else float("inf")
                    except Exception as e:  # noqa: BLE001 - reported to the caller
                        failures.append({"op": name, "schedule": sched, "dtype": dt, "case": case,
                                         "error": f"{type(e).__name__}: {e}"})
                        continue
                    key = f"{name}/{sched}/{dt}"
                    worst[key] = max(worst.get(key, 0.0), err)
                    if not err <= tol:
                        failures.append({"op": name, "schedule": sched, "dtype": dt, "case": case, "rel_error": err,
                                         "tolerance": tol, "shape": str(tuple(want.shape))})
    return {"rank": rank, "checks": checks, "failures": failures, "worst": worst}


def check_errors(rank: int, world: int, comm: str = "gloo") -> list[str]:
    """Shapes that do not divide must raise RuntimeSetupError (on every rank, before any communication)."""
    torch = require_torch()
    from c3kit.runtime import ops

    bad = []
    cases = {
        "rs rows not dividing": lambda: ops.matmul_reduce_scatter(torch.randn(world * 3 + 1, 4), torch.randn(4, 5),
                                                                  comm=comm),
        "ficco rows not dividing": lambda: ops.all_gather_matmul(torch.randn(world + 1, 4), torch.randn(4, 5),
                                                                 schedule="ficco", comm=comm),
        "inner sizes": lambda: ops.all_gather_matmul(torch.randn(4, 3), torch.randn(4, 5), comm=comm),
        "dtype mix": lambda: ops.all_gather_matmul(torch.randn(4, 4), torch.randn(4, 5).half(), comm=comm),
        "unknown schedule": lambda: ops.all_gather_matmul(torch.randn(4, 4), torch.randn(4, 5), schedule="x", comm=comm),
        "moe counts": lambda: ops.moe_all_to_all_gemm(torch.randn(5, 4), torch.randn(1, 4, 3), counts=[[1]] * world,
                                                      comm=comm),
        "moe splits": lambda: ops.moe_all_to_all_gemm(torch.randn(world, 4), torch.randn(1, 4, 3), schedule="ficco",
                                                      splits=-1, comm=comm),
        "gloo on cuda / nccl on cpu": lambda: ops.all_gather_matmul(torch.randn(4, 4), torch.randn(4, 5), comm="nccl"),
    }
    for name, fn in cases.items():
        try:
            fn()
            bad.append(f"{name}: no error raised")
        except RuntimeSetupError:
            pass
        except Exception as e:  # noqa: BLE001
            bad.append(f"{name}: {type(e).__name__} instead of RuntimeSetupError: {e}")
    return bad


def hung_peer(rank: int, world: int, hang_s: float = 6.0) -> dict:
    """Rank 0 runs all_gather_matmul while the last rank never joins; rank 0 must get CommTimeoutError."""
    torch = require_torch()
    from c3kit.runtime import ops

    if rank == world - 1:
        _time.sleep(hang_s)
        return {"rank": rank, "hung": True}
    t0 = _time.perf_counter()
    try:
        ops.all_gather_matmul(torch.randn(4, 3), torch.randn(3, 2), schedule="serial", comm="gloo")
        outcome = "returned"
    except CommTimeoutError as e:
        outcome = f"CommTimeoutError: {str(e)[:120]}"
    except Exception as e:  # noqa: BLE001
        outcome = f"{type(e).__name__}: {str(e)[:200]}"
    return {"rank": rank, "outcome": outcome, "elapsed_s": _time.perf_counter() - t0}


def check_ce_collectives(rank: int, world: int, nbytes: int = 6000) -> list[str]:
    """`bench comm`'s copy-engine all-gather and all-to-all give the same bytes as gloo's (host emulation)."""
    torch = require_torch()
    from c3kit.runtime.bench import comm
    from c3kit.runtime.comm import Comm

    bad = []
    for kind in comm.CE_COLLECTIVES:
        ce = comm._Op(kind, "copy-engine", nbytes, torch.float32, torch.device("cpu"), Comm(None, "copy-engine"), None)
        ref = comm._Op(kind, "gloo", nbytes, torch.float32, torch.device("cpu"), Comm(None, "gloo"), None)
        ce.launch()
        ref.launch()
        if not torch.equal(ce.out, ref.out):
            bad.append(kind)
    return bad
