#!/usr/bin/env bash
# session 54, call 5: which core an eager-call ResNet-18 step is pinned to (step_core_probe.py), where the box
# routes its interrupts, then the resnet-step stage with HOST_CORES=one (now the highest-numbered core)
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
{ head -1 /proc/interrupts; grep -i -E "nvidia|LOC|CAL|RES|TLB" /proc/interrupts; } > $OUT/interrupts_before.txt 2>&1
timeout 240 python3 .runs54/step_core_probe.py 2>&1 | grep -v -i warn > $OUT/step_core_probe.txt
{ head -1 /proc/interrupts; grep -i -E "nvidia|LOC|CAL|RES|TLB" /proc/interrupts; } > $OUT/interrupts_after.txt 2>&1
tail -9 $OUT/step_core_probe.txt
mkdir -p $OUT/r
HOST_CORES=one OUT=$OUT/r bash bench/gpu_run.sh resnet-step 2>&1 | tee $OUT/resnet_step.txt | grep -E "ms  \("
cd $OUT/r && tar -czf ../rows.tgz . && cd .. && rm -rf r
