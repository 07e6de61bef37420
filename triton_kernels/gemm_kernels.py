"""The GEMM kernels (triton_kernels/gemm.py holds the math, the tuner, the launch plans, the launchers and
the torch ops): the activation and tile-order jit helpers, the fused epilogue, the pointer GEMM kernel, the
persistent TMA GEMM kernel for Hopper, and the activation-backward pass (dZ = dC * act'(Z), column sums).
"""
from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .stream_buffers import last_arrival

# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _apply_act(z, ACT: tl.constexpr):
    """act(z) elementwise in fp32. "gelu": z * Phi(z) = 0.5 z (1 + erf(z / sqrt(2))) (nn.GELU());
    "gelu_tanh": 0.5 z (1 + tanh(u)), u = sqrt(2/pi) (z + 0.044715 z^3) (nn.GELU(approximate="tanh")),
    evaluated as z * sigmoid(2u) = z / (1 + exp(-2u)), the same function with one exp and one division
    (exp(-2u) = inf for very negative z gives -0, as torch does)."""
    if ACT == "relu":
        z = tl.where(z < 0.0, 0.0, z)  # NaN stays NaN, as in torch.relu (tl.maximum returns 0 for NaN)
    elif ACT == "gelu":
        z = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))
    elif ACT == "gelu_tanh":
        z = z / (1.0 + tl.exp(-z * (1.5957691216057308 + 0.07135481627260025 * z * z)))
    return z


