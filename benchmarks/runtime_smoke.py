"""One-GPU smoke run of c3kit.runtime (a single rank): ops vs fp64 references over NCCL, symmetric-memory
buffers for the copy-engine backend, and whether PyTorch's fused symm_mem ops are there.

Usage: PYTHONPATH=src python3 benchmarks/runtime_smoke.py --out smoke.json
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="runtime-smoke.json")
    args = ap.parse_args()
    import torch

    from c3kit.runtime import selftest
    from c3kit.runtime.comm import Comm, SymmBuffer
    from c3kit.runtime.launch import free_port, init_group

    report: dict = {"torch": torch.__version__}
    try:
        init_group(0, 1, "nccl", free_port(), timeout_s=60)
        report["ops_nccl"] = selftest.check_ops(0, 1, device="cuda", comm="nccl", cases=2, max_dim=256)
        report["ops_copy_engine"] = selftest.check_ops(0, 1, device="cuda", comm="copy-engine", cases=1, max_dim=256)
    except Exception as e:  # noqa: BLE001
        report["ops_error"] = traceback.format_exc()[-2000:]
    try:
        c = Comm(None, "copy-engine")
        buf = SymmBuffer.get(c, 64 << 20, torch.device("cuda", 0))
        src = torch.randn(1 << 20, device="cuda")
        peer = buf.view(0, (1 << 20,), torch.float32)
        peer.copy_(src)
        buf.barrier()
        dst = torch.empty_like(src)
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            dst.copy_(peer, non_blocking=True)
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if "CUDA" in str(getattr(e, "device_type", ""))})
        report["symm_mem"] = {"ok": bool(torch.equal(dst, src)), "pull_events": names}
    except Exception:  # noqa: BLE001
        report["symm_mem_error"] = traceback.format_exc()[-2000:]
    report["fused_ops"] = {n: hasattr(torch.ops.symm_mem, n) for n in ("fused_all_gather_matmul",
                                                                        "fused_matmul_reduce_scatter")}
    print(json.dumps({k: (v if k not in ("ops_nccl", "ops_copy_engine") else
                          {"checks": v["checks"], "failures": v["failures"][:5]}) for k, v in report.items()},
                     indent=1, default=str))
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1, default=str)
    try:
        torch.distributed.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
