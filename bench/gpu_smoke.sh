#!/usr/bin/env bash
# GPU session script: GEMM benchmark + a second process over the same shapes (persistent autotune cache),
# every GPU test (parallel workers: compiling kernels dominates), the memory-bound ops at acceptance sizes.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-results/gpu-run}
mkdir -p "$OUT"
timeout 190 python3 -m bench.gemm --quick --out "$OUT"
echo "--- second process, same shapes:"
TRITON_PLAYGROUND_VERBOSE=1 timeout 40 python3 -m bench.gemm --quick --backends triton --repeat 1 --out /tmp/second 2>&1 | grep -E "autotune|cache"
timeout 170 python3 -m pytest -m gpu -q -n 8 tests/ > "$OUT/pytest-gpu.txt" 2>&1; echo "pytest rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest-gpu.txt" | tail -25
timeout 180 python3 -m bench.ops --quick --op softmax,cross_entropy,layernorm,ln_relu --out "$OUT" 2>&1 | tail -40
