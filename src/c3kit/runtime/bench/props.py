"""Device properties for the record: SMs, L2, clocks, copy engines, driver, torch and CUDA versions."""

from __future__ import annotations

import platform
import subprocess

from c3kit.runtime._torch import require_torch


def _smi(query: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip() if out.returncode == 0 else f"nvidia-smi failed: {out.stderr.strip()[:200]}"
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi not usable: {e}"


def device_properties(index: int = 0) -> dict:
    """A dict of what torch, CuPy and nvidia-smi report about GPU `index` (each source optional)."""
    torch = require_torch()
    d: dict = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
               "cuda_available": torch.cuda.is_available()}
    try:
        import triton

        d["triton"] = triton.__version__
    except ImportError:
        d["triton"] = "not installed"
    if not torch.cuda.is_available():
        return d
    p = torch.cuda.get_device_properties(index)
    d["torch_props"] = {k: (v if isinstance(v, (int, float, str, bool)) else str(v))
                        for k in dir(p) if not k.startswith("_") for v in [getattr(p, k)] if not callable(v)}
    d["device_count"] = torch.cuda.device_count()
    d["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "unknown"
    d["stream_priority_range"] = list(torch.cuda.Stream.priority_range()) if hasattr(torch.cuda.Stream, "priority_range") else "unknown"
    try:
        from torch.cuda import green_contexts

        d["green_contexts_supported"] = bool(getattr(green_contexts, "SUPPORTED", True))
    except ImportError:
        d["green_contexts_supported"] = False
    try:
        import cupy

        cp = cupy.cuda.runtime.getDeviceProperties(index)
        keep = ("name", "multiProcessorCount", "asyncEngineCount", "l2CacheSize", "clockRate", "memoryClockRate",
                "memoryBusWidth", "totalGlobalMem", "sharedMemPerMultiprocessor", "maxThreadsPerMultiProcessor",
                "concurrentKernels", "major", "minor", "persistingL2CacheMaxSize", "pciBusID")
        d["cupy_props"] = {k: (cp[k].decode() if isinstance(cp.get(k), bytes) else cp.get(k)) for k in keep if k in cp}
        d["cupy"] = cupy.__version__
        d["cuda_driver_version"] = cupy.cuda.runtime.driverGetVersion()
        d["cuda_runtime_version"] = cupy.cuda.runtime.runtimeGetVersion()
    except Exception as e:  # noqa: BLE001 - cupy is optional
        d["cupy_props"] = f"not available: {type(e).__name__}: {e}"
    d["nvidia_smi"] = _smi("name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,"
                           "temperature.gpu,memory.total,pcie.link.gen.current,pcie.link.width.current")
    return d