@triton.jit
def _mma(a, b, acc, PRECISION: tl.constexpr):
    """acc + a @ b for one K step. PRECISION "ieee", "tf32", "tf32x3": tl.dot's input precision, fp32 accumulator.
    "fp64" (fp32 operands, fp64 accumulator): both tiles widened to fp64 (exactly), so each product of two fp32
    values is exact (48 of fp64's 53 significand bits) and the sums are fp64's, on the fp64 tensor cores (DMMA
    on Hopper); the tile is rounded to fp32 once, in the epilogue: within half an ulp (plus fp64's rounding) of the
    exact sum, where fp32 FMA may drift by ~K ulps."""
    if PRECISION == "fp64":
        acc = tl.dot(a.to(tl.float64), b.to(tl.float64), acc, out_dtype=tl.float64)
    else:
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _tile_coords(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped ordering of C tiles: GROUP_M tile-rows at a time, column by column inside a group, so
    tiles running together share B columns and a few A rows (L2 reuse)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((tile % num_pid_in_group) % group_size_m)
    pid_n = (tile % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _epilogue(acc, offs_m, offs_n, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
              stride_bias, stride_rm, stride_rn, stride_zm, stride_zn,
              HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, SAVE_Z: tl.constexpr, ACT: tl.constexpr,
              INDEX_64: tl.constexpr):
    """In registers, before the one store: + bias[n], optional save of Z, activation, + residual, cast."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if INDEX_64:
        offs_m = offs_m.to(tl.int64)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n * stride_bias, mask=offs_n < N, other=0.0)
        acc += bias[None, :].to(tl.float32)
    if SAVE_Z:
        tl.store(z_ptr + offs_m[:, None] * stride_zm + offs_n[None, :] * stride_zn,
                 acc.to(z_ptr.dtype.element_ty), mask=mask)
    acc = _apply_act(acc, ACT)
    if HAS_RES:
        acc += tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :] * stride_rn,
                       mask=mask, other=0.0).to(tl.float32)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
             acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _epilogue_tile(acc, off_m, off_n, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
                   stride_bias, stride_rm, stride_rn, stride_zm, stride_zn,
                   HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, SAVE_Z: tl.constexpr, ACT: tl.constexpr,
                   INDEX_64: tl.constexpr):
    """`_epilogue` of the C tile acc = C[off_m:off_m + BLOCK_M, off_n:off_n + BLOCK_N] of a GEMM kernel.

    With the erf GELU, a tile 128 or more columns wide is finished in two column halves, one after the
    other (split out of the accumulator's registers: its column bit BLOCK_N / 2 is held within a thread,
    so no data moves). Each half's bias, activation, cast and store then run beside the accumulator with
    the temporaries of half the tile only: the fp32 accumulator of a 128 x 256 tile on 8 warps is already
    128 registers a thread, and the erf GELU of the whole tile at once needs more than the 255 there are
    (spills in an sm_90 compile). The other activations fit and keep the one-pass epilogue.
    """
    BLOCK_M: tl.constexpr = acc.shape[0]
    BLOCK_N: tl.constexpr = acc.shape[1]
    offs_m = off_m + tl.arange(0, BLOCK_M)
    if BLOCK_N >= 128 and ACT == "gelu":
        HALF: tl.constexpr = BLOCK_N // 2
        left, right = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, HALF)), (0, 2, 1)))
        offs_n = off_n + tl.arange(0, HALF)
        _epilogue(left, offs_m, offs_n, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
                  stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z, ACT, INDEX_64)
        _epilogue(right, offs_m, offs_n + HALF, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
                  stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z, ACT, INDEX_64)
    else:
        _epilogue(acc, offs_m, off_n + tl.arange(0, BLOCK_N), M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm,
                  stride_cn, stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z,
                  ACT, INDEX_64)


@triton.jit
def _gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, res_ptr, z_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn,
    stride_cm, stride_cn, stride_bias, stride_rm, stride_rn, stride_zm, stride_zn,
    HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, SAVE_Z: tl.constexpr, ACT: tl.constexpr,
    PRECISION: tl.constexpr, INDEX_64: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """One program computes a BLOCK_M x BLOCK_N tile of C.

    Tiling: the program walks K in steps of BLOCK_K, loading an A tile (BLOCK_M x BLOCK_K) and a B tile
    (BLOCK_K x BLOCK_N) and accumulating their product in fp32 registers (fp64 with PRECISION "fp64", see
    `_mma`); Triton pipelines the loads over `num_stages` shared-memory buffers and issues tensor-core MMAs
    (wgmma on Hopper; FFMA for fp32 "ieee", DMMA for "fp64").
    Tile order: grouped (see `_tile_coords`). Epilogue: see `_epilogue_tile` and `_epilogue`.
    PDL: see `_gemm_tma_kernel`.
    """
    if PDL:
        gdc_launch_dependents()
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows/cols past the edge wrap around (% M, % N) for the loads; their results are masked at the
    # store. No contiguity/alignment hints here: where the index wraps inside a tile, "BLOCK_M
    # contiguous" is false, and with the other stride a multiple of 16 bytes (or 0) the compiler then
    # emits 16-byte vector copies that start at unaligned addresses (a device fault on views such as
    # h[:, :9].t()). Triton's own analysis of `(pid * BLOCK + arange) % M` proves contiguity up to the
    # divisibility of M (N), which keeps every load vectorised whose addresses really are aligned.
    offs_am = offs_m % M
    offs_bn = offs_n % N
    if INDEX_64:  # element offsets may pass 2**31: widen the index math (slower; only when needed)
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
        offs_k = offs_k.to(tl.int64)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64 if PRECISION == "fp64" else tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = _mma(a, b, acc, PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    _epilogue_tile(acc.to(tl.float32), pid_m * BLOCK_M, pid_n * BLOCK_N, M, N, c_ptr, bias_ptr, res_ptr, z_ptr,
                   stride_cm, stride_cn, stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES,
                   SAVE_Z, ACT, INDEX_64)
    if PDL:
        gdc_wait()


@triton.jit
def _gemm_tma_kernel(
    a_desc, b_desc, c_ptr, bias_ptr, res_ptr, z_ptr,
    M, N, K, NUM_PROGS,
    stride_cm, stride_cn, stride_bias, stride_rm, stride_rn, stride_zm, stride_zn,
    A_T: tl.constexpr, B_T: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, SAVE_Z: tl.constexpr, ACT: tl.constexpr,
    PRECISION: tl.constexpr, INDEX_64: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """Persistent variant for Hopper: NUM_PROGS programs (<= #SMs) loop over the C tiles.

    Tiles of A and B arrive through the tensor-memory accelerator (TMA): a tensor descriptor names the
    whole matrix and a block shape, `desc.load([row, col])` copies one tile to shared memory
    (out-of-range parts read as zero, so no masks), and the copy engine runs ahead by `num_stages` tiles.
    The descriptors are made on the host and passed as kernel parameters: built in the kernel, each
    program first writes and fences its own copies: 1.3-2.1 us more a launch (H100, the Char-CNN fc1 GEMMs).
    a_desc reads A as (M, K) row-major with block [BLOCK_M, BLOCK_K], or with A_T (A stored K-major) as
    the (K, M) row-major matrix with block [BLOCK_K, BLOCK_M]; likewise b_desc reads B as (K, N) with block
    [BLOCK_K, BLOCK_N] or, with B_T, stored as (N, K) row-major -- nn.Linear's weight -- with [BLOCK_N, BLOCK_K].
    The math per tile and the fused epilogue are those of `_gemm_kernel`.
    PDL (two GEMMs of one backward that read nothing the other writes): the next kernel may launch once
    every program has started (gdc_launch_dependents), so it fills the SMs this one's last tiles leave idle;
    launched as a programmatic dependent itself, the kernel ends only after the one ahead has (gdc_wait).
    """
    if PDL:
        gdc_launch_dependents()
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    # flatten: the compiler fuses the tile loop and the K loop into one software pipeline, so the next
    # tile's first loads are in flight during this tile's epilogue (H100, the 4096 x 1024 x 8704 GEMM of
    # a Linear's backward: 131 -> 119 us). 16-bit operands without the erf GELU only: that epilogue (in
    # two column halves) and the 4-byte tiles ran slower flattened (Linear + GELU 4096 x 8704 -> 1024:
    # 0.107 -> 0.119 ms)
    FLATTEN: tl.constexpr = (ACT != "gelu") and (a_desc.dtype.primitive_bitwidth == 16)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_PROGS, flatten=FLATTEN):
        pid_m, pid_n = _tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            if A_T:
                a = a_desc.load([off_k, off_m]).T
            else:
                a = a_desc.load([off_m, off_k])
            if B_T:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        _epilogue_tile(acc, off_m, off_n, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
                       stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z, ACT,
                       INDEX_64)
    if PDL:
        gdc_wait()


@triton.jit
def _transpose_kernel(x_ptr, y_ptr, R, C, stride_xr, stride_xc, stride_y, BLOCK: tl.constexpr):
    """Y = X^T: X (R, C) with any strides into Y (C, R) row-major, one BLOCK x BLOCK tile per program.

    The copy of B into the other layout (see gemm.py's `_launch_plan`). The tile is read along X's rows
    and written along Y's rows; the compiler routes the transposition through shared memory, so both the
    loads and the stores are coalesced (torch's strided copy, which is not, ran at a third of this rate)."""
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = (rows[:, None] < R) & (cols[None, :] < C)
    tile = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xr + cols[None, :].to(tl.int64) * stride_xc, mask=mask)
    tl.store(y_ptr + cols[None, :].to(tl.int64) * stride_y + rows[:, None], tile, mask=mask)


@triton.jit
def _act_bwd_tile(dc_ptr, z_ptr, dz_ptr, offs_m, offs_n, M, N, stride_dcm, stride_dcn, stride_zm, stride_zn,
                  stride_dzm, stride_dzn, ACT: tl.constexpr, STORE_DZ: tl.constexpr):
    """dZ = dC * act'(Z) on the tile (offs_m, offs_n), stored when STORE_DZ; returns it in fp32 (0 outside)."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    rows = offs_m[:, None].to(tl.int64)
    dz = tl.load(dc_ptr + rows * stride_dcm + offs_n[None, :] * stride_dcn, mask=mask, other=0.0).to(tl.float32)
    if ACT != "none":
        z = tl.load(z_ptr + rows * stride_zm + offs_n[None, :] * stride_zn, mask=mask, other=0.0).to(tl.float32)
        if ACT == "relu":  # torch's threshold_backward: the gradient passes unless z <= 0 (so it passes at NaN)
            dz = tl.where(z <= 0.0, 0.0, dz)
        elif ACT == "gelu":  # d/dz z Phi(z) = Phi(z) + z phi(z)
            cdf = 0.5 * (1.0 + tl.math.erf(z * 0.7071067811865476))
            pdf = tl.exp(-0.5 * z * z) * 0.3989422804014327
            dz = dz * (cdf + z * pdf)
        else:  # gelu_tanh: d/dz z s(z), s = sigmoid(2u): s + z s (1 - s) 2u', 2u' = 2 sqrt(2/pi) (1 + 3 0.044715 z^2)
            s = 1.0 / (1.0 + tl.exp(-z * (1.5957691216057308 + 0.07135481627260025 * z * z)))
            dz = dz * (s + z * s * (1.0 - s) * (1.5957691216057308 + 0.21406444881780076 * z * z))
    if STORE_DZ:
        tl.store(dz_ptr + rows * stride_dzm + offs_n[None, :] * stride_dzn, dz.to(dz_ptr.dtype.element_ty), mask=mask)
    return dz


@triton.jit
def _act_bwd_kernel(
    dc_ptr, z_ptr, dz_ptr, dbias_ptr, part_ptr, count_ptr,
    M, N,
    stride_dcm, stride_dcn, stride_zm, stride_zn, stride_dzm, stride_dzn,
    ACT: tl.constexpr, STORE_DZ: tl.constexpr, COLSUM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """dZ = dC * act'(Z) on a BLOCK_M x BLOCK_N tile, plus the tile's column sums (-> dbias); act' in fp32
    from the saved Z (the derivatives of the forms in `_apply_act`).

    For relu without residual the saved tensor may be the output C = relu(Z) instead of Z: C <= 0
    exactly where Z <= 0 (and C is NaN where Z is), so relu's test reads either. Column sums: each program
    stores its tile's as row program_id(0) of the (cdiv(M, BLOCK_M), N) fp32 partials, and the last program
    of its column block to arrive (stream_buffers.last_arrival) adds the rows, BLOCK_M at a time in a fixed
    order (deterministic), and stores dbias in its own dtype: no zeroed buffer, no atomics into it, no cast.
    """
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    dz = _act_bwd_tile(dc_ptr, z_ptr, dz_ptr, offs_m, offs_n, M, N, stride_dcm, stride_dcn, stride_zm, stride_zn,
                       stride_dzm, stride_dzn, ACT, STORE_DZ)
    if COLSUM:
        cols = offs_n < N
        tl.store(part_ptr + tl.program_id(0) * N + offs_n, tl.sum(dz, axis=0), mask=cols)
        rows = tl.num_programs(0)
        if last_arrival(count_ptr, rows):
            r = tl.arange(0, BLOCK_M)
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for r0 in range(0, rows, BLOCK_M):  # the partials come from other SMs: read from L2 (.cg)
                mask = ((r0 + r) < rows)[:, None] & cols[None, :]
                acc += tl.load(part_ptr + (r0 + r)[:, None] * N + offs_n[None, :], mask=mask, other=0.0,
                               cache_modifier=".cg")
            tl.store(dbias_ptr + offs_n, tl.sum(acc, axis=0).to(dbias_ptr.dtype.element_ty), mask=cols)


@triton.jit
def _act_bwd_columns_kernel(
    dc_ptr, z_ptr, dz_ptr, dbias_ptr, part_ptr, count_ptr,
    M, N,
    stride_dcm, stride_dcn, stride_zm, stride_zn, stride_dzm, stride_dzn,
    ACT: tl.constexpr, STORE_DZ: tl.constexpr, COLSUM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """`_act_bwd_kernel` for few rows: one program per BLOCK_N columns walks all M rows in BLOCK_M steps,
    so each column sum is complete in one program and is stored once, in dbias's dtype, with no partials
    (part_ptr and count_ptr, `_act_bwd_kernel`'s, are not read)."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for m0 in range(0, M, BLOCK_M):
        dz = _act_bwd_tile(dc_ptr, z_ptr, dz_ptr, m0 + tl.arange(0, BLOCK_M), offs_n, M, N, stride_dcm, stride_dcn,
                           stride_zm, stride_zn, stride_dzm, stride_dzn, ACT, STORE_DZ)
        total += tl.sum(dz, axis=0)
    if COLSUM:
        tl.store(dbias_ptr + offs_n, total.to(dbias_ptr.dtype.element_ty), mask=offs_n < N)


# ----------------------------------------------------------------------------------------------------
# Split-K: for outputs with few tiles and a long K (the studies' 512 x 8704 -> 1024 Linear has 32 tiles of
# 128 x 128 for 132 SMs), SPLIT_K programs per tile each reduce one slice of K; a second kernel adds the
# slices in a fixed order (deterministic, no atomics) and applies the epilogue.
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _gemm_splitk_partial_kernel(
    a_ptr, b_ptr, part_ptr,
    M, N, K, K_PER_SPLIT,
    stride_am, stride_ak, stride_bk, stride_bn,
    PRECISION: tl.constexpr, INDEX_64: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """Program (tile, split): the fp32 partial product of A[:, ks] @ B[ks, :] for its tile, with ks the
    split's K_PER_SPLIT (a multiple of BLOCK_K) columns of K, stored at part[split] (SPLIT_K, M, N).

    The loads are `_gemm_kernel`'s (rows and columns past the edge wrap, K masked at the slice's end).
    """
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    k_start = tl.program_id(1) * K_PER_SPLIT
    k_stop = tl.minimum(K, k_start + K_PER_SPLIT)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_am = offs_m % M
    offs_bn = offs_n % N
    if INDEX_64:
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
        offs_k = offs_k.to(tl.int64)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + (k_start + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_start + offs_k)[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_start, k_stop, BLOCK_K):
        k_left = k_stop - k
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    rows = offs_m.to(tl.int64)
    part = part_ptr + tl.program_id(1).to(tl.int64) * M * N
    tl.store(part + rows[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _gemm_splitk_reduce_kernel(
    part_ptr, c_ptr, bias_ptr, res_ptr, z_ptr,
    M, N, SPLIT_K,
    stride_cm, stride_cn, stride_bias, stride_rm, stride_rn, stride_zm, stride_zn,
    HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, SAVE_Z: tl.constexpr, ACT: tl.constexpr,
    INDEX_64: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program (tile): C tile = epilogue(sum over the SPLIT_K partials, in split order)."""
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = tl.program_id(0) // num_pid_n
    pid_n = tl.program_id(0) % num_pid_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    ptrs = part_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(SPLIT_K):
        acc += tl.load(ptrs, mask=mask, other=0.0)
        ptrs += tl.cast(M, tl.int64) * N  # not M.to(): torch.compile's analysis passes M as an int
    _epilogue(acc, offs_m, offs_n, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
              stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z, ACT, INDEX_64)
