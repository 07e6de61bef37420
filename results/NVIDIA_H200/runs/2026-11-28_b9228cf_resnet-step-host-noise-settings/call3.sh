#!/usr/bin/env bash
# session 55, call 3: the same probe with rounds cycling through pinning inside the process (host_cores 15, after
# the warm-up on all cores) and autograd's device threads off, against `taskset -c 15` from the start; per-thread
# CPU time and the core each key thread last ran on.
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
limit=240
while read -r pre backend settings; do
  [ "$pre" = none ] && pre=""; pre=${pre//_/ }
  echo "=== ${pre:-unpinned} $backend ($(date +%T))"
  timeout $limit $pre python3 .runs55/host_noise_probe.py $backend - $settings < /dev/null 2>&1 | grep -v -i warn
  limit=90
done > $OUT/host_noise.txt 2>&1 <<'LIST'
none triton all,15,all-off,15-off
taskset_-c_15 triton all,all-off
none eager all,15,all-off,15-off
taskset_-c_15 eager all,all-off
none triton all,15,all-off,15-off
taskset_-c_15 triton all,all-off
LIST
grep -E "^===|medians|: +[0-9.]+ \|" $OUT/host_noise.txt | grep -v round
