#!/usr/bin/env bash
# One device call on the lent single H200: device properties, `c3kit bench gemm` (grid, random, held-out
# and workload shapes, 2..64-way splits), its steady-state step, the layer GEMM sequences
# (benchmarks/validate_gemm_sequence.py), `c3kit bench c3`, and a one-GPU smoke run of the runtime ops.
# Results go under $OUT (the device tool's folder; c3kit-out/h200 when run by hand).
# Usage (device tool, from the repo root):  bash benchmarks/run_h200.sh
# Quick local check (CPU):  OUT=/tmp/h200 GEMM_ARGS="--quick --split-shapes 64x64x64 --max-chunks 4" STEADY_ARGS="--quick --steady 2 --steady-hold-s 0.002" bash benchmarks/run_h200.sh
# Only some steps: STEPS="props gemm" bash benchmarks/run_h200.sh (default: all). Beside the gemm step,
# nvidia-smi logs SM clock, power and temperature every second to $OUT/smi-gemm.csv (when present).
# The device tool brings back at most 8 files per call: run the steps in two calls, e.g.
#   STEPS="nvidia-smi props gemm nvidia-smi-after" GEMM_ARGS=--no-splits   (log, props, nvidia-smi log,
#       table, held-out, workload, odd, sentinel: 8 files; the splits, a ninth, need a call of their own)
#   STEPS="gemm-steady gemm-sequence c3 runtime-smoke"
# Shipped H200 files: gemm step = run 5 (plus run 3's splits), gemm-steady = run 6, gemm-sequence =
# benchmarks/gemm_sequence_h200 (docs/measurements.md).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-c3kit-out/h200}
mkdir -p "$OUT"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Never NVLink multicast on these machines (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
SCRIPT=benchmarks/run_h200.sh

STEPS=${STEPS:-"nvidia-smi props gemm gemm-steady gemm-sequence c3 runtime-smoke nvidia-smi-after"}
step() {
  local name=$1 t0 rc
  shift
  case " $STEPS " in *" $name "*) ;; *) echo "== $name: skipped (STEPS)"; return 0 ;; esac
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
  SMI_PID=
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -l 1 >"$OUT/smi-gemm.csv" 2>&1 &
    SMI_PID=$!
  fi
  # shellcheck disable=SC2086 # GEMM_ARGS / C3_ARGS are word lists on purpose
  step gemm $PY -m c3kit.cli.bench_cmd gemm --budget-s "${GEMM_BUDGET_S:-270}" --passes 3 --target-ms 15 --out "$OUT/h200-sxm-gemm.json" --script "$SCRIPT" ${GEMM_ARGS:-}
  if [ -n "$SMI_PID" ]; then kill "$SMI_PID" 2>/dev/null; fi
  # shellcheck disable=SC2086
  step gemm-steady $PY -m c3kit.cli.bench_cmd gemm --steady 200 --steady-only --budget-s 420 --out "$OUT/h200-sxm-gemm.json" --script "$SCRIPT" ${STEADY_ARGS:-}
  step gemm-sequence $PY benchmarks/validate_gemm_sequence.py --measure --out "$OUT/gemm-sequence.json"
  # shellcheck disable=SC2086
  step c3 $PY -m c3kit.cli.bench_cmd c3 --ratios 0.25,0.5,1,2,4 --out "$OUT/h200-sxm-c3.json" --script "$SCRIPT" ${C3_ARGS:-}
  if [ -f benchmarks/runtime_smoke.py ]; then
    step runtime-smoke $PY benchmarks/runtime_smoke.py --out "$OUT/runtime-smoke.json"
  fi
  step nvidia-smi-after nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
  date -u
} 2>&1 | tee "$OUT/log.txt"
