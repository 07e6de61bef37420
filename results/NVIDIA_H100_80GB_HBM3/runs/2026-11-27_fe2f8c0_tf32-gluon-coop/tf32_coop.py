"""Experiment (issue 22): tf32 C = A @ B with B stored N-major (row-major (K, N), what `a @ b` passes), no copy of B.
Cooperative warp specialisation in Gluon: a C tile of BLOCK_M (256) x BLOCK_N (128) is computed transposed,
C^T = B^T A^T, by two consumer warpgroups. Each owns 64 of the tile's BLOCK_N columns: it reads its half of the
TMA-loaded N-major B tile into registers as wgmma's register operand (B^T, 64 x BLOCK_K), and shares the A tile
(A^T is K-major, as a row-major A is) as the shared-memory operand of a 64 x 256 product. One producer warp streams
A and both halves of B through a STAGES-deep ring (ready: one TMA transaction count; empty: both consumers arrive).
The 256-wide products keep the L2 traffic of cuBLAS's 128 x 256 tiles, which the ping-pong kernel's 128 x 128 tiles
did not. PIPE 0: load the next register operand while the current product runs, then wait for it; PIPE 1: keep one
product in flight (the operand of step k loads while step k - 1 runs). PIPE 2 / 3: the same, unrolled by two
k steps so that no load writes the registers of a product in flight (K a multiple of 2 BLOCK_K)."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

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
def _producer(a_desc, b_desc, a_smem, b0_smem, b1_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS,
              GROUP_M: gl.constexpr, PIPE: gl.constexpr, STORE: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    HALF_N: gl.constexpr = b_desc.block_type.shape[1]
    STAGES: gl.constexpr = a_smem.type.shape[0]
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, 2 * HALF_N)
    num_k = gl.cdiv(K, BLOCK_K)
    it = 0
    for tile in range(gl.program_id(0), num_tiles, NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, M, N, BLOCK_M, 2 * HALF_N, GROUP_M)
        for k in range(num_k):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + 2 * b_desc.block_type.nbytes)
            tma_load(a_desc, [off_m, k * BLOCK_K], ready.index(s), a_smem.index(s))
            tma_load(b_desc, [k * BLOCK_K, off_n], ready.index(s), b0_smem.index(s))
            tma_load(b_desc, [k * BLOCK_K, off_n + HALF_N], ready.index(s), b1_smem.index(s))
            it += 1


@gluon.jit
def _consume(a_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M: gl.constexpr,
             PIPE: gl.constexpr, HALF: gl.constexpr, STORE: gl.constexpr):
    STAGES: gl.constexpr = a_smem.type.shape[0]
    BLOCK_M: gl.constexpr = a_smem.type.shape[1]
    BLOCK_K: gl.constexpr = a_smem.type.shape[2]
    HALF_N: gl.constexpr = b_smem.type.shape[2]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 8])
    reg_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=1)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, 2 * HALF_N)
    num_k = gl.cdiv(K, BLOCK_K)
    it = 0
    for tile in range(gl.program_id(0), num_tiles, NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, M, N, BLOCK_M, 2 * HALF_N, GROUP_M)
        acc = gl.zeros([HALF_N, BLOCK_M], gl.float32, mma)
        if PIPE == 0:
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            b_t = b_smem.index(s).permute((1, 0)).load(reg_op)
            for k in range(num_k - 1):
                acc = warpgroup_mma(b_t, a_smem.index(s).permute((1, 0)), acc, is_async=True)
                s1 = (it + 1) % STAGES
                mbarrier.wait(ready.index(s1), ((it + 1) // STAGES) & 1)
                b_t = b_smem.index(s1).permute((1, 0)).load(reg_op)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                mbarrier.arrive(empty.index(s))
                it += 1
                s = s1
            acc = warpgroup_mma(b_t, a_smem.index(s).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(empty.index(s))
            it += 1
        elif PIPE == 2:
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            b_even = b_smem.index(s).permute((1, 0)).load(reg_op)
            for k in range(0, num_k, 2):
                acc = warpgroup_mma(b_even, a_smem.index(s).permute((1, 0)), acc, is_async=True)
                s1 = (it + 1) % STAGES
                mbarrier.wait(ready.index(s1), ((it + 1) // STAGES) & 1)
                b_odd = b_smem.index(s1).permute((1, 0)).load(reg_op)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                mbarrier.arrive(empty.index(s))
                acc = warpgroup_mma(b_odd, a_smem.index(s1).permute((1, 0)), acc, is_async=True)
                s2 = (it + 2) % STAGES
                if k + 2 < num_k:
                    mbarrier.wait(ready.index(s2), ((it + 2) // STAGES) & 1)
                    b_even = b_smem.index(s2).permute((1, 0)).load(reg_op)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                mbarrier.arrive(empty.index(s1))
                it += 2
                s = s2
        elif PIPE == 3:
            for k in range(0, num_k, 2):
                s = it % STAGES
                mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                b_even = b_smem.index(s).permute((1, 0)).load(reg_op)
                acc = warpgroup_mma(b_even, a_smem.index(s).permute((1, 0)), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
                mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k > 0)
                s1 = (it + 1) % STAGES
                mbarrier.wait(ready.index(s1), ((it + 1) // STAGES) & 1)
                b_odd = b_smem.index(s1).permute((1, 0)).load(reg_op)
                acc = warpgroup_mma(b_odd, a_smem.index(s1).permute((1, 0)), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
                mbarrier.arrive(empty.index(s))
                it += 2
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
        else:
            for k in range(num_k):
                s = it % STAGES
                mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                b_t = b_smem.index(s).permute((1, 0)).load(reg_op)
                acc = warpgroup_mma(b_t, a_smem.index(s).permute((1, 0)), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
                mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=k > 0)
                it += 1
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
        offs_n = off_n + HALF * HALF_N + gl.arange(0, HALF_N, layout=gl.SliceLayout(1, mma))
        offs_m = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, mma))
        ptrs = c_ptr + gl.expand_dims(offs_m, 0) * stride_cm + gl.expand_dims(offs_n, 1)
        mask = gl.expand_dims(offs_m < M, 0) & gl.expand_dims(offs_n < N, 1)
        if STORE:
            gl.store(ptrs, acc, mask=mask)
        else:  # timing only: store one value per tile, so the products are not dead code
            gl.store(ptrs, acc, mask=mask & (gl.expand_dims(offs_m, 0) == off_m) & (gl.expand_dims(offs_n, 1) == off_n))


@gluon.jit
def _consumer0(a_desc, b_desc, a_smem, b0_smem, b1_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS,
               GROUP_M: gl.constexpr, PIPE: gl.constexpr, STORE: gl.constexpr):
    _consume(a_smem, b0_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M, PIPE, 0, STORE)


@gluon.jit
def _consumer1(a_desc, b_desc, a_smem, b0_smem, b1_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS,
               GROUP_M: gl.constexpr, PIPE: gl.constexpr, STORE: gl.constexpr):
    _consume(a_smem, b1_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M, PIPE, 1, STORE)


@gluon.jit
def tf32_coop_kernel(a_desc, b_desc, c_ptr, M, N, K, stride_cm, NUM_PROGS, STAGES: gl.constexpr,
                     GROUP_M: gl.constexpr, PIPE: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                     PRODUCER_REGS: gl.constexpr, STORE: gl.constexpr):
    a_smem = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b0_smem = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    b1_smem = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    fence_async_shared()
    gl.warp_specialize([
        (_consumer0, (a_desc, b_desc, a_smem, b0_smem, b1_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS,
                      GROUP_M, PIPE, STORE)),
        (_consumer1, (a_desc, b_desc, a_smem, b0_smem, b1_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS,
                      GROUP_M, PIPE, STORE)),
        (_producer, (a_desc, b_desc, a_smem, b0_smem, b1_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS,
                     GROUP_M, PIPE, STORE))], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


def launch(a, b, c, block_m=256, block_n=128, block_k=32, stages=4, group_m=8, pipe=0, consumer_regs=232,
           producer_regs=24, b_swizzle=128, num_progs=None, store=True):
    """c = a @ b (fp32 in, tf32 products, fp32 out); a (M, K), b (K, N), c (M, N) row-major."""
    import torch
    import triton
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    M, K = a.shape
    N = b.shape[1]
    a_layout = gl.NVMMASharedLayout.get_default_for([block_m, block_k], gl.float32)
    b_layout = gl.NVMMASharedLayout(swizzle_byte_width=b_swizzle, element_bitwidth=32, rank=2)
    a_desc = TensorDescriptor(a, list(a.shape), list(a.stride()), [block_m, block_k], a_layout)
    b_desc = TensorDescriptor(b, list(b.shape), list(b.stride()), [block_k, block_n // 2], b_layout)
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    progs = min(tiles, num_progs or torch.cuda.get_device_properties(a.device).multi_processor_count)
    tf32_coop_kernel[(progs,)](a_desc, b_desc, c, M, N, K, c.stride(0), progs, STAGES=stages, GROUP_M=group_m,
                               PIPE=pipe, CONSUMER_REGS=consumer_regs, PRODUCER_REGS=producer_regs, STORE=store,
                               num_warps=4)
