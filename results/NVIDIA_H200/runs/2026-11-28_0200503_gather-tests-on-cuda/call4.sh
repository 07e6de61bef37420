#!/usr/bin/env bash
# session 53, call 4: the CPU-marked gather tests on cuda after their references moved to exact fp32 conv precision
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
timeout 300 python3 -m pytest -q -rA --tb=short -p no:logging tests/test_conv1d.py tests/test_adam.py \
  -k "(gather and not gpu) or step_tensor" > $OUT/tests-on-cuda.txt 2>&1
for s in 1 2 3 4 5 6 7 8; do
  TEST_SEED=$s timeout 100 python3 -m pytest -q -p no:logging tests/test_conv1d.py -k "gather_ln_relu_pool" 2>&1 | tail -1
done > $OUT/seeds.txt
grep -E "passed|failed|PASSED|FAILED" $OUT/tests-on-cuda.txt | tail -20; cat $OUT/seeds.txt
