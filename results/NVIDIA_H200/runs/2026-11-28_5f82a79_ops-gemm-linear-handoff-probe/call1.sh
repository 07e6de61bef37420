#!/usr/bin/env bash
# session 54, call 1: the device-thread handoff probe, then issue 22's op suite rerun on today's code
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
{ lscpu | grep -E "Model name|^CPU\(s\)|MHz|NUMA|Thread"; cat /sys/devices/system/cpu/cpuidle/current_driver 2>&1;
  cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>&1; nproc; uptime; } > $OUT/cpu.txt
timeout 150 python3 .runs54/handoff_probe.py 2>&1 | grep -v Warn | tee $OUT/handoff_probe.txt
echo "=== ops gemm,linear $(date +%T)"
timeout 400 python3 -m bench.ops --op gemm,linear --backends eager,triton,eager+graph,triton+graph --out $OUT/ops \
  > $OUT/ops_log.txt 2>&1
echo "rc $? $(date +%T)"
tail -5 $OUT/ops_log.txt
