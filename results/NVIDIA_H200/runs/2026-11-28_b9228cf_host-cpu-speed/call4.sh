#!/usr/bin/env bash
# session 55, call 4: the box's CPU speed by core and over time (cpu_speed_probe.py, no GPU work), and the Triton
# step's rounds beside a fixed-loop calibration timed before and after each round (host_noise_probe.py).
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
timeout 60 python3 .runs55/cpu_speed_probe.py 45 > $OUT/cpu_speed_1.txt 2>&1
tail -17 $OUT/cpu_speed_1.txt | head -1
{
  echo "=== unpinned triton ($(date +%T))"
  PROBE_ROUNDS=16 timeout 240 python3 .runs55/host_noise_probe.py triton - all-off,all < /dev/null 2>&1 | grep -v -i warn
  echo "=== taskset -c 15 triton ($(date +%T))"
  PROBE_ROUNDS=16 timeout 90 taskset -c 15 python3 .runs55/host_noise_probe.py triton - all-off,all < /dev/null 2>&1 \
    | grep -v -i warn
} > $OUT/host_noise.txt 2>&1
grep -E "^===|: +[0-9.]+ \|" $OUT/host_noise.txt
timeout 40 python3 .runs55/cpu_speed_probe.py 30 > $OUT/cpu_speed_2.txt 2>&1
tail -17 $OUT/cpu_speed_2.txt | head -1
