#!/usr/bin/env bash
# The real serving loop's iterations on one GPU (issue 15 item 4): python -m c3kit.runtime.bench.serve_loop.
# Writes $OUT/<gpu>-serve-loop.json and $OUT/serve-log.txt. Compare: python benchmarks/validate_serve_loop.py.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-c3kit-out/h200-serve-loop}
mkdir -p "$OUT"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>&1
  timeout "${SERVE_TIMEOUT:-300}" $PY -m c3kit.runtime.bench.serve_loop --out "$OUT" --budget-s "${SERVE_BUDGET_S:-210}" \
    --script benchmarks/run_serve_loop_h200.sh ${QUICK:-}
  echo "== serve-loop: rc=$?"
  date -u
} 2>&1 | tee "$OUT/serve-log.txt"
