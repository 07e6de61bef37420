#!/usr/bin/env bash
# session 53, call 2: the two CPU tests fixed after call 1, on cuda; then the ptxas --register-usage-level probe
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
timeout 150 python3 -m pytest -q -rf --tb=short -p no:logging tests/test_conv1d.py tests/test_adam.py \
  -k "dense_one_hot or step_tensor" > $OUT/tests-on-cuda.txt 2>&1
for opt in "" "--register-usage-level=10" "--register-usage-level=0" ""; do
  PTXAS_OPTIONS="$opt" timeout 150 python3 .runs53/ptxas_probe.py 2>&1 | grep -v Warn
done > $OUT/ptxas_probe.txt
tail -3 $OUT/tests-on-cuda.txt; cat $OUT/ptxas_probe.txt
