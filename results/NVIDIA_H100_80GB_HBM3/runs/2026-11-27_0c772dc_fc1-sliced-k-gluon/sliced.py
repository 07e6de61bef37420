"""Probe: bf16 Linear (x @ W^T + bias, act) for small M and large K in Gluon, warp-specialised: one producer warp
streams x's and W's tiles by TMA into a ring of STAGES; SLICES consumer warpgroups take the k steps in turn
(consumer i: steps i, i + SLICES, ...), each into its own accumulator; with two, the second adds its accumulator
into the first through shared memory before the epilogue (bias, activation, cast: gemm_kernels._epilogue)."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from triton_kernels.gemm_kernels import _epilogue, _tile_coords


@gluon.jit
def _producer(x_desc, w_desc, x_smem, w_smem, ready, empty, M, N, K, GROUP_M: gl.constexpr):
    STAGES: gl.constexpr = x_smem.type.shape[0]
    BLOCK_M: gl.constexpr = x_smem.type.shape[1]
    BLOCK_K: gl.constexpr = x_smem.type.shape[2]
    BLOCK_N: gl.constexpr = w_smem.type.shape[1]
    pid_m, pid_n = _tile_coords(gl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    for ki in range(gl.cdiv(K, BLOCK_K)):
        s = ki % STAGES
        mbarrier.wait(empty.index(s), ((ki // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(s), x_desc.block_type.nbytes + w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(x_desc, [pid_m * BLOCK_M, ki * BLOCK_K], ready.index(s), x_smem.index(s))
        tma.async_copy_global_to_shared(w_desc, [pid_n * BLOCK_N, ki * BLOCK_K], ready.index(s), w_smem.index(s))


@gluon.jit
def _consume(x_smem, w_smem, ready, empty, partial, done, c_ptr, bias_ptr, M, N, K, stride_cm, stride_cn,
             SLICE: gl.constexpr, SLICES: gl.constexpr, HAS_BIAS: gl.constexpr, ACT: gl.constexpr,
             GROUP_M: gl.constexpr):
    STAGES: gl.constexpr = x_smem.type.shape[0]
    BLOCK_M: gl.constexpr = x_smem.type.shape[1]
    BLOCK_K: gl.constexpr = x_smem.type.shape[2]
    BLOCK_N: gl.constexpr = w_smem.type.shape[1]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, mma)
    k_steps = gl.cdiv(K, BLOCK_K)
    mine = (k_steps - SLICE + SLICES - 1) // SLICES
    prev = 0
    for j in range(mine):
        ki = SLICE + j * SLICES
        s = ki % STAGES
        mbarrier.wait(ready.index(s), (ki // STAGES) & 1)
        acc = warpgroup_mma(x_smem.index(s), w_smem.index(s).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        if j > 0:
            mbarrier.arrive(empty.index(prev))
        prev = s
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    if SLICES == 2:
        if SLICE == 1:
            partial.store(acc)
            gl.thread_barrier()
            mbarrier.arrive(done)
        else:
            mbarrier.wait(done, 0)
            acc += partial.load(mma)
    if SLICE == 0:
        pid_m, pid_n = _tile_coords(gl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rows: gl.constexpr = gl.SliceLayout(1, mma)
        cols: gl.constexpr = gl.SliceLayout(0, mma)
        offs_m = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=rows)
        offs_n = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=cols)
        _epilogue(acc, offs_m, offs_n, M, N, c_ptr, bias_ptr, c_ptr, c_ptr, stride_cm, stride_cn, 1, 0, 0, 0, 0,
                  HAS_BIAS, False, False, ACT, False)


@gluon.jit
def sliced_kernel(x_ptr, w_ptr, c_ptr, bias_ptr, M, N, K, stride_x, stride_w, stride_cm, stride_cn,
                  HAS_BIAS: gl.constexpr, ACT: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  BLOCK_K: gl.constexpr, STAGES: gl.constexpr, SLICES: gl.constexpr, GROUP_M: gl.constexpr):
    layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_M, BLOCK_K], layout)
    w_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, BLOCK_K], layout)
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    partial = gl.allocate_shared_memory(gl.float32, [BLOCK_M, BLOCK_N], plain)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    done = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    mbarrier.init(done, count=1)
    fence_async_shared()
    x_desc = tma.make_tensor_descriptor(x_ptr, [M, K], [stride_x, 1], [BLOCK_M, BLOCK_K], layout)
    w_desc = tma.make_tensor_descriptor(w_ptr, [N, K], [stride_w, 1], [BLOCK_N, BLOCK_K], layout)
    if SLICES == 2:
        gl.warp_specialize([
            (_consume, (x_smem, w_smem, ready, empty, partial, done, c_ptr, bias_ptr, M, N, K, stride_cm, stride_cn,
                        0, 2, HAS_BIAS, ACT, GROUP_M)),
            (_consume, (x_smem, w_smem, ready, empty, partial, done, c_ptr, bias_ptr, M, N, K, stride_cm, stride_cn,
                        1, 2, HAS_BIAS, ACT, GROUP_M)),
            (_producer, (x_desc, w_desc, x_smem, w_smem, ready, empty, M, N, K, GROUP_M)),
        ], [4, 1], [232, 24])
    else:
        gl.warp_specialize([
            (_consume, (x_smem, w_smem, ready, empty, partial, done, c_ptr, bias_ptr, M, N, K, stride_cm, stride_cn,
                        0, 1, HAS_BIAS, ACT, GROUP_M)),
            (_producer, (x_desc, w_desc, x_smem, w_smem, ready, empty, M, N, K, GROUP_M)),
        ], [1], [24])
