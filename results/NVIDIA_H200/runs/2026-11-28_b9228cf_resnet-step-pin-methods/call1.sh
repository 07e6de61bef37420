#!/usr/bin/env bash
# session 55, call 1: does pinning inside the process (bench.harness.host_cores after a warm-up on all cores) time
# an eager-call ResNet-18 step as `taskset -c 15` from the start does, on one box? Then the GPU rerun of the fixed
# autograd-threads test.
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
limit=220
for pass in 1 2; do
  echo "=== pass $pass: in-process pinning after the warm-up ($(date +%T))"
  timeout $limit python3 .runs55/step_core_probe.py all,15 2>&1 | grep -v -i warn
  limit=90
  echo "=== pass $pass: taskset -c 15 from the start ($(date +%T))"
  timeout $limit taskset -c 15 python3 .runs55/step_core_probe.py all 2>&1 | grep -v -i warn
done > $OUT/pin_probe.txt 2>&1
grep -v round $OUT/pin_probe.txt
echo "=== phase probe under taskset -c 15 ($(date +%T))" >> $OUT/pin_probe.txt
timeout 90 taskset -c 15 python3 .runs55/step_phase_probe.py eager,triton 2>&1 | grep -v -i warn > $OUT/phase_probe.txt
tail -12 $OUT/phase_probe.txt
timeout 120 python3 -m pytest -q tests/test_resnet.py -k "host_core or autograd_threads" 2>&1 | tail -5 | tee $OUT/tests.txt
