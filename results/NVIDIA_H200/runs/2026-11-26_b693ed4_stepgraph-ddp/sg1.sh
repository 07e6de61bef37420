#!/usr/bin/env bash
# 4-GPU call: +stepgraph GPU tests (1 and 2 GPUs), then ResNet-18 DDP scaling (synthetic, bf16) of triton+stepgraph
# on 1, 2, 4 GPUs and triton+graph on 1 and 4 GPUs (same box), and the scaling report.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
KIND=nvidia-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)-x$(nvidia-smi -L | wc -l)
echo "KIND $KIND"; nvidia-smi -L
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
lim() { local left=$(( ${BUDGET:-570} - ($(date +%s) - T0) )); [ $left -lt $1 ] && echo $(( left > 5 ? left : 5 )) || echo $1; }
mkdir -p ~/.cache/triton_playground && cp -r ../../.data/autotune_cache/autotune ~/.cache/triton_playground/
if [ -z "${NO_TESTS:-}" ]; then el tests
timeout $(lim 240) python -m pytest -q -m gpu tests/test_resnet.py -k "step_graph or ddp_graphed" -p no:cacheprovider 2>&1 | tail -15 | tee $OUT/pytest.txt; fi
mkdir -p $OUT/ddp
S="--model resnet18 --synthetic --amp bf16 --warmup-iters 200 --bench-steps 30 --machine $KIND --out-dir $OUT/ddp --no-progress"
for g in ${SG_GPUS:-1 4}; do
  el "triton+stepgraph $g GPU"
  timeout $(lim 110) torchrun --nproc-per-node $g --master-port 2940$g -m bench.resnet $S --backend triton+stepgraph --scaling 128,512,2048 2>&1 \
    | grep -E "^\[scaling\]|rows ->|Error|error" | head -12
done
for g in ${G_GPUS:-}; do
  el "triton+graph $g GPU"
  timeout $(lim 60) torchrun --nproc-per-node $g --master-port 2941$g -m bench.resnet $S --backend triton+graph --scaling 128,512 2>&1 \
    | grep -E "^\[scaling\]|rows ->|Error|error" | head -12
done
python -m bench.resnet --scaling-report $OUT/ddp --out-dir $OUT/ddp 2>&1 | grep -v -i warn | tail -30
tar czf $OUT/ddp.tgz -C $OUT ddp && rm -rf $OUT/ddp
el done
