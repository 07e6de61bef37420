#!/usr/bin/env bash
# session 54, call 3: is the device threads' cost a cross-core one? The per-phase step probe (eager, triton) with the
# process free to use all 16 cores (default), pinned to one core, and to two cores; the hand-off probe on all / one
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
limit=250
for pin in all 2 2,3 all; do
  echo "=== cores: $pin ($(date +%T))"
  if [ $pin = all ]; then pre=""; else pre="taskset -c $pin"; fi
  timeout $limit $pre python3 .runs54/step_phase_probe.py eager,triton 2>&1 | grep -v -i warn
  limit=75
  case $pin in all|2) timeout 30 $pre python3 .runs54/handoff_probe.py 2>&1 | grep -E "^1|^3 switch 5" | grep -v "+ 20";; esac
done > $OUT/pinning.txt 2>&1
grep -v round $OUT/pinning.txt
