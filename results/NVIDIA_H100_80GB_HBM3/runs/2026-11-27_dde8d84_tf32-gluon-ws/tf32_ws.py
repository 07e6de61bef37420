"""Experiment (issue 22): tf32 C = A @ B^T with B stored K-major (nn.Linear's weight layout), a persistent
warp-specialised Gluon kernel: one producer warp streams A and B tiles through a STAGES-deep ring of shared-memory
buffers with TMA (ready / empty mbarriers), while the default partition (num_warps warps, 64 rows of the tile per
warpgroup) issues the wgmma products, keeps one in flight, frees each stage once its product is done, and stores
its C tile while the producer already fills the ring for the next tile (the epilogue overlaps the loads)."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier
tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared


@gluon.jit
def _tile_offsets(tile, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    grid_m = gl.cdiv(M, BLOCK_M)
    grid_n = gl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    first_m = (tile // width) * GROUP_M
    size_m = gl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % width) % size_m
    pid_n = (tile % width) // size_m
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def _producer(a_desc, b_desc, a_smem, b_smem, ready, empty, M, N, K, NUM_PROGS, GROUP_M: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    STAGES: gl.constexpr = a_smem.type.shape[0]
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    num_k = gl.cdiv(K, BLOCK_K)
    it = 0
    for tile in range(gl.program_id(0), num_tiles, NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for k in range(num_k):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma_load(a_desc, [off_m, k * BLOCK_K], ready.index(s), a_smem.index(s))
            tma_load(b_desc, [off_n, k * BLOCK_K], ready.index(s), b_smem.index(s))
            it += 1


@gluon.jit
def _consumer(a_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M: gl.constexpr,
              num_warps: gl.constexpr):
    STAGES: gl.constexpr = a_smem.type.shape[0]
    BLOCK_M: gl.constexpr = a_smem.type.shape[1]
    BLOCK_K: gl.constexpr = a_smem.type.shape[2]
    BLOCK_N: gl.constexpr = b_smem.type.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, BLOCK_N, 8])
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    num_k = gl.cdiv(K, BLOCK_K)
    it = 0
    for tile in range(gl.program_id(0), num_tiles, NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma)
        for k in range(num_k):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            acc = warpgroup_mma(a_smem.index(s), b_smem.index(s).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            cta_barrier()  # both warpgroups are past the product of step it - 1: its stage is free
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k > 0)
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        cta_barrier()
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
        offs_m = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, mma))
        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma))
        ptrs = c_ptr + gl.expand_dims(offs_m, 1) * stride_cm + gl.expand_dims(offs_n, 0)
        mask = gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0)
        gl.store(ptrs, acc, mask=mask)


@gluon.jit
def tf32_ws_kernel(a_desc, b_desc, c_ptr, M, N, K, stride_cm, NUM_PROGS, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                   PRODUCER_REGS: gl.constexpr, num_warps: gl.constexpr):
    a_smem = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (a_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M, num_warps)),
        (_producer, (a_desc, b_desc, a_smem, b_smem, ready, empty, M, N, K, NUM_PROGS, GROUP_M)),
    ], [1], [PRODUCER_REGS])


def launch(a, b_nk, c, block_m=128, block_n=256, block_k=32, stages=4, group_m=8, num_warps=8, producer_regs=24,
           maxnreg=None, num_progs=None):
    """c = a @ b_nk.T (fp32 in, tf32 products, fp32 out); a (M, K), b_nk (N, K), c (M, N) row-major."""
    import torch
    import triton
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    M, K = a.shape
    N = b_nk.shape[0]
    a_layout = gl.NVMMASharedLayout.get_default_for([block_m, block_k], gl.float32)
    b_layout = gl.NVMMASharedLayout.get_default_for([block_n, block_k], gl.float32)
    a_desc = TensorDescriptor(a, list(a.shape), list(a.stride()), [block_m, block_k], a_layout)
    b_desc = TensorDescriptor(b_nk, list(b_nk.shape), list(b_nk.stride()), [block_n, block_k], b_layout)
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    progs = min(tiles, num_progs or torch.cuda.get_device_properties(a.device).multi_processor_count)
    opts = dict(num_warps=num_warps)
    if maxnreg:
        opts["maxnreg"] = maxnreg
    tf32_ws_kernel[(progs,)](a_desc, b_desc, c, M, N, K, c.stride(0), progs, STAGES=stages, GROUP_M=group_m,
                             PRODUCER_REGS=producer_regs, **opts)
