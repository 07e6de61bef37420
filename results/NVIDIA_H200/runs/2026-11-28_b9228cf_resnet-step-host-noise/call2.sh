#!/usr/bin/env bash
# session 55, call 2: where the variable host time of an eager-call ResNet-18 step goes (host_noise_probe.py):
# per-round main-thread CPU / run-queue wait, gc time, other threads' CPU; unpinned, `taskset -c 15` from the start,
# and unpinned with one intra-op thread; triton and eager, interleaved processes.
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
nproc > $OUT/cpu.txt; grep -m1 "model name" /proc/cpuinfo >> $OUT/cpu.txt; lscpu | grep -i -E "numa|socket|thread" >> $OUT/cpu.txt
limit=240
while read -r pre backend intra; do
  [ "$pre" = none ] && pre=""; pre=${pre//_/ }
  echo "=== ${pre:-unpinned} $backend ${intra:+intra-op $intra} ($(date +%T))"
  timeout $limit $pre python3 .runs55/host_noise_probe.py $backend $intra < /dev/null 2>&1 | grep -v -i warn
  limit=90
done > $OUT/host_noise.txt 2>&1 <<'LIST'
none triton
taskset_-c_15 triton
none triton 1
none eager
taskset_-c_15 eager
none triton
taskset_-c_15 triton
LIST
grep -E "^===|medians|gc o[nf]+ ?:" $OUT/host_noise.txt | grep -v round
