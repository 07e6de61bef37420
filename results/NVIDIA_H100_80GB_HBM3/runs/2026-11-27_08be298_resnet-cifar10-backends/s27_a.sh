#!/usr/bin/env bash
# session 27 call A (from .cache/clean): CIFAR-10 part A to ~/cifar10; tune the ResNet-18 triton / compile
# step-graph backends on this box (short synthetic runs with an evaluation); GPU tests groups 9 and 10.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
mkdir -p ~/cifar10 && cp ../../.data/cifar_a/* ~/cifar10/ && ls ~/cifar10
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for b in triton+stepgraph compile+stepgraph; do
  el "warm $b"
  timeout 150 python3 -m bench.resnet --model resnet18 --synthetic --train-limit 10240 --test-limit 2000 --epochs 1 \
    --batch-size 512 --amp bf16 --backend $b --out-dir /tmp/warm_$b --no-progress 2>&1 | grep -v -i warn | tail -3
done
el "tests 9 10"
TEST_GROUPS="9 10" TEST_TIMEOUT=330 OUT=$OUT bash bench/gpu_run.sh tests 2>&1 | tail -30
ls ~/.cache/triton_playground/autotune | wc -l
el done
