#!/usr/bin/env bash
# multi-GPU call 4 (the same warm 4-GPU box): CIFAR-10 part B, every sha256 checked; ResNet-18 DDP scaling on
# real CIFAR-10, triton+graph (the one-launch prologue kept under DDP), on 1, 4 and 2 GPUs.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
KIND=nvidia-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)-x$(nvidia-smi -L | wc -l)
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
lim() { local left=$(( ${BUDGET:-540} - ($(date +%s) - T0) )); [ $left -lt $1 ] && echo $(( left > 5 ? left : 5 )) || echo $1; }
cp ../../.data/cifar_b/* ~/cifar10/ && (cd ~/cifar10 && sha256sum -c -) < cifar10.sha256 || { echo "CIFAR-10 incomplete"; exit 1; }
mkdir -p $OUT/ddp
S="--model resnet18 --data $HOME/cifar10 --amp bf16 --scaling 32,128,512,2048,8192 --warmup-iters 200 --bench-steps 30 --machine $KIND --out-dir $OUT/ddp --no-progress"
for g in 1 4 2; do
  el "resnet ddp triton+graph $g GPU"
  timeout $(lim 120) torchrun --nproc-per-node $g --master-port 29403 -m bench.resnet $S --backend triton+graph 2>&1 \
    | grep -E "^\[scaling\]|rows ->|Error|error" | head -12
done
tar czf $OUT/ddp.tgz -C $OUT ddp && rm -rf $OUT/ddp
el done
