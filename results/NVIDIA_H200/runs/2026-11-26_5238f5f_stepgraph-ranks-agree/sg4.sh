export PYTHONPATH=. PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 TRITON_PLAYGROUND_AUTOTUNE=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 45 torchrun --nproc-per-node 2 --standalone ra.py triton+stepgraph bf16 2>&1 | grep -v -i warn | grep -v "^step" | tail -6
echo rc=$?
