#!/usr/bin/env bash
# session 36 call A (the box that ran b608d06's ResNet-18 and ResNet-34 steps): CIFAR-10 part A (train_0..2) to
# ~/cifar10, then a one-epoch synthetic run with an evaluation of triton+stepgraph, to tune / compile the evaluation
# shapes before call B trains.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p ~/cifar10 && cp .data/cifar10_a/*.webp ~/cifar10/ && ls ~/cifar10
el "warm triton+stepgraph"
timeout 150 python3 -m bench.resnet --model resnet18 --synthetic --train-limit 10240 --test-limit 2000 --epochs 1 \
  --batch-size 512 --amp bf16 --sgd torch --backend triton+stepgraph --out-dir /tmp/warm --no-progress 2>&1 \
  | grep -v -i warn | tail -3
ls ~/.cache/triton_playground/autotune | wc -l
el done
