#!/usr/bin/env bash
# multi-GPU runs (x4 box): ResNet-18 DDP scaling (synthetic data, eager), Char-CNN data-parallel inference
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_CACHE=$PWD/../autotune
export TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L; nvidia-smi topo -m | head -8
( CUDA_VISIBLE_DEVICES=3 timeout 300 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_batchnorm.py tests/test_resnet.py tests/test_pool_head.py > $OUT/pytest.txt 2>&1 ) &
tests=$!
for g in 1 2; do
  echo "--- resnet ddp $g GPU ($(date +%T))"
  timeout 200 torchrun --nproc-per-node $g -m bench.resnet --model resnet18 --synthetic --amp bf16 --backend eager \
    --scaling 128,512,1024,2048 --warmup-iters 20 --bench-steps 20 --out-dir $OUT/ddp --no-progress 2>&1 | grep -E "^\[scaling\]|rows ->|Error|error" | head -20
done
wait $tests; tail -2 $OUT/pytest.txt
echo "--- resnet ddp 4 GPU ($(date +%T))"
timeout 200 torchrun --nproc-per-node 4 -m bench.resnet --model resnet18 --synthetic --amp bf16 --backend eager \
  --scaling 128,512,1024,2048 --warmup-iters 20 --bench-steps 20 --out-dir $OUT/ddp --no-progress 2>&1 | grep -E "^\[scaling\]|rows ->|Error|error" | head -20
python3 -m bench.resnet --scaling-report $OUT/ddp --out-dir $OUT/ddp 2>&1 | grep -v -i warn | tail -20
echo "--- char-cnn weights ($(date +%T))"
timeout 120 python3 -m bench.char_cnn train --no-progress --data ../../.data/ag_news --out /tmp/train 2>&1 | tail -1
for g in 1 2 4; do
  echo "--- char-cnn dp $g GPU ($(date +%T))"
  timeout 200 torchrun --nproc-per-node $g -m bench.char_cnn_dp --batch 512 --backend triton --machine nvidia-h100-x4 \
    --data ../../.data/ag_news --out $OUT/dp 2>&1 | grep -v -i warn | tail -12
done
echo "--- done ($(date +%T))"
