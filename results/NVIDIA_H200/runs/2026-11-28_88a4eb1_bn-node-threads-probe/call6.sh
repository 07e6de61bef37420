#!/usr/bin/env bash
# session 53, call 6: the batch norm node probe (bn_node_probe.py)
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
lscpu | grep -E "Model name|^CPU\(s\)|MHz" > $OUT/cpu.txt
timeout 240 python3 .runs53/bn_node_probe.py 2>&1 | grep -v Warn | tee $OUT/bn_node_probe.txt
