#!/usr/bin/env bash
# One device call on the lent single H200: op-level microbenchmarks beyond GEMMs (kernel floors,
# memory-bound ops, attention, small / grouped / FP8 GEMMs) and the whole-layer checks (training
# blocks, CUDA-graph decode steps), each family one file under $OUT, plus nvidia-smi's log.
# Usage (device tool, from the repo root): bash benchmarks/run_ops_h200.sh
# Quick local check (CPU): OUT=/tmp/ops QUICK=--quick bash benchmarks/run_ops_h200.sh
# Other families: FAMILIES="..." (names in c3kit.runtime.bench.ops.FAMILIES); FAMILY_BUDGET_S caps each one's
# cases (about 75 s by default) and FAMILY_TIMEOUT kills one that overruns. Overlap and graph-timed families
# (each one's docstring states its expected time on one H200):
#   FAMILIES="gemm_under_comm attn_graph norm_bwd grouped_wgrad fp8_cast_parts" FAMILY_BUDGET_S=75 \
#     bash benchmarks/run_ops_h200.sh   # about 45 + 40 + 40 + 50 + 20 s of cases (estimated)
#   gemm_under_comm: a GEMM under an SM copy (k blocks) / CE copy / pinned H2D on a high-priority stream
#   attn_graph: flash SDPA fwd / bwd in CUDA graphs; norm_bwd: RMSNorm / LayerNorm fwd, bwd, weight-grad sum
#   grouped_wgrad: MoE expert dW as an mm loop and torch._grouped_mm; fp8_cast_parts: amax, scale, casts
# Op classes whose held-out checks lack data (issue 12; runtime/bench/ops_heldout.py):
#   FAMILIES="fp8_mm norm_width decode_attn_small cp_attention" FAMILY_BUDGET_S=90 FAMILY_TIMEOUT=150 \
#     bash benchmarks/run_ops_h200.sh   # about 12 + 35 + 30 + 50 s of cases + ~7 s start each (estimated)
#   fp8_mm: _scaled_mm tensorwise / rowwise beside bf16 mm; norm_width: RMSNorm / LayerNorm at nine widths;
#   decode_attn_small: q_len 1 at KV 128-2048; cp_attention: flash fwd / bwd of context-parallel ring chunks
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-c3kit-out/h200-ops}
mkdir -p "$OUT"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
FAMILIES=${FAMILIES:-"floor memory gemm attention decode layers"}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv 2>&1
  SMI_PID=
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -l 1 >"$OUT/smi-ops.csv" 2>&1 &
    SMI_PID=$!
  fi
  for f in $FAMILIES; do
    t0=$(date +%s)
    timeout "${FAMILY_TIMEOUT:-150}" $PY -m c3kit.runtime.bench.ops --out "$OUT" --only "$f" --budget-s "${FAMILY_BUDGET_S:-75}" --script benchmarks/run_ops_h200.sh ${QUICK:-}
    echo "== $f: rc=$? after $(($(date +%s) - t0)) s"
  done
  if [ -n "$SMI_PID" ]; then kill "$SMI_PID" 2>/dev/null; fi
  date -u
} 2>&1 | tee "$OUT/log.txt"
