#!/usr/bin/env bash
# Everything of issue 7 in one command on a machine with several GPUs (nvidia-h200-x8, or -x4 / -x2):
# correctness of the runtime ops over NCCL and copy engines, `c3kit bench comm` (NCCL default, NCCL
# with few CTAs, copy engines; with a GEMM beside each collective: the multi-GPU C3 table),
# `c3kit bench overlap` at TP = all GPUs, 4 and 2, and the held-out checks that exist.
# Results go under $OUT (c3kit-out/multi by hand), 8 files: log.txt (with props), runtime-selftest.json,
# <gpu>-comm.json, <gpu>-c3-multi.json, <gpu>-dma.json, <gpu>-overlap-tp{N,4,2}.json.
# Usage (device tool, from the repo root):  bash benchmarks/run_multi_gpu.sh
# CPU check of the plumbing:  OUT=/tmp/multi BACKEND=gloo WORLD=2 bash benchmarks/run_multi_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-c3kit-out/multi}
mkdir -p "$OUT"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# NVLink multicast must stay off on these hosts (KINDS.md): NCCL, PyTorch symmetric memory, NVSHMEM.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PYTHON:-python3}
SCRIPT=benchmarks/run_multi_gpu.sh
BACKEND=${BACKEND:-nccl}
if [ "$BACKEND" = nccl ]; then
  WORLD=${WORLD:-$($PY -c 'import torch; print(torch.cuda.device_count())')}
  COMMS=nccl,copy-engine
  BACKENDS=${BACKENDS:-nccl,nccl-ctas4,nccl-ctas16,copy-engine}
  SIZES=${SIZES:-1KiB:1GiB:4}
  TOKENS=${TOKENS:-8192}
  MODELS=${MODELS:-llama3-70b,llama3-405b,mixtral-8x7b}
  SLUG=h200-sxm
else
  WORLD=${WORLD:-2}
  COMMS=gloo
  BACKENDS=gloo
  SIZES=${SIZES:-1KB,64KB}
  TOKENS=${TOKENS:-64}
  MODELS=${MODELS:-tiny}
  SLUG=cpu
fi

step() {
  local name=$1 t0 rc
  shift
  echo "== $name: $*"
  t0=$(date +%s)
  timeout "${STEP_TIMEOUT:-540}" "$@"
  rc=$?
  echo "== $name: rc=$rc after $(($(date +%s) - t0)) s"
}

{
  date -u
  echo "world=$WORLD backend=$BACKEND NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
  command -v nvidia-smi >/dev/null && step topology nvidia-smi topo -m
  step props $PY -m c3kit.cli.bench_cmd props
  step selftest $PY benchmarks/runtime_selftest.py --world "$WORLD" --backend "$BACKEND" --comms "$COMMS" \
    --out "$OUT/runtime-selftest.json"
  step comm $PY -m c3kit.cli.bench_cmd comm --world "$WORLD" --backend "$BACKEND" --backends "$BACKENDS" \
    --sizes "$SIZES" --with-gemm --out "$OUT/$SLUG-comm.json" --script "$SCRIPT"
  for tp in "$WORLD" 4 2; do
    if [ "$tp" -le "$WORLD" ] && [ ! -f "$OUT/$SLUG-overlap-tp$tp.json" ]; then
      step "overlap-tp$tp" $PY -m c3kit.cli.bench_cmd overlap --world "$tp" --backend "$BACKEND" --models "$MODELS" \
        --tokens "$TOKENS" --out "$OUT/$SLUG-overlap-tp$tp.json" --script "$SCRIPT"
    fi
  done
  if [ -f benchmarks/validate_overlap_runtime.py ]; then
    step validate-overlap $PY benchmarks/validate_overlap_runtime.py --dir "$OUT"
  fi
  date -u
} 2>&1 | tee "$OUT/log.txt"
