#!/usr/bin/env bash
# Last GPU call of the session: SGEMM step times (+ loss agreement after 100 steps), the GEMM layout sweep
# at the linear+bias+ReLU shape, then the GEMM and fused-MLP GPU tests in parallel.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-results/gpu-run}
mkdir -p "$OUT"
timeout 190 python3 -m bench.sgemm --suite steptime --models GloNet,ResNetMLP --depths 10,100,1000 \
    --backends eager,triton,triton+graph --steps 100 --no-progress --out "$OUT" 2>&1 | grep -v -i warn | tail -30
timeout 60 python3 -m autotune.sweep --shapes 4096x1024x8704 --layouts nn,nt --act relu --rep 10 --out "$OUT" 2>&1 | head -14
timeout 110 python3 -m pytest -m gpu -q -rf --tb=line tests/test_gemm.py > /tmp/p1.txt 2>&1 &
timeout 110 python3 -m pytest -m gpu -q -rf --tb=line tests/test_fused_mlp.py tests/test_adam.py tests/test_deep_mlp.py > /tmp/p2.txt 2>&1 &
wait
for f in /tmp/p1.txt /tmp/p2.txt; do echo "=== $f"; grep -vE "Warning|warn" "$f" | tail -12; done | tee "$OUT/pytest-gpu.txt"
