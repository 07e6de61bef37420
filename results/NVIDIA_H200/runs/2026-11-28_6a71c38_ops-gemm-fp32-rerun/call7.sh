#!/usr/bin/env bash
# session 55, call 7: issue 22's one failing item rerun before quoting it: fp32 (ieee) GEMM 4096³ and 8192³,
# eager calls, cold tuning cache.
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
timeout 200 python3 -m bench.ops --op gemm --shapes 4096,8192 --dtype float32 --backends eager,triton \
  --out $OUT/r 2>&1 | grep -v -i warn | tail -25 | tee $OUT/suite.txt
