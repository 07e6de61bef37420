#!/usr/bin/env bash
# GPU session script: GEMM benchmark + a second process over the same shapes (persistent autotune cache),
# GPU tests, the SGEMM step-time suite. Each step has its own time limit.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-results/gpu-run}
mkdir -p "$OUT"
timeout 200 python3 -m bench.gemm --quick --out "$OUT"
echo "--- second process, same shapes:"
TRITON_PLAYGROUND_VERBOSE=1 timeout 60 python3 -m bench.gemm --quick --backends triton --repeat 1 --out /tmp/second 2>&1 | grep -E "autotune|cache"
timeout 100 python3 -m pytest -m gpu -q tests/test_gemm.py 2>&1 | grep -E "Error|error|passed|failed" | tail -12
timeout 100 python3 -m pytest -m gpu -q tests/test_fused_mlp.py tests/test_adam.py tests/test_deep_mlp.py tests/test_sgemm_data.py 2>&1 | grep -E "Error|passed|failed" | tail -12
timeout 200 python3 -m bench.sgemm --suite steptime --models GloNet,ResNetMLP --depths 10,100,1000 --out "$OUT" 2>&1 | tail -30
