#!/usr/bin/env bash
# multi-GPU call 3 (4-GPU box): the tuned configs of call 1 restored, CIFAR-10 part A to ~/cifar10; Char-CNN
# data-parallel inference: triton on 1 GPU again (quiet box), torch.compile on 1 and 4 GPUs; the DDP graph test.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
KIND=nvidia-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)-x$(nvidia-smi -L | wc -l)
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
lim() { local left=$(( ${BUDGET:-560} - ($(date +%s) - T0) )); [ $left -lt $1 ] && echo $(( left > 5 ? left : 5 )) || echo $1; }
mkdir -p ~/cifar10 ~/.cache/triton_playground $OUT/dp && cp ../../.data/cifar_a/* ~/cifar10/
cp -r ../../.data/autotune_cache/autotune ~/.cache/triton_playground/ && ls ~/.cache/triton_playground/autotune | wc -l
nvidia-smi -L
el "char-cnn dp triton 1 GPU (quiet)"
timeout $(lim 100) torchrun --nproc-per-node 1 --master-port 29401 -m bench.char_cnn_dp --batch 512,2048,8192 \
  --backend triton --machine $KIND --data .data/ag_news --out $OUT/dp 2>&1 \
  | grep -v -i warn | grep -E "inputs_per_s|match|Error|rows" | head -20
for g in 1 4; do
  el "char-cnn dp compile $g GPU"
  timeout $(lim 130) torchrun --nproc-per-node $g --master-port 29402 -m bench.char_cnn_dp --batch 512,2048,8192 \
    --backend compile --machine $KIND --data .data/ag_news --out $OUT/dp 2>&1 \
    | grep -v -i warn | grep -E "inputs_per_s|speedup|match|Error|rows" | head -30
done
el "DDP graph test (2 GPUs)"
timeout $(lim 150) python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_resnet.py -k ranks_agree \
  > $OUT/pytest.txt 2>&1; tail -3 $OUT/pytest.txt
el done
