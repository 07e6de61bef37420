"""Experiment: a hand-tiled FFMA SGEMM in Gluon (classic 128x128 tile, 8x8 outputs per thread as 2x2 blocks of 4x4,
A stored transposed in shared memory, register-staged double buffer, one barrier per K tile)."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def sgemm_ffma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                      WARPS_M: gl.constexpr, WARPS_N: gl.constexpr):
    acc_layout: gl.constexpr = gl.BlockedLayout([4, 4], [4, 8], [WARPS_M, WARPS_N], [1, 0])
    a_load: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [WARPS_M, WARPS_N], [1, 0])
    b_load: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [WARPS_M * WARPS_N, 1], [1, 0])
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    plain3: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0])

    pid = gl.program_id(0)
    grid_m = gl.cdiv(M, BLOCK_M)
    grid_n = gl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    group = pid // width
    first_m = group * GROUP_M
    size_m = gl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m

    am = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, a_load))
    ak = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, a_load))
    bk = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, b_load))
    bn = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, b_load))
    a_ptrs = a_ptr + gl.expand_dims(am, 1) * stride_am + gl.expand_dims(ak, 0) * stride_ak
    b_ptrs = b_ptr + gl.expand_dims(bk, 1) * stride_bk + gl.expand_dims(bn, 0) * stride_bn
    a_row_ok = gl.expand_dims(am < M, 1)
    b_col_ok = gl.expand_dims(bn < N, 0)

    a_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_K, BLOCK_M], plain)
    b_smem = gl.allocate_shared_memory(gl.float32, [2, BLOCK_K, BLOCK_N], plain)

    a_regs = gl.load(a_ptrs, mask=a_row_ok & gl.expand_dims(ak < K, 0), other=0.0)
    b_regs = gl.load(b_ptrs, mask=gl.expand_dims(bk < K, 1) & b_col_ok, other=0.0)
    a_smem.index(0).store(gl.permute(a_regs, [1, 0]))
    b_smem.index(0).store(b_regs)
    gl.thread_barrier()

    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
    num_k = gl.cdiv(K, BLOCK_K)
    for kt in range(num_k):
        s = kt % 2
        k_next = (kt + 1) * BLOCK_K
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
        a_regs = gl.load(a_ptrs, mask=a_row_ok & gl.expand_dims(ak + k_next < K, 0), other=0.0)
        b_regs = gl.load(b_ptrs, mask=gl.expand_dims(bk + k_next < K, 1) & b_col_ok, other=0.0)
        a_buf = a_smem.index(s)
        b_buf = b_smem.index(s)
        for k in gl.static_range(BLOCK_K):
            a_k = a_buf.permute([1, 0]).slice(k, 1, dim=1).load(acc_layout)
            b_k = b_buf.slice(k, 1, dim=0).load(acc_layout)
            acc = gl.fma(a_k, b_k, acc)
        a_smem.index(1 - s).store(gl.permute(a_regs, [1, 0]))
        b_smem.index(1 - s).store(b_regs)
        gl.thread_barrier()

    cm = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    cn = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
    c_ptrs = c_ptr + gl.expand_dims(cm, 1) * stride_cm + gl.expand_dims(cn, 0) * stride_cn
    gl.store(c_ptrs, acc, mask=gl.expand_dims(cm < M, 1) & gl.expand_dims(cn < N, 0))


@gluon.jit
def _k_tile(acc, a_read, b_read, a_write, b_write, a_ptrs, b_ptrs, a_mask, b_mask,
            acc_layout: gl.constexpr, BLOCK_K: gl.constexpr):
    """Prefetch the next K tile into registers, multiply the current one out of shared memory, then stage the
    prefetched tile into the other buffers (separate allocations: no barrier needed before that store)."""
    a_regs = gl.load(a_ptrs, mask=a_mask, other=0.0)
    b_regs = gl.load(b_ptrs, mask=b_mask, other=0.0)
    for k in gl.static_range(BLOCK_K):
        a_k = a_read.permute([1, 0]).slice(k, 1, dim=1).load(acc_layout)
        b_k = b_read.slice(k, 1, dim=0).load(acc_layout)
        acc = gl.fma(a_k, b_k, acc)
    a_write.store(gl.permute(a_regs, [1, 0]))
    b_write.store(b_regs)
    gl.thread_barrier()
    return acc


@gluon.jit
def sgemm_ffma2_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                       WARPS_M: gl.constexpr, WARPS_N: gl.constexpr):
    acc_layout: gl.constexpr = gl.BlockedLayout([4, 4], [4, 8], [WARPS_M, WARPS_N], [1, 0])
    a_load: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [WARPS_M, WARPS_N], [1, 0])
    b_load: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [WARPS_M * WARPS_N, 1], [1, 0])
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])

    pid = gl.program_id(0)
    grid_m = gl.cdiv(M, BLOCK_M)
    grid_n = gl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    group = pid // width
    first_m = group * GROUP_M
    size_m = gl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m

    am = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, a_load))
    ak = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, a_load))
    bk = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, b_load))
    bn = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, b_load))
    a_ptrs = a_ptr + gl.expand_dims(am, 1) * stride_am + gl.expand_dims(ak, 0) * stride_ak
    b_ptrs = b_ptr + gl.expand_dims(bk, 1) * stride_bk + gl.expand_dims(bn, 0) * stride_bn
    a_row_ok = gl.expand_dims(am < M, 1)
    b_col_ok = gl.expand_dims(bn < N, 0)

    a0 = gl.allocate_shared_memory(gl.float32, [BLOCK_K, BLOCK_M], plain)
    a1 = gl.allocate_shared_memory(gl.float32, [BLOCK_K, BLOCK_M], plain)
    b0 = gl.allocate_shared_memory(gl.float32, [BLOCK_K, BLOCK_N], plain)
    b1 = gl.allocate_shared_memory(gl.float32, [BLOCK_K, BLOCK_N], plain)

    a_regs = gl.load(a_ptrs, mask=a_row_ok & gl.expand_dims(ak < K, 0), other=0.0)
    b_regs = gl.load(b_ptrs, mask=gl.expand_dims(bk < K, 1) & b_col_ok, other=0.0)
    a0.store(gl.permute(a_regs, [1, 0]))
    b0.store(b_regs)
    gl.thread_barrier()

    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
    for k0 in range(0, K, 2 * BLOCK_K):
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
        acc = _k_tile(acc, a0, b0, a1, b1, a_ptrs, b_ptrs, a_row_ok & gl.expand_dims(ak + k0 + BLOCK_K < K, 0),
                      gl.expand_dims(bk + k0 + BLOCK_K < K, 1) & b_col_ok, acc_layout, BLOCK_K)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
        acc = _k_tile(acc, a1, b1, a0, b0, a_ptrs, b_ptrs, a_row_ok & gl.expand_dims(ak + k0 + 2 * BLOCK_K < K, 0),
                      gl.expand_dims(bk + k0 + 2 * BLOCK_K < K, 1) & b_col_ok, acc_layout, BLOCK_K)

    cm = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    cn = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
    c_ptrs = c_ptr + gl.expand_dims(cm, 1) * stride_cm + gl.expand_dims(cn, 0) * stride_cn
    gl.store(c_ptrs, acc, mask=gl.expand_dims(cm < M, 1) & gl.expand_dims(cn < N, 0))


from triton.experimental.gluon.language.nvidia.hopper import tma, mbarrier, fence_async_shared  # noqa: E402


@gluon.jit
def sgemm_fma_tma_kernel(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn,
                         BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, KC: gl.constexpr,
                         STAGES: gl.constexpr, GROUP_M: gl.constexpr, WARPS_M: gl.constexpr, WARPS_N: gl.constexpr,
                         ROWS_STRIDED: gl.constexpr):
    """A [BM, BK] (K-contiguous, swizzled) and B [BK, BN] tiles land by TMA in a STAGES-deep ring; each K chunk
    of KC is read into FMA dot-operand registers and multiplied with gl.dot_fma."""
    if ROWS_STRIDED:  # a thread's rows are 16 apart: one LDS.128 of A per row hits 4 different swizzle phases
        acc_layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [WARPS_M, WARPS_N], [1, 0])
    else:
        acc_layout: gl.constexpr = gl.BlockedLayout([4, 4], [4, 8], [WARPS_M, WARPS_N], [1, 0])
    a_op: gl.constexpr = gl.DotOperandLayout(0, acc_layout, 0)
    b_op: gl.constexpr = gl.DotOperandLayout(1, acc_layout, 0)

    pid = gl.program_id(0)
    grid_m = gl.cdiv(M, BLOCK_M)
    grid_n = gl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    group = pid // width
    first_m = group * GROUP_M
    size_m = gl.minimum(grid_m - first_m, GROUP_M)
    off_m = (first_m + (pid % width) % size_m) * BLOCK_M
    off_n = ((pid % width) // size_m) * BLOCK_N

    a_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    num_k = gl.cdiv(K, BLOCK_K)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    for i in gl.static_range(STAGES):
        mbarrier.expect(bars.index(i), nbytes, pred=i < num_k)
        tma.async_copy_global_to_shared(a_desc, [off_m, i * BLOCK_K], bars.index(i), a_smem.index(i), pred=i < num_k)
        tma.async_copy_global_to_shared(b_desc, [i * BLOCK_K, off_n], bars.index(i), b_smem.index(i), pred=i < num_k)

    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
    for kt in range(num_k):
        s = kt % STAGES
        mbarrier.wait(bars.index(s), (kt // STAGES) & 1)
        a_buf = a_smem.index(s)
        b_buf = b_smem.index(s)
        for kc in gl.static_range(BLOCK_K // KC):
            a = a_buf.slice(kc * KC, KC, dim=1).load(a_op)
            b = b_buf.slice(kc * KC, KC, dim=0).load(b_op)
            acc = gl.dot_fma(a, b, acc)
        gl.thread_barrier()
        nxt = kt + STAGES
        mbarrier.expect(bars.index(s), nbytes, pred=nxt < num_k)
        tma.async_copy_global_to_shared(a_desc, [off_m, nxt * BLOCK_K], bars.index(s), a_buf, pred=nxt < num_k)
        tma.async_copy_global_to_shared(b_desc, [nxt * BLOCK_K, off_n], bars.index(s), b_buf, pred=nxt < num_k)

    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))
    cm = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
    cn = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
    c_ptrs = c_ptr + gl.expand_dims(cm, 1) * stride_cm + gl.expand_dims(cn, 0) * stride_cn
    gl.store(c_ptrs, acc, mask=gl.expand_dims(cm < M, 1) & gl.expand_dims(cn < N, 0))
