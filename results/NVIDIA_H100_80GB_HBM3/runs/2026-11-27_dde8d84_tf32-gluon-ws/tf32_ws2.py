"""Experiment (issue 22): tf32_ws.py with the tile's two 64-row halves in two consumer partitions of one warpgroup
each (the default partition and a worker), each with its own half of A's ring and both reading B's: a stage is free
once both have arrived on its `empty` barrier (count 2), so no CTA-wide barrier per k step. Workers share one
argument list: the producer and the second consumer take the same arguments."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from tf32_ws import _tile_offsets, tma_load


@gluon.jit
def _producer(a_desc, b_desc, a0_smem, a1_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS,
              GROUP_M: gl.constexpr):
    HALF_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    STAGES: gl.constexpr = b_smem.type.shape[0]
    num_tiles = gl.cdiv(M, 2 * HALF_M) * gl.cdiv(N, BLOCK_N)
    num_k = gl.cdiv(K, BLOCK_K)
    it = 0
    for tile in range(gl.program_id(0), num_tiles, NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, M, N, 2 * HALF_M, BLOCK_N, GROUP_M)
        for k in range(num_k):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), 2 * a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma_load(a_desc, [off_m, k * BLOCK_K], ready.index(s), a0_smem.index(s))
            tma_load(a_desc, [off_m + HALF_M, k * BLOCK_K], ready.index(s), a1_smem.index(s))
            tma_load(b_desc, [off_n, k * BLOCK_K], ready.index(s), b_smem.index(s))
            it += 1


@gluon.jit
def _consume(a_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M: gl.constexpr,
             HALF: gl.constexpr):
    STAGES: gl.constexpr = b_smem.type.shape[0]
    HALF_M: gl.constexpr = a_smem.type.shape[1]
    BLOCK_K: gl.constexpr = a_smem.type.shape[2]
    BLOCK_N: gl.constexpr = b_smem.type.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 8])
    num_tiles = gl.cdiv(M, 2 * HALF_M) * gl.cdiv(N, BLOCK_N)
    num_k = gl.cdiv(K, BLOCK_K)
    it = 0
    for tile in range(gl.program_id(0), num_tiles, NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, M, N, 2 * HALF_M, BLOCK_N, GROUP_M)
        acc = gl.zeros([HALF_M, BLOCK_N], gl.float32, mma)
        for k in range(num_k):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            acc = warpgroup_mma(a_smem.index(s), b_smem.index(s).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k > 0)
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
        offs_m = off_m + HALF * HALF_M + gl.arange(0, HALF_M, layout=gl.SliceLayout(1, mma))
        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
        ptrs = c_ptr + gl.expand_dims(offs_m, 1) * stride_cm + gl.expand_dims(offs_n, 0)
        mask = gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0)
        gl.store(ptrs, acc, mask=mask)


@gluon.jit
def _consumer_lo(a0_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M: gl.constexpr):
    _consume(a0_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M, 0)


@gluon.jit
def _consumer_hi(a_desc, b_desc, a0_smem, a1_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS,
                 GROUP_M: gl.constexpr):
    _consume(a1_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M, 1)


@gluon.jit
def tf32_ws2_kernel(a_desc, b_desc, c_ptr, M, N, K, stride_cm, NUM_PROGS, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                    CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    a0_smem = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    a1_smem = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    fence_async_shared()
    worker_args = (a_desc, b_desc, a0_smem, a1_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M)
    gl.warp_specialize([
        (_consumer_lo, (a0_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M)),
        (_consumer_hi, worker_args),
        (_producer, worker_args),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


def launch(a, b_nk, c, block_n=256, block_k=32, stages=4, group_m=8, consumer_regs=232, producer_regs=24,
           num_progs=None):
    """c = a @ b_nk.T (fp32 in, tf32 products, fp32 out): 128-row tiles as two 64-row halves."""
    import torch
    import triton
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    M, K = a.shape
    N = b_nk.shape[0]
    a_layout = gl.NVMMASharedLayout.get_default_for([64, block_k], gl.float32)
    b_layout = gl.NVMMASharedLayout.get_default_for([block_n, block_k], gl.float32)
    a_desc = TensorDescriptor(a, list(a.shape), list(a.stride()), [64, block_k], a_layout)
    b_desc = TensorDescriptor(b_nk, list(b_nk.shape), list(b_nk.stride()), [block_n, block_k], b_layout)
    tiles = triton.cdiv(M, 128) * triton.cdiv(N, block_n)
    progs = min(tiles, num_progs or torch.cuda.get_device_properties(a.device).multi_processor_count)
    tf32_ws2_kernel[(progs,)](a_desc, b_desc, c, M, N, K, c.stride(0), progs, STAGES=stages, GROUP_M=group_m,
                              CONSUMER_REGS=consumer_regs, PRODUCER_REGS=producer_regs, num_warps=4)
