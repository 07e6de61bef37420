"""tf32 GEMM with an N-major B on Hopper, in Gluon: C = act(A @ B + bias) (+ residual), A (M, K) row-major and
B (K, N) row-major: what ``a @ b`` passes, nn.Linear's dX = dY @ W, and (on a row-major copy of dY^T, made by
gemm.plan_launches) its dW = dY^T @ X.

Why a kernel of its own: tf32 wgmma reads a shared-memory operand only K-major, so the Triton kernels must copy an
N-major B into the other layout first (gemm.relayout; 50 of ~400 us at 4096^3 on an H100). Here the product is
computed transposed, C^T = B^T A^T: B^T is wgmma's *register* operand, which may come from any shared-memory
layout, and A^T is K-major as a row-major A already is. So B is read where it lies.

Tiling: a persistent program per SM loops over BLOCK_M x BLOCK_N tiles of C (grouped order, as the Triton
kernels). It is warp-specialised: one producer warp streams the A tile (BLOCK_M x BLOCK_K) and the B tile, in two
BLOCK_K x BLOCK_N / 2 halves, by TMA into a ring of STAGES shared-memory stages (``ready`` barriers count the
bytes in, ``empty`` ones count both consumers out). Two consumer warpgroups each own one half of B's columns:
each multiplies its (BLOCK_N / 2) x BLOCK_K slice of B^T, loaded into registers, by the shared A^T tile into a
(BLOCK_N / 2) x BLOCK_M accumulator (BLOCK_N = 128: 64 x BLOCK_M wgmmas; with BLOCK_M = 256, the widest, A and B
are read from the L2 as often as with cuBLAS's 128 x 256 tiles; narrower tiles give small outputs more programs).
The k steps are unrolled by two, so the register operand of the next step loads while the current product runs
without overwriting registers a product in flight still reads (ptxas would serialise the products). The
epilogue (bias, Z, activation, residual, cast: gemm_kernels._epilogue) runs on each accumulator, transposed in
registers to C's tile.
"""
from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .gemm_kernels import _epilogue, _tile_coords

# Triton releases before 3.6 lack the Gluon API this kernel is written in (an offline sm_90 compile fails with
# 3.5; 3.4 has no warpgroup_mma): there gemm.nmajor_eligible offers the kernel nowhere, and a tf32 GEMM with an
# N-major B takes the TMA kernel on a K-major copy of B
AVAILABLE = tuple(int(part) for part in triton.__version__.split(".")[:2]) >= (3, 6)
if AVAILABLE:
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                                  warpgroup_mma_wait)

    # the TMA load of a tile into shared memory: async_copy_global_to_shared in Triton 3.6, async_load in later
    # releases (in 3.9 the old name only raises)
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

# registers per thread (setmaxnreg) of a consumer warpgroup: the 128 of a 64 x 256 fp32 accumulator, 32 of two
# register operands, addresses; the producer warp needs few
CONSUMER_REGS = gl.constexpr(232)
PRODUCER_REGS = gl.constexpr(24)


@gluon.jit
def _producer(a_desc, b_desc, a_smem, b_smem0, b_smem1, ready, empty, M, N, K, NUM_PROGS,
              GROUP_M: gl.constexpr):
    """The producer warp: for every k step of every tile of this program, wait for a free stage, then load A's
    tile and B's two halves into it by TMA (out-of-range parts read as zero)."""
    STAGES: gl.constexpr = a_smem.type.shape[0]
    BLOCK_M: gl.constexpr = a_smem.type.shape[1]
    BLOCK_K: gl.constexpr = a_smem.type.shape[2]
    HALF_N: gl.constexpr = b_smem0.type.shape[2]
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, 2 * HALF_N)
    k_steps = gl.cdiv(K, 2 * BLOCK_K) * 2  # even (the consumers' unrolled loop): a step past K reads zeros
    it = 0
    for tile in range(gl.program_id(0), num_tiles, NUM_PROGS):
        pid_m, pid_n = _tile_coords(tile, M, N, BLOCK_M, 2 * HALF_N, GROUP_M)
        for ki in range(k_steps):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + 2 * b_desc.block_type.nbytes)
            _tma_load(a_desc, [pid_m * BLOCK_M, ki * BLOCK_K], ready.index(s), a_smem.index(s))
            _tma_load(b_desc, [ki * BLOCK_K, pid_n * 2 * HALF_N], ready.index(s), b_smem0.index(s))
            _tma_load(b_desc, [ki * BLOCK_K, pid_n * 2 * HALF_N + HALF_N], ready.index(s), b_smem1.index(s))
            it += 1


