#!/usr/bin/env bash
# GPU session script: memory-bound ops at acceptance sizes, SGEMM step times, then every GPU test
# (one process per test group, in parallel: kernel compilation dominates). Benchmarks run alone.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-results/gpu-run}
mkdir -p "$OUT"
timeout 230 python3 -m bench.ops --quick --op softmax,cross_entropy,layernorm,ln_relu --out "$OUT" > "$OUT/ops.log" 2>&1
grep -v "^\[" "$OUT/ops.log" | tail -45
timeout 150 python3 -m bench.sgemm --suite steptime --models GloNet,ResNetMLP --depths 10,100,1000 \
    --backends eager,triton,triton+graph --no-progress --out "$OUT" 2>&1 | grep -v Warning | tail -25
i=0
for group in "tests/test_gemm.py" "tests/test_softmax.py tests/test_cross_entropy.py" "tests/test_layernorm.py" \
             "tests/test_fused_mlp.py tests/test_adam.py tests/test_deep_mlp.py tests/test_sgemm_data.py" \
             "tests/test_softmax_regression.py tests/test_mnist_data.py"; do
    i=$((i+1))
    timeout 170 python3 -m pytest -m gpu -q -rf --tb=line $group > /tmp/pytest-$i.txt 2>&1 &
done
wait
for f in /tmp/pytest-*.txt; do echo "=== $f"; grep -vE "Warning|warn" "$f" | tail -15; done > "$OUT/pytest-gpu.txt"
cat "$OUT/pytest-gpu.txt" | grep -E "===|passed|failed|FAILED|Error" | head -60
