#!/usr/bin/env bash
# session 54, call 6: the GPU tests of group 10 (runtime, graphs, harness: host_cores among them) and bench.resnet's
# host-cores / autograd-threads tests on a CUDA box; the hand-off probe pinned (taskset -c 15) and not, on this box
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
TEST_GROUPS="10" TEST_TIMEOUT=200 OUT=$OUT bash bench/gpu_run.sh tests 2>&1 | tail -8
timeout 150 python3 -m pytest -q tests/test_resnet.py -k "host_core or autograd_threads" 2>&1 | tail -3 | tee $OUT/pytest_resnet.txt
for pre in "" "taskset -c 15"; do
  echo "=== ${pre:-all cores}"; timeout 40 $pre python3 .runs54/handoff_probe.py 2>&1 | grep -E "^1|^2|^3 switch 5"
done > $OUT/handoff_probe.txt 2>&1
cat $OUT/handoff_probe.txt
