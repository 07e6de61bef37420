"""Experiment: tf32 with an N-major B, computed as C^T = B^T A^T so that the operand wgmma cannot read from
shared memory (B^T, not K-major) is the register operand."""
import triton
import triton.language as tl


@triton.jit
def swap_kernel(a_ptr, b_ptr, c_ptr, M, N, K, NUM_PROGS, stride_a, stride_b, stride_c,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                PRECISION: tl.constexpr, TRANS_OUT: tl.constexpr, REG_A: tl.constexpr = False, SYNC: tl.constexpr = False):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_a, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1], block_shape=[BLOCK_K, BLOCK_N])
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_PROGS):
        group = GROUP_M * num_pid_n
        first_m = (tile // group) * GROUP_M
        gsize = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + ((tile % group) % gsize)
        pid_n = (tile % group) // gsize
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = a_desc.load([off_m, off_k])          # (BM, BK), K contiguous
            b = b_desc.load([off_k, off_n])          # (BK, BN), N contiguous
            bt = b.T
            if REG_A:   # an opaque identity: the operand is then a register value, not a load
                bt = bt + 0.0
            acc = tl.dot(bt, a.T, acc, input_precision=PRECISION)   # (BN, BM) += (BN, BK) (BK, BM)
            if SYNC:  # consume the product at once: the wgmma is waited for before the next register load
                acc = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [acc], dtype=tl.float32, is_pure=False, pack=1)
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        if TRANS_OUT:
            c = acc.T
            mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
            tl.store(c_ptr + offs_m[:, None] * stride_c + offs_n[None, :], c, mask=mask)
        else:
            mask = (offs_n[:, None] < N) & (offs_m[None, :] < M)
            tl.store(c_ptr + offs_m[None, :] * stride_c + offs_n[:, None], acc, mask=mask)
