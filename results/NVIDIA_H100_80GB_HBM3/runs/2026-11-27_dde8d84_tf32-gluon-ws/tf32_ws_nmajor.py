"""Experiment (issue 22): tf32 C = A @ B with B stored N-major (row-major (K, N), what `a @ b` passes), without a
copy of B: warp-specialised ping-pong in Gluon. Each consumer warpgroup computes whole C tiles transposed,
C^T = B^T A^T, with B^T (read out of the TMA-loaded N-major B tile into registers) as wgmma's register operand and
A^T as the shared-memory one (K-major, as a row-major A is), waiting for each product before it loads the next
register operand. Two consumers work on alternate tiles, so one's register loads overlap the other's products; each
has its own producer warp and ring of stages."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from tf32_ws import _tile_offsets, tma_load


@gluon.jit
def _produce(a_desc, b_desc, a_smem, b_smem, ready, empty, M, N, K, NUM_PROGS, GROUP_M: gl.constexpr,
             ROLE: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[1]
    STAGES: gl.constexpr = a_smem.type.shape[0]
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    num_k = gl.cdiv(K, BLOCK_K)
    it = 0
    for tile in range(gl.program_id(0) + ROLE * NUM_PROGS, num_tiles, 2 * NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for k in range(num_k):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma_load(a_desc, [off_m, k * BLOCK_K], ready.index(s), a_smem.index(s))
            tma_load(b_desc, [k * BLOCK_K, off_n], ready.index(s), b_smem.index(s))
            it += 1


@gluon.jit
def _consume(a_smem, b_smem, ready, empty, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M: gl.constexpr,
             ROLE: gl.constexpr):
    STAGES: gl.constexpr = a_smem.type.shape[0]
    BLOCK_M: gl.constexpr = a_smem.type.shape[1]
    BLOCK_K: gl.constexpr = a_smem.type.shape[2]
    BLOCK_N: gl.constexpr = b_smem.type.shape[2]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 8])
    reg_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=1)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    num_k = gl.cdiv(K, BLOCK_K)
    it = 0
    for tile in range(gl.program_id(0) + ROLE * NUM_PROGS, num_tiles, 2 * NUM_PROGS):
        off_m, off_n = _tile_offsets(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, mma)
        for k in range(num_k):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            b_t = b_smem.index(s).permute((1, 0)).load(reg_op)
            acc = warpgroup_mma(b_t, a_smem.index(s).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(empty.index(s))
            it += 1
        offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
        offs_m = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, mma))
        ptrs = c_ptr + gl.expand_dims(offs_m, 0) * stride_cm + gl.expand_dims(offs_n, 1)
        mask = gl.expand_dims(offs_m < M, 0) & gl.expand_dims(offs_n < N, 1)
        gl.store(ptrs, acc, mask=mask)


@gluon.jit
def _consumer0(a0, b0, ready0, empty0, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M: gl.constexpr):
    _consume(a0, b0, ready0, empty0, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M, 0)


@gluon.jit
def _consumer1(a_desc, b_desc, a0, b0, ready0, empty0, a1, b1, ready1, empty1, c_ptr, M, N, K, stride_cm, NUM_PROGS,
               GROUP_M: gl.constexpr):
    _consume(a1, b1, ready1, empty1, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M, 1)


@gluon.jit
def _producer0(a_desc, b_desc, a0, b0, ready0, empty0, a1, b1, ready1, empty1, c_ptr, M, N, K, stride_cm, NUM_PROGS,
               GROUP_M: gl.constexpr):
    _produce(a_desc, b_desc, a0, b0, ready0, empty0, M, N, K, NUM_PROGS, GROUP_M, 0)


@gluon.jit
def _producer1(a_desc, b_desc, a0, b0, ready0, empty0, a1, b1, ready1, empty1, c_ptr, M, N, K, stride_cm, NUM_PROGS,
               GROUP_M: gl.constexpr):
    _produce(a_desc, b_desc, a1, b1, ready1, empty1, M, N, K, NUM_PROGS, GROUP_M, 1)


@gluon.jit
def tf32_nmajor_kernel(a_desc, b_desc, c_ptr, M, N, K, stride_cm, NUM_PROGS, STAGES: gl.constexpr,
                       GROUP_M: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    a0 = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b0 = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    a1 = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b1 = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready0 = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty0 = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ready1 = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty1 = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready0.index(i), count=1)
        mbarrier.init(empty0.index(i), count=1)
        mbarrier.init(ready1.index(i), count=1)
        mbarrier.init(empty1.index(i), count=1)
    fence_async_shared()
    args = (a_desc, b_desc, a0, b0, ready0, empty0, a1, b1, ready1, empty1, c_ptr, M, N, K, stride_cm, NUM_PROGS,
            GROUP_M)
    gl.warp_specialize([
        (_consumer0, (a0, b0, ready0, empty0, c_ptr, M, N, K, stride_cm, NUM_PROGS, GROUP_M)),
        (_consumer1, args), (_producer0, args), (_producer1, args),
    ], [4, 1, 1], [CONSUMER_REGS, PRODUCER_REGS, PRODUCER_REGS])


def launch(a, b, c, block_m=128, block_n=128, block_k=32, stages=3, group_m=8, consumer_regs=232, producer_regs=24,
           b_swizzle=128, num_progs=None):
    """c = a @ b (fp32 in, tf32 products, fp32 out); a (M, K), b (K, N), c (M, N) row-major."""
    import torch
    import triton
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    M, K = a.shape
    N = b.shape[1]
    a_layout = gl.NVMMASharedLayout.get_default_for([block_m, block_k], gl.float32)
    b_layout = gl.NVMMASharedLayout(swizzle_byte_width=b_swizzle, element_bitwidth=32, rank=2)
    a_desc = TensorDescriptor(a, list(a.shape), list(a.stride()), [block_m, block_k], a_layout)
    b_desc = TensorDescriptor(b, list(b.shape), list(b.stride()), [block_k, block_n], b_layout)
    tiles = triton.cdiv(M, block_m) * triton.cdiv(N, block_n)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    progs = min(triton.cdiv(tiles, 2), num_progs or sms)
    tf32_nmajor_kernel[(progs,)](a_desc, b_desc, c, M, N, K, c.stride(0), progs, STAGES=stages, GROUP_M=group_m,
                                 CONSUMER_REGS=consumer_regs, PRODUCER_REGS=producer_regs, num_warps=4)
