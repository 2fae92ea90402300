"""The scheduler limits `trtllm-bench throughput` (TensorRT-LLM v1.0, PyTorch backend) picks when the user gives none.

Without --max_batch_size / --max_num_tokens, trtllm-bench derives both from the model, the KV cache
and the dataset's mean input / output lengths (tensorrt_llm/bench/benchmark/utils/general.py
get_settings -> bench/build/build.py get_benchmark_engine_settings -> bench/build/tuning.py
calc_engine_setting and finetune_setting):

- KV requests = fraction x (total GPU memory of the TP x PP GPUs as NVML reports it, GiB, minus
  params x weight bytes) / (KV bytes per token x (ISL + OSL)); KV bytes per token =
  2 layers max(TP, KV heads) head_dim x KV element bytes; fraction = --kv_cache_free_gpu_mem_fraction
  (default 0.90).
- batch = min(KV requests, 4096) / PP, rounded up: to 32 (at least 64) below 256, to 128 below 1024,
  else to 256.
- tokens = min(batch (1 + ISL / OSL), 32768), rounded up: to 256 (at least 2048) below 4096, to 512
  below 8192, else to 1024.
- without chunked context (--enable_chunked_context is off by default) max_num_tokens is raised to
  at least the longest input plus max_batch_size.

KV element bytes: the published rows' KV cache is FP8 (1 byte). The row's source does not say so, but
a BF16 cache cannot reach its 20000 / 2000 figure on the H200: 0.9 x (150.75 GB - 8.03 GB of FP8
weights) holds 44.5 requests of 22000 tokens at 131072 B per token, and every decode step then
reads about 44.5 x 21000 x 131072 B = 122 GB of KV, at least 25 ms at 4.8 TB/s: at most about
1700 output tokens/s before any prefill, below the published 1804.

The same run's other defaults (throughput.py): --scheduler_policy guaranteed_no_evict (a request
starts only with KV for its whole life: SchedulerConfig.reserve_kv) and in-flight batching of whole
prompts with the generation batch (SchedulerConfig.mixed_batches).
"""

from __future__ import annotations

import math

from c3kit.serve.kv import DRIVER_TOTAL_MIB
from c3kit.serve.workload import ServeError

SOURCE = ("TensorRT-LLM tensorrt_llm/bench/build/tuning.py (calc_engine_setting, finetune_setting), "
          "bench/benchmark/utils/general.py (get_settings), bench/benchmark/throughput.py (option defaults)")



def finetune(kv_requests: float, isl: float, osl: float, pp: int = 1) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) from the requests the KV cache holds (trtllm-bench's finetune_setting)."""
    if not (kv_requests > 0 and isl > 0 and osl > 0 and pp >= 1):
        raise ServeError("trtllm-bench limits need KV requests, input and output lengths > 0 and pp >= 1")
    raw_bs = min(kv_requests, 4096) / pp
    raw_tok = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tok < 4096:
        tok = max(2048, 256 * math.ceil(raw_tok / 256))
    elif raw_tok < 8192:
        tok = 512 * math.ceil(raw_tok / 512)
    else:
        tok = 1024 * math.ceil(raw_tok / 1024)
    return bs, tok


def bench_limits(model, gpu: str, tp: int, isl: int, osl: int, weight_bytes: float = 1.0, kv_bytes: float = 1.0,
                 kv_fraction: float = 0.90, pp: int = 1, chunked: bool = False) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) trtllm-bench runs a uniform ISL / OSL dataset with (model: a ModelConfig)."""
    mib = DRIVER_TOTAL_MIB.get(gpu)  # trtllm-bench's get_device_memory: NVML's total
    if mib is None:
        raise ServeError(f"no NVML memory total for {gpu}: known {', '.join(DRIVER_TOTAL_MIB)}")
    gib = 1024.0 ** 3
    per_token = 2 * model.layers * max(tp, model.kv_heads) * model.head_dim * kv_bytes / gib
    available = mib / 1024.0 * tp * pp - model.param_count() * weight_bytes / gib
    requests = available * kv_fraction / (per_token * (isl + osl))
    bs, tok = finetune(requests, isl, osl, pp)
    if not chunked:
        tok = max(tok, isl + bs)
    return bs, tok
