#!/usr/bin/env bash
# session 33 call A: CIFAR-10 part A (train_0..2) to ~/cifar10; tune the ResNet-18 triton / compile step-graph
# backends on this box (short synthetic runs with an evaluation); GPU tests group 9 (batch norm, pool head, ResNet, SGD).
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p ~/cifar10 && cp .data/cifar10_a/*.webp ~/cifar10/ && ls ~/cifar10
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for b in triton+stepgraph compile+stepgraph; do
  el "warm $b"
  timeout 170 python3 -m bench.resnet --model resnet18 --synthetic --train-limit 10240 --test-limit 2000 --epochs 1 \
    --batch-size 512 --amp bf16 --sgd torch --backend $b --out-dir /tmp/warm_$b --no-progress 2>&1 | grep -v -i warn | tail -3
done
el "tests 9"
mkdir -p $OUT/tests
TEST_GROUPS="9" TEST_TIMEOUT=330 OUT=$OUT/tests bash bench/gpu_run.sh tests 2>&1 | tail -30
ls ~/.cache/triton_playground/autotune | wc -l
el done
