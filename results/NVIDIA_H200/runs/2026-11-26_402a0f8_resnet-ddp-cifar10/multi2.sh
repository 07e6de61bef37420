#!/usr/bin/env bash
# multi-GPU call 2 (the same warm 4-GPU box, tuned in call 1): CIFAR-10 part B, every sha256 checked;
# ResNet-18 DDP scaling on real CIFAR-10 (triton+graph, eager) on 1, 4 and 2 GPUs; the scaling report.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
KIND=${KIND:-nvidia-h100-x4}
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
lim() { local left=$(( ${BUDGET:-575} - ($(date +%s) - T0) )); [ $left -lt $1 ] && echo $(( left > 5 ? left : 5 )) || echo $1; }
cp ../../.data/cifar_b/* ~/cifar10/ && (cd ~/cifar10 && sha256sum -c -) < cifar10.sha256 || { echo "CIFAR-10 incomplete"; exit 1; }
ls ~/.cache/triton_playground/autotune | head -3; ls ~/.cache/triton_playground/autotune | wc -l
mkdir -p $OUT/ddp
S="--model resnet18 --data $HOME/cifar10 --amp bf16 --scaling 32,128,512,2048,8192 --warmup-iters 200 --bench-steps 30 --machine $KIND --out-dir $OUT/ddp --no-progress"
for backend in eager triton+graph; do
  for g in 1 4 2; do
    el "resnet ddp $backend $g GPU"
    timeout $(BUDGET=540 lim ${RUN_TIMEOUT:-120}) torchrun --nproc-per-node $g --master-port 29403 -m bench.resnet $S --backend $backend 2>&1 \
      | grep -E "^\[scaling\]|rows ->|Error|error" | head -12
  done
done
el report
timeout 30 python3 -m bench.resnet --scaling-report $OUT/ddp --out-dir $OUT/ddp 2>&1 | grep -v -i warn | tail -40
cp $OUT/ddp/*.png $OUT/ 2>/dev/null; tar czf $OUT/ddp.tgz -C $OUT ddp && rm -rf $OUT/ddp
el done
