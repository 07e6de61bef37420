"""Experiment (issue 22): tf32 C = A @ B with a row-major (N-major) B, without a copy of B, in Gluon.

Each program computes its C tile transposed, C^T = B^T A^T: B^T (BLOCK_N x BLOCK_K, read out of the TMA-loaded
N-major B tile) is wgmma's register operand, which may come in any order; A^T is the shared-memory operand, K-major
as a row-major A is. A register operand must stay unchanged until its product completes. IN_FLIGHT products run
while the next register operand is loaded, so the K loop is unrolled IN_FLIGHT + 1 times: each unrolled step loads
into registers of its own, which the product IN_FLIGHT + 1 steps earlier, the last one to read them, has finished
with (in a plain loop every iteration's load writes the same registers as the product still running)."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

# names that changed after Triton 3.6 (the GPU's): the CTA barrier and the TMA load
cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier
tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared


@gluon.jit
def _load_tile(i, a_desc, b_desc, a_smem, b_smem, bars, off_m, off_n, STAGES: gl.constexpr, BLOCK_K: gl.constexpr):
    s = i % STAGES
    mbarrier.expect(bars.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma_load(a_desc, [off_m, i * BLOCK_K], bars.index(s), a_smem.index(s))
    tma_load(b_desc, [i * BLOCK_K, off_n], bars.index(s), b_smem.index(s))


@gluon.jit
def _step(k, acc, num_k, a_desc, b_desc, a_smem, b_smem, bars, off_m, off_n, reg_op: gl.constexpr,
          STAGES: gl.constexpr, IN_FLIGHT: gl.constexpr, BLOCK_K: gl.constexpr, WAIT: gl.constexpr):
    """Tile k: wait for its data, B^T into registers, its product issued; then wait until WAIT products are left
    running, and once every warp is there (the two warpgroups share the stages) load tile k - WAIT + STAGES into
    the stage of tile k - WAIT, whose product is done."""
    s = k % STAGES
    mbarrier.wait(bars.index(s), (k // STAGES) & 1)
    b_t = b_smem.index(s).permute((1, 0)).load(reg_op)
    acc = warpgroup_mma(b_t, a_smem.index(s).permute((1, 0)), acc, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=WAIT, deps=(acc, ))
    cta_barrier()
    j = k - WAIT
    if (j >= 0) & (j + STAGES < num_k):
        _load_tile(j + STAGES, a_desc, b_desc, a_smem, b_smem, bars, off_m, off_n, STAGES, BLOCK_K)
    return acc


@gluon.jit
def tf32_swap_kernel(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn,
                     STAGES: gl.constexpr, IN_FLIGHT: gl.constexpr, GROUP_M: gl.constexpr,
                     INSTR_N: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[1]
    UNROLL: gl.constexpr = IN_FLIGHT + 1
    # accumulator of C^T: BLOCK_N rows (n) split over the warps, BLOCK_M columns (m)
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, INSTR_N, 8])
    reg_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=1)

    pid = gl.program_id(0)
    grid_m = gl.cdiv(M, BLOCK_M)
    grid_n = gl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    size_m = gl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N

    a_smem = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()
    num_k = gl.cdiv(K, BLOCK_K)
    for i in gl.static_range(STAGES):
        if i < num_k:
            _load_tile(i, a_desc, b_desc, a_smem, b_smem, bars, off_m, off_n, STAGES, BLOCK_K)

    # tile 0 peeled off (the launcher asks K >= BLOCK_K): the accumulator is first defined by a product, not by
    # register moves inside a product's pipeline stage (which would make ptxas serialise every product)
    mbarrier.wait(bars.index(0), 0)
    b_t = b_smem.index(0).permute((1, 0)).load(reg_op)
    acc = warpgroup_mma(b_t, a_smem.index(0).permute((1, 0)), gl.zeros([BLOCK_N, BLOCK_M], gl.float32, mma),
                        use_acc=False, is_async=True)
    acc = warpgroup_mma_wait(num_outstanding=IN_FLIGHT, deps=(acc, ))
    cta_barrier()
    if IN_FLIGHT == 0:
        if STAGES < num_k:
            _load_tile(STAGES, a_desc, b_desc, a_smem, b_smem, bars, off_m, off_n, STAGES, BLOCK_K)
    last = 1 + ((num_k - 1) // UNROLL) * UNROLL
    for k0 in range(1, last, UNROLL):
        for u in gl.static_range(UNROLL):
            acc = _step(k0 + u, acc, num_k, a_desc, b_desc, a_smem, b_smem, bars, off_m, off_n, reg_op, STAGES,
                        IN_FLIGHT, BLOCK_K, IN_FLIGHT)
    # the last (num_k - 1) % UNROLL tiles, each waited for (a plain loop would rewrite registers in use)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    for k in range(last, num_k):
        acc = _step(k, acc, num_k, a_desc, b_desc, a_smem, b_smem, bars, off_m, off_n, reg_op, STAGES,
                    IN_FLIGHT, BLOCK_K, 0)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))

    # C[m, n] = acc[n, m]: each thread's registers cover 8 consecutive n (32 bytes of a row of C) per m
    offs_n = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
    offs_m = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, mma))
    ptrs = c_ptr + gl.expand_dims(offs_m, 0) * stride_cm + gl.expand_dims(offs_n, 1) * stride_cn
    mask = gl.expand_dims(offs_m < M, 0) & gl.expand_dims(offs_n < N, 1)
    gl.store(ptrs, acc, mask=mask)


def launch(a, b, c, block_m=256, block_n=128, block_k=32, stages=4, in_flight=1, group_m=8, num_warps=8, b_swizzle=128):
    """c = a @ b (fp32, tf32 products) for row-major a (M, K), b (K, N), c (M, N); K >= block_k."""
    import triton
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    M, K = a.shape
    N = b.shape[1]
    assert K >= block_k and stages > in_flight
    a_layout = gl.NVMMASharedLayout.get_default_for([block_m, block_k], gl.float32)
    # B's tile is only read into registers: its swizzle sets the bank conflicts of those loads (with 32-byte
    # swizzling the 4 k x 8 n values of one load fall in 32 different banks)
    b_layout = gl.NVMMASharedLayout(swizzle_byte_width=b_swizzle, element_bitwidth=32, rank=2)
    a_desc = TensorDescriptor(a, list(a.shape), list(a.stride()), [block_m, block_k], a_layout)
    b_desc = TensorDescriptor(b, list(b.shape), list(b.stride()), [block_k, block_n], b_layout)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    tf32_swap_kernel[grid](a_desc, b_desc, c, M, N, K, c.stride(0), c.stride(1), STAGES=stages, IN_FLIGHT=in_flight,
                           GROUP_M=group_m, INSTR_N=min(block_m, 256), num_warps=num_warps)
