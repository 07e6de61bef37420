#!/usr/bin/env bash
# session 35 call A: CIFAR-10 part A (train_0..2) to ~/cifar10; the ResNet-34 step (MODEL=resnet34 resnet-step),
# which also tunes the training shapes; then one-epoch synthetic runs with an evaluation of the two step-graph
# backends, to tune / compile the evaluation shapes before call B trains.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p ~/cifar10 && cp .data/cifar10_a/*.webp ~/cifar10/ && ls ~/cifar10
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
el "resnet34 step"
mkdir -p /tmp/step34
MODEL=resnet34 OUT=/tmp/step34 bash bench/gpu_run.sh resnet-step > /tmp/step34/step34_log.txt 2>&1
tail -14 /tmp/step34/step34_log.txt | cut -c1-160
(cd /tmp && tar czf $OUT/step34.tgz step34)
for b in triton+stepgraph compile+stepgraph; do
  el "warm $b"
  timeout 100 python3 -m bench.resnet --model resnet18 --synthetic --train-limit 10240 --test-limit 2000 --epochs 1 \
    --batch-size 512 --amp bf16 --sgd torch --backend $b --out-dir /tmp/warm_$b --no-progress 2>&1 | grep -v -i warn | tail -3
done
ls ~/.cache/triton_playground/autotune | wc -l
el done
