"""Variants of the stream-K kernel (MODE 1: every piece written as if whole, no partials; MODE 2: partials stored,
never summed) to split its time into main loop, partial stores and the sums."""
import triton
import triton.language as tl
from triton_kernels.gemm_kernels import _tile_coords, _epilogue_tile, _share_owner
from triton_kernels.stream_buffers import arrived_last


@triton.jit
def streamk_variant(
    a_ptr, b_ptr, c_ptr, bias_ptr, res_ptr, z_ptr, part_ptr, count_ptr,
    M, N, K, NUM_PROGS,
    stride_a, stride_b,
    stride_cm, stride_cn, stride_bias, stride_rm, stride_rn, stride_zm, stride_zn,
    A_T: tl.constexpr, B_T: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, SAVE_Z: tl.constexpr, ACT: tl.constexpr,
    PRECISION: tl.constexpr, INDEX_64: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, MODE: tl.constexpr,
):
    """Stream-K: `_gemm_tma_kernel`'s tiles and loads, with the work shared out in K steps instead of tiles.

    The T tiles' S = cdiv(K, BLOCK_K) steps each are laid end to end, tile after tile (T S iterations), and
    program p of the P = NUM_PROGS (<= #SMs) takes iterations [p T S / P, (p + 1) T S / P): whole tiles,
    and a piece of a tile at either end of its share. So every SM gets the same number of multiply-add
    steps, where whole tiles would leave a last wave part-filled (a Linear's backward over 8704 columns:
    136 or 272 tiles of 128 x 256 for 132 SMs). A whole tile is finished in place. A piece's fp32 partial
    goes to part[slot] (BLOCK_M x BLOCK_N, row-major; slot 2p for the piece a share starts with, 2p + 1 for
    the one it ends with), then its program counts itself in at count[tile]; the tile's last arrival sums
    the pieces in program order (the same sum whichever program is last) and runs the epilogue.
    """
    if A_T:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[K, M], strides=[stride_a, 1], block_shape=[BLOCK_K, BLOCK_M])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_a, 1], block_shape=[BLOCK_M, BLOCK_K])
    if B_T:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1], block_shape=[BLOCK_K, BLOCK_N])
    k_tiles = tl.cdiv(K, BLOCK_K)
    total = tl.cast(tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N), tl.int64) * k_tiles
    pid = tl.program_id(0)
    start = pid * total // NUM_PROGS
    stop = (pid + 1) * total // NUM_PROGS
    in_tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    it = start
    while it < stop:
        tile = tl.cast(it // k_tiles, tl.int32)
        tile_start = tl.cast(tile, tl.int64) * k_tiles
        k_first = tl.cast(it - tile_start, tl.int32)
        k_stop = tl.cast(tl.minimum(tile_start + k_tiles, stop) - tile_start, tl.int32)
        pid_m, pid_n = _tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_first, k_stop):
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
        finish = (k_first == 0) & (k_stop == k_tiles)
        if MODE == 1:
            finish = True
        if not finish:  # a piece: publish it; the tile's last arrival sums every piece
            slot = 2 * pid + (start < tile_start).to(tl.int32)
            tl.store(part_ptr + slot * (BLOCK_M * BLOCK_N) + in_tile, acc)
            first = _share_owner(tile_start, total, NUM_PROGS)
            last = _share_owner(tile_start + k_tiles - 1, total, NUM_PROGS)
            if MODE == 2:
                finish = False
            else:
                finish = arrived_last(count_ptr + tile, tl.cast(last - first + 1, tl.int32))
            if finish:
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for q in range(first, last + 1):
                    q_slot = 2 * q + (q * total // NUM_PROGS < tile_start).to(tl.int64)
                    acc += tl.load(part_ptr + q_slot * (BLOCK_M * BLOCK_N) + in_tile, cache_modifier=".cg")
        if finish:
            _epilogue_tile(acc, off_m, off_n, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
                           stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z, ACT,
                           INDEX_64)
        it = tile_start + k_stop


