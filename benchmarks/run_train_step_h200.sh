#!/usr/bin/env bash
# Real single-GPU training steps (forward + backward, optimizer): python -m c3kit.runtime.bench.train_step.
# Writes $OUT/<gpu>-train-step.json and $OUT/train-log.txt. Compare: python benchmarks/validate_train_step.py.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-c3kit-out/h200-train-step}
mkdir -p "$OUT"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>&1
  timeout "${TRAIN_TIMEOUT:-300}" $PY -m c3kit.runtime.bench.train_step --out "$OUT" --budget-s "${TRAIN_BUDGET_S:-200}" \
    --script benchmarks/run_train_step_h200.sh ${QUICK:-}
  echo "== train-step: rc=$?"
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv 2>&1
  date -u
} 2>&1 | tee "$OUT/train-log.txt"
