#!/usr/bin/env bash
# Last GPU call of the session: SGEMM step times (+ loss agreement after 100 steps), the reworked
# memory-bound kernels at acceptance sizes, then the GEMM GPU tests.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-results/gpu-run}
mkdir -p "$OUT"
timeout 150 python3 -m bench.sgemm --suite steptime --models GloNet,ResNetMLP --depths 10,1000 \
    --backends eager,triton,triton+graph --steps 100 --no-progress --out "$OUT" 2>&1 | grep -v -i warn | tail -16
timeout 110 python3 -m bench.ops --quick --op cross_entropy,layernorm_bwd,softmax --dtype bfloat16,float32 \
    --out "$OUT" > "$OUT/ops.log" 2>&1; grep -v "^\[" "$OUT/ops.log" | tail -30
timeout 90 python3 -m pytest -m gpu -q -rf --tb=line tests/test_gemm.py 2>&1 | grep -vE "Warning|warn" | tail -10
