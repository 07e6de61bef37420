#!/bin/bash
# torch.profiler traces of replayed steps: triton+stepgraph and compile+stepgraph, 5 steps each
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv
for B in triton+stepgraph compile+stepgraph; do
  python3 -m bench.resnet --model resnet18 --synthetic --batch-size 512 --amp bf16 --sgd fused --backend $B \
    --run-profiler --warmup-iters 40 --profile-steps 5 --epochs 1 --no-progress --out-dir /tmp/prof_$B \
    --trace-file-name /tmp/trace-$B.json 2>&1 | grep -v -i warn | tail -40
  gzip -c /tmp/trace-$B.json > $OUT/trace-$B.json.gz
done
