#!/usr/bin/env bash
# session 55, call 5: pinning inside the process (host_cores 15 after the warm-up on all cores) against
# `taskset -c 15` from the start, each round beside the fixed-loop calibration of the core it ran on.
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
limit=240
for pass in 1 2; do
  echo "=== pass $pass: unpinned process, rounds pinned inside it ($(date +%T))"
  PROBE_ROUNDS=12 timeout $limit python3 .runs55/host_noise_probe.py triton - 15,all,15-off < /dev/null 2>&1 \
    | grep -v -i warn
  limit=90
  echo "=== pass $pass: taskset -c 15 from the start ($(date +%T))"
  PROBE_ROUNDS=12 timeout $limit taskset -c 15 python3 .runs55/host_noise_probe.py triton - all,all-off \
    < /dev/null 2>&1 | grep -v -i warn
done > $OUT/host_noise.txt 2>&1
grep -E "^===|: +[0-9.]+ \|" $OUT/host_noise.txt
