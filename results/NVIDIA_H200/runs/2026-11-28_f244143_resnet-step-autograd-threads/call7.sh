#!/usr/bin/env bash
# session 53, call 7: ResNet-18 training step (synthetic, batch 512, bf16), eager and triton backends as eager calls,
# with autograd's device threads on (torch's default) and off (--autograd-threads off); autotuning off (each Triton
# kernel at its first candidate config: host time is the question, not tuned kernel time)
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
export TRITON_PLAYGROUND_AUTOTUNE=0
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
run() {  # $1: on|off, $2: time limit (s), $3: folder
  echo "=== autograd threads $1 ($(date +%T))"
  timeout $2 python3 -m bench.resnet --model resnet18 --synthetic --amp bf16 --backend eager,triton --bench-steps 10 \
    --bench-rounds 3 --warmup-iters 5 --autograd-threads $1 --no-progress --out-dir /tmp/r/$3 2>&1 | grep -v Warn
}
{ run on 130 on1; run off 40 off1; run on 35 on2; } > $OUT/resnet_threads.txt 2>&1
tar -czf $OUT/rows.tgz -C /tmp/r . 2>/dev/null
grep -E "===|ms  \(|resnet\]" $OUT/resnet_threads.txt