@gluon.jit
def _consume(a_smem, b_smem, ready, empty, c_ptr, bias_ptr, res_ptr, z_ptr, M, N, K, NUM_PROGS, stride_cm, stride_cn,
             stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HALF: gl.constexpr, HAS_BIAS: gl.constexpr,
             HAS_RES: gl.constexpr, SAVE_Z: gl.constexpr, ACT: gl.constexpr, GROUP_M: gl.constexpr):
    """A consumer warpgroup: columns [HALF * BLOCK_N / 2, (HALF + 1) * BLOCK_N / 2) of every tile of this program,
    as the transposed accumulator (C^T's rows); frees each stage once its product is done."""
    STAGES: gl.constexpr = a_smem.type.shape[0]
    BLOCK_M: gl.constexpr = a_smem.type.shape[1]
    BLOCK_K: gl.constexpr = a_smem.type.shape[2]
    HALF_N: gl.constexpr = b_smem.type.shape[2]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 8])
    operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=1)
    num_tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, 2 * HALF_N)
    k_steps = gl.cdiv(K, 2 * BLOCK_K) * 2
    it = 0
    for tile in range(gl.program_id(0), num_tiles, NUM_PROGS):
        pid_m, pid_n = _tile_coords(tile, M, N, BLOCK_M, 2 * HALF_N, GROUP_M)
        acc = gl.zeros([HALF_N, BLOCK_M], gl.float32, mma)
        s = it % STAGES
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        b_even = b_smem.index(s).permute((1, 0)).load(operand)
        for ki in range(0, k_steps, 2):
            acc = warpgroup_mma(b_even, a_smem.index(s).permute((1, 0)), acc, is_async=True)
            s_odd = (it + 1) % STAGES
            mbarrier.wait(ready.index(s_odd), ((it + 1) // STAGES) & 1)
            b_odd = b_smem.index(s_odd).permute((1, 0)).load(operand)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(empty.index(s))
            acc = warpgroup_mma(b_odd, a_smem.index(s_odd).permute((1, 0)), acc, is_async=True)
            s = (it + 2) % STAGES
            if ki + 2 < k_steps:
                mbarrier.wait(ready.index(s), ((it + 2) // STAGES) & 1)
                b_even = b_smem.index(s).permute((1, 0)).load(operand)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(empty.index(s_odd))
            it += 2
        # C's tile is the accumulator transposed (a relabelling of its registers: no data moves), finished by the
        # Triton kernels' own epilogue
        tile_c = gl.permute(acc, (1, 0))
        rows: gl.constexpr = gl.SliceLayout(1, tile_c.type.layout)
        cols: gl.constexpr = gl.SliceLayout(0, tile_c.type.layout)
        offs_m = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=rows)
        offs_n = pid_n * 2 * HALF_N + HALF * HALF_N + gl.arange(0, HALF_N, layout=cols)
        _epilogue(tile_c, offs_m, offs_n, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn, stride_bias,
                  stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z, ACT, False)


@gluon.jit
def _gemm_tf32_nmajor_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, res_ptr, z_ptr,
    M, N, K, NUM_PROGS,
    stride_a, stride_b,
    stride_cm, stride_cn, stride_bias, stride_rm, stride_rn, stride_zm, stride_zn,
    HAS_BIAS: gl.constexpr, HAS_RES: gl.constexpr, SAVE_Z: gl.constexpr, ACT: gl.constexpr,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
    STAGES: gl.constexpr,
):
    """The persistent kernel (module docstring): NUM_PROGS programs, each a producer warp and two consumer
    warpgroups (launched with num_warps=4: the first consumer is the default partition). The arguments are those
    of gemm_kernels._gemm_tma_kernel with A and B row-major (stride_a, stride_b: their row strides)."""
    layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)
    a_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M, BLOCK_K], layout)
    b_smem0 = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_K, BLOCK_N // 2], layout)
    b_smem1 = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_K, BLOCK_N // 2], layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    fence_async_shared()
    a_desc = tma.make_tensor_descriptor(a_ptr, [M, K], [stride_a, 1], [BLOCK_M, BLOCK_K], layout)
    b_desc = tma.make_tensor_descriptor(b_ptr, [K, N], [stride_b, 1], [BLOCK_K, BLOCK_N // 2], layout)
    # the partitions' arguments as tuples written in the call: a tuple assigned to a name first would turn the
    # constexprs in it into runtime values
    gl.warp_specialize([
        (_consume, (a_smem, b_smem0, ready, empty, c_ptr, bias_ptr, res_ptr, z_ptr, M, N, K, NUM_PROGS, stride_cm,
                    stride_cn, stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, 0, HAS_BIAS, HAS_RES, SAVE_Z,
                    ACT, GROUP_M)),
        (_consume, (a_smem, b_smem1, ready, empty, c_ptr, bias_ptr, res_ptr, z_ptr, M, N, K, NUM_PROGS, stride_cm,
                    stride_cn, stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, 1, HAS_BIAS, HAS_RES, SAVE_Z,
                    ACT, GROUP_M)),
        (_producer, (a_desc, b_desc, a_smem, b_smem0, b_smem1, ready, empty, M, N, K, NUM_PROGS, GROUP_M)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
