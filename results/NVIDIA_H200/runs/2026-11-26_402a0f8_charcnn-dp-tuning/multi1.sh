#!/usr/bin/env bash
# multi-GPU call 1 (4-GPU box): CIFAR-10 part A to ~/cifar10; the triton backend's tuning (ResNet-18 at each
# per-GPU batch, Char-CNN at each batch; the configs stay in ~/.cache for the next call); Char-CNN
# data-parallel inference timed on 1, 2 and 4 GPUs; the DDP + CUDA-graph GPU test.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
KIND=${KIND:-nvidia-h100-x4}
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
lim() { local left=$(( ${BUDGET:-575} - ($(date +%s) - T0) )); [ $left -lt $1 ] && echo $(( left > 5 ? left : 5 )) || echo $1; }
mkdir -p ~/cifar10 $OUT/dp && cp ../../.data/cifar_a/* ~/cifar10/ && ls ~/cifar10
nvidia-smi -L; nvidia-smi topo -m | head -6; nproc
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.device_count())"
tune() {  # GPU, per-GPU batch, limit
  CUDA_VISIBLE_DEVICES=$1 timeout $3 python3 -m bench.resnet --synthetic --amp bf16 --backend triton --batch-size $2 \
    --bench-steps 2 --bench-rounds 1 --warmup-iters 3 --out-dir /tmp/tune$2 --no-progress > /tmp/tune$2.log 2>&1
}
el "tuning: ResNet-18 triton at 128/512/2048 on GPUs 1-3; Char-CNN, then ResNet at 32, on GPU 0"
tune 1 128 300 & tune 2 512 300 & tune 3 2048 300 &
( CUDA_VISIBLE_DEVICES=0 timeout 200 torchrun --nproc-per-node 1 --master-port 29400 -m bench.char_cnn_dp \
    --batch 512,2048,8192 --rounds 1 --backend triton --data .data/ag_news --no-write > /tmp/tune_dp.log 2>&1
  tune 0 32 150 ) &
wait
el "tuned"; grep -h "first step\|Error" /tmp/tune*.log; grep -E "inputs_per_s|Error" /tmp/tune_dp.log | head -4
el "ResNet tuning at 8192 on GPU 3, beside Char-CNN on 1 and 2 GPUs (GPUs 0, 1)"
tune 3 8192 $(lim 240) &
for g in 1 2; do
  el "char-cnn dp triton $g GPU"
  CUDA_VISIBLE_DEVICES=0,1 timeout $(lim 120) torchrun --nproc-per-node $g --master-port 29401 -m bench.char_cnn_dp \
    --batch 512,2048,8192 --backend triton --machine $KIND --data .data/ag_news --out $OUT/dp 2>&1 \
    | grep -v -i warn | grep -E "inputs_per_s|speedup|match|overlap_speedup|Error|rows" | head -30
done
wait; el "tuned 8192"; grep -h "first step\|Error" /tmp/tune8192.log
el "char-cnn dp triton 4 GPU"
timeout $(lim 120) torchrun --nproc-per-node 4 --master-port 29401 -m bench.char_cnn_dp --batch 512,2048,8192 \
  --backend triton --machine $KIND --data .data/ag_news --out $OUT/dp 2>&1 \
  | grep -v -i warn | grep -E "inputs_per_s|speedup|match|overlap_speedup|latency|Error|rows" | head -60
el "DDP graph test"
timeout $(lim 150) python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_resnet.py -k ddp_graphed \
  > $OUT/pytest.txt 2>&1; tail -3 $OUT/pytest.txt
tar czf $OUT/autotune.tgz -C ~/.cache/triton_playground autotune
el done
