"""KV-cache capacity of one replica from the memory model (c3kit.workload.memory), in blocks of tokens.

Like vLLM: a fraction `gpu_memory_utilization` (default 0.9) of each GPU's memory is the budget;
"each GPU's memory" is the total the driver reports (torch.cuda.mem_get_info / NVML, what vLLM and
TensorRT-LLM read), known per GPU in DRIVER_TOTAL_MIB, else the datasheet capacity (hw.hbm_bytes);
the weights and the activation working set of one iteration of `max_batched_tokens` tokens come
off it; what is left holds KV blocks. The KV bytes per token per GPU come from the same memory
report (its KV term for a 16-token sequence / 16), so the cache shape is stated once, in workload/.
"""

from __future__ import annotations

from dataclasses import dataclass

from c3kit.serve.workload import ServeError

# Total memory the driver reports (nvidia-smi memory.total, MiB): more than the datasheet's decimal GB.
DRIVER_TOTAL_MIB = {"H200-SXM": 143771, "H100-SXM": 81559}
DRIVER_TOTAL_SOURCE = ("nvidia-smi memory.total: 143771 MiB on an NVIDIA H200 (SXM, 141 GB datasheet), 81559 MiB on "
                       "an NVIDIA H100 80GB HBM3 (SXM), as printed in public nvidia-smi logs of those boards")


def device_memory_bytes(hw) -> float:
    """Bytes of one GPU's memory as the serving runtime sees it (driver total if known, else the datasheet's)."""
    mib = DRIVER_TOTAL_MIB.get(getattr(hw, "name", ""))
    return float(mib) * 2**20 if mib else float(hw.hbm_bytes)


@dataclass(frozen=True)
class KVCapacity:
    """Bytes per GPU: budget, weights, activations, KV per token; blocks of block_size tokens that fit."""

    budget: float
    weights: float
    activations: float
    kv_per_token: float
    blocks: int
    block_size: int

    @property
    def tokens(self) -> int:
        """Tokens the cache holds."""
        return self.blocks * self.block_size

    def to_dict(self) -> dict:
        """Plain JSON-ready data."""
        return {"budget_bytes": self.budget, "weights_bytes": self.weights, "activation_bytes": self.activations,
                "kv_bytes_per_token": self.kv_per_token, "blocks": self.blocks, "block_size": self.block_size,
                "tokens": self.tokens}


def kv_capacity(model, hw, tp: int = 1, pp: int = 1, ep: int = 1, dtype: str = "bf16",
                max_batched_tokens: int = 8192, gpu_memory_utilization: float = 0.9,
                block_size: int = 16, of_free: bool = False) -> KVCapacity:
    """KV blocks one replica holds (the tightest pipeline stage's share of memory decides).

    of_free: the fraction applies to the memory left after the weights and activations (TensorRT-LLM's
    kv_cache_free_gpu_mem_fraction) instead of to the whole memory (vLLM's gpu_memory_utilization)."""
    from c3kit.workload.memory import memory_report
    from c3kit.workload.parallel import Parallelism

    if not 0 < gpu_memory_utilization <= 1:
        raise ServeError(f"GPU memory utilization must be in (0, 1], got {gpu_memory_utilization!r}")
    par = Parallelism(tp=tp, pp=pp, ep=ep, micro_batch=1)
    probe = memory_report(model, hw, par=par, phase="decode", seq=block_size, dtype=dtype)
    work = memory_report(model, hw, par=par, phase="prefill", seq=max_batched_tokens, dtype=dtype)
    per_token = probe.kv_cache / block_size
    total = device_memory_bytes(hw)
    if of_free:
        budget = total
        free = gpu_memory_utilization * (total - work.weights - work.activations)
    else:
        budget = gpu_memory_utilization * total
        free = budget - work.weights - work.activations
    blocks = int(free // (per_token * block_size)) if free > 0 else 0
    if blocks < 1:
        raise ServeError(f"{model.name} on {hw.name} with tp {tp} pp {pp}: weights {work.weights / 1e9:.1f} GB and "
                         f"activations {work.activations / 1e9:.1f} GB leave no room for a KV cache in "
                         f"{gpu_memory_utilization:g} x {total / 1e9:.0f} GB: raise --tp or --pp")
    return KVCapacity(budget=budget, weights=work.weights, activations=work.activations, kv_per_token=per_token,
                      blocks=blocks, block_size=block_size)
