#!/usr/bin/env bash
# session 53, call 5: GPU groups 4 (LayerNorm: its dtype check changed in 4e794fb) and 10 (runtime, graphs: runtime.py
# gained first_outside and INTERPRETER_STORE_DTYPES), the last groups whose files changed after they ran
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
date +%T > $OUT/times.txt
TEST_GROUPS="4 10" TEST_TIMEOUT=400 OUT=$OUT bash bench/gpu_run.sh tests
date +%T >> $OUT/times.txt
