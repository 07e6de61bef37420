#!/usr/bin/env bash
# session 54, call 2: tuned ResNet-18 training step (synthetic, batch 512, bf16) as eager calls, eager / compile /
# triton, autograd's device threads on (torch's default) and off, two processes each, interleaved; then the
# per-phase host-time probe (step_phase_probe.py) on the same tuning cache
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
run() {  # $1: on|off, $2: time limit (s), $3: folder
  echo "=== autograd threads $1 ($(date +%T))"
  timeout $2 python3 -m bench.resnet --model resnet18 --synthetic --batch-size 512 --amp bf16 \
    --backend eager,compile,triton --bench-steps 50 --bench-rounds 5 --warmup-iters 150 --autograd-threads $1 \
    --no-progress --out-dir /tmp/r/$3 2>&1 | grep -v -i warn
}
{ run on 250 on1; run off 80 off1; run on 80 on2; run off 80 off2; } > $OUT/resnet_threads.txt 2>&1
tar -czf $OUT/rows.tgz -C /tmp/r . 2>/dev/null
grep -E "===|ms  \(|resnet\]" $OUT/resnet_threads.txt
echo "=== phase probe ($(date +%T))"
timeout 90 python3 .runs54/step_phase_probe.py eager,triton 2>&1 | grep -v -i warn | tee $OUT/step_phase_probe.txt | tail -6
