#!/usr/bin/env bash
# One device call on the lent single H200: device properties, `c3kit bench gemm` (grid + random
# shapes, 2..64-way splits), `c3kit bench c3`, and a one-GPU smoke run of the runtime ops.
# Results go under $OUT (the device tool's folder; c3kit-out/h200 when run by hand).
# Usage (device tool, from the repo root):  bash benchmarks/run_h200.sh
# Quick local check (CPU):  OUT=/tmp/h200 GEMM_ARGS="--shapes 64x64x64 --split-shapes 64x64x64 --max-chunks 4" bash benchmarks/run_h200.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-c3kit-out/h200}
mkdir -p "$OUT"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Never NVLink multicast on these machines (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
SCRIPT=benchmarks/run_h200.sh

step() {
  local name=$1 t0 rc
  shift
  echo "== $name: $*"
  t0=$(date +%s)
  timeout "${STEP_TIMEOUT:-360}" "$@"
  rc=$?
  echo "== $name: rc=$rc after $(($(date +%s) - t0)) s"
}

{
  date -u
  step nvidia-smi nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
  step props $PY -m c3kit.cli.bench_cmd props --out "$OUT/props.json"
  # shellcheck disable=SC2086 # GEMM_ARGS / C3_ARGS are word lists on purpose
  step gemm $PY -m c3kit.cli.bench_cmd gemm --budget-s 300 --target-ms 15 --passes 2 --graph-below-us 60 --out "$OUT/h200-sxm-gemm.json" --script "$SCRIPT" ${GEMM_ARGS:-}
  # shellcheck disable=SC2086
  step c3 $PY -m c3kit.cli.bench_cmd c3 --ratios 0.25,0.5,1,2,4 --out "$OUT/h200-sxm-c3.json" --script "$SCRIPT" ${C3_ARGS:-}
  if [ -f benchmarks/runtime_smoke.py ]; then
    step runtime-smoke $PY benchmarks/runtime_smoke.py --out "$OUT/runtime-smoke.json"
  fi
  step nvidia-smi-after nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
  date -u
} 2>&1 | tee "$OUT/log.txt"
