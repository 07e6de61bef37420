"""Flat-K stem kernels (3 -> 64, 3x3, batch 512, bf16): production vs variants with C constexpr and int32 2-D
offsets (OPT), over tiles / warps / stages / programs per SM; the partial sum by torch vs a Triton column sum.
Kernel time by CUDA events over back-to-back launches (y / dz are 67 MB: far past L2)."""
import itertools, json, os
import torch, triton
import triton.language as tl
from triton_kernels import conv2d
from triton_kernels.gemm_kernels import _tile_coords

dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
cuda = dev.type == "cuda"
OUT = os.environ.get("OUT", "/tmp")
B = int(os.environ.get("BATCH", "512"))
res = {"fwd": [], "dw": [], "sum": []}


@triton.jit
def cols(x_ptr, b, oh, ow, m_ok, C, H, W, sxb, sxc, sxh, sxw, CC: tl.constexpr, OPT: tl.constexpr,
         KH: tl.constexpr, KW: tl.constexpr, K_PAD: tl.constexpr):
    k = tl.arange(0, K_PAD)
    if OPT:
        tap = k // CC
        c = k - tap * CC
        kk = KH * KW * CC
    else:
        tap = k // C
        c = k - tap * C
        kk = KH * KW * C
    kh = tap // KW
    kw = tap - kh * KW
    ih = (oh - 1)[:, None] + kh[None, :]
    iw = (ow - 1)[:, None] + kw[None, :]
    if OPT:
        ok = m_ok[:, None] & (k < kk)[None, :] & (ih.to(tl.uint32) < H) & (iw.to(tl.uint32) < W)
        base = x_ptr + b.to(tl.int64) * sxb
        off = ((oh - 1) * sxh + (ow - 1) * sxw)[:, None] + (kh * sxh + kw * sxw + c * sxc)[None, :]
        return tl.load(base[:, None] + off, mask=ok, other=0.0)
    ok = m_ok[:, None] & (k < kk)[None, :] & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    ptrs = x_ptr + (b.to(tl.int64) * sxb)[:, None] + ih * sxh + iw * sxw + (c * sxc)[None, :]
    return tl.load(ptrs, mask=ok, other=0.0)


@triton.jit
def fwd_kernel(x_ptr, w_ptr, y_ptr, M, N, C, H, W, sxb, sxc, sxh, sxw, CC: tl.constexpr, OPT: tl.constexpr,
               K_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    rows = tl.where(m_ok, offs_m, 0)
    ow = rows % W
    oh = (rows // W) % H
    b = rows // (W * H)
    a = cols(x_ptr, b, oh, ow, m_ok, C, H, W, sxb, sxc, sxh, sxw, CC, OPT, 3, 3, K_PAD)
    k = tl.arange(0, K_PAD)
    wt = tl.load(w_ptr + k[:, None] * N + offs_n[None, :], mask=(k < 27)[:, None], other=0.0)
    acc = tl.dot(a, wt)
    tl.store(y_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=m_ok[:, None])


@triton.jit
def dw_kernel(x_ptr, dz_ptr, part_ptr, M, N, C, H, W, sxb, sxc, sxh, sxw, CC: tl.constexpr, OPT: tl.constexpr,
              K_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    s = tl.program_id(0)
    offs_n = tl.arange(0, BLOCK_N)
    acc = tl.zeros((K_PAD, BLOCK_N), dtype=tl.float32)
    for block in range(s, tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = offs_m < M
        rows = tl.where(m_ok, offs_m, 0)
        ow = rows % W
        oh = (rows // W) % H
        b = rows // (W * H)
        a = cols(x_ptr, b, oh, ow, m_ok, C, H, W, sxb, sxc, sxh, sxw, CC, OPT, 3, 3, K_PAD)
        dz = tl.load(dz_ptr + rows.to(tl.int64)[:, None] * N + offs_n[None, :], mask=m_ok[:, None], other=0.0)
        acc = tl.dot(tl.trans(a), dz, acc)
    k = tl.arange(0, K_PAD)
    tl.store(part_ptr + (s * K_PAD + k).to(tl.int64)[:, None] * N + offs_n[None, :], acc)


@triton.jit
def colsum_kernel(part_ptr, out_ptr, S, COLS, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < COLS
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, S):
        acc += tl.load(part_ptr + s * COLS + offs, mask=ok, other=0.0)
    tl.store(out_ptr + offs, acc, mask=ok)


def timed(fn, reps=50):
    for _ in range(5):
        fn()
    if not cuda:
        return 0.0
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / reps * 1e3


dt = torch.bfloat16 if cuda else torch.float32
x = torch.randn(B, 3, 32, 32, device=dev).to(dt).contiguous(memory_format=torch.channels_last)
w = (torch.randn(64, 3, 3, 3, device=dev) / 27 ** 0.5).to(dt)
g = torch.randn(B, 64, 32, 32, device=dev).to(dt).contiguous(memory_format=torch.channels_last)
wp = conv2d.pack_weight(w)
M, N = B * 1024, 64
ref_y = torch.nn.functional.conv2d(x.float(), w.float(), None, 1, 1)
y = torch.empty_like(ref_y, dtype=dt).contiguous(memory_format=torch.channels_last)
sx = x.stride()
res["prod_fwd_us"] = timed(lambda: conv2d.conv2d_forward(x, wp, None, None, (1, 1), (1, 1), path="flat"))
res["prod_dw_us"] = timed(lambda: conv2d.conv2d_weight_grad_flat(x, g, (3, 3), (1, 1), (1, 1)))
print("production (tuned):", res["prod_fwd_us"], res["prod_dw_us"], flush=True)
print("tuner trials:", {k: v for k, v in conv2d._flat_tuner.trials.items()}, flush=True)
print("dw tuner trials:", {k: v for k, v in conv2d._flat_dw_tuner.trials.items()}, flush=True)
res["trials"] = {"fwd": conv2d._flat_tuner.trials, "dw": conv2d._flat_dw_tuner.trials}
BMS = (64, 128, 256) if cuda else (32,)
WARPS = (4, 8) if cuda else (4,)
for opt, bm, nw in itertools.product((0, 1), BMS, WARPS):
    fn = lambda: fwd_kernel[(triton.cdiv(M, bm),)](x, wp, y, M, N, 3, 32, 32, *sx, CC=3, OPT=opt, K_PAD=32, BLOCK_M=bm,
                                                 BLOCK_N=64, GROUP_M=8, num_warps=nw, num_stages=1)
    fn()
    e = ((y.float() - ref_y).norm() / ref_y.norm()).item()
    t = timed(fn)
    res["fwd"].append({"opt": opt, "bm": bm, "warps": nw, "us": t, "err": e})
    print(f"fwd opt={opt} bm={bm} w={nw}: {t:7.1f} us  err {e:.1e}", flush=True)

w64 = w.double().requires_grad_()
torch.nn.functional.conv2d(x.double(), w64, None, 1, 1).backward(g.double())
ref_dw = w64.grad.permute(2, 3, 1, 0).reshape(27, 64).float()
sms = torch.cuda.get_device_properties(dev).multi_processor_count if cuda else 2
for opt, bm, nw, st, per_sm in itertools.product((0, 1), BMS, WARPS, (2, 3, 4) if cuda else (1,), (1, 2, 4, 8) if cuda else (2,)):
    S = min(triton.cdiv(M, bm), per_sm * sms)
    part = torch.empty((S, 32, 64), device=dev, dtype=torch.float32)
    fn = lambda: dw_kernel[(S,)](x, g, part, M, N, 3, 32, 32, *sx, CC=3, OPT=opt, K_PAD=32, BLOCK_M=bm, BLOCK_N=64,
                                 num_warps=nw, num_stages=st)
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        print("dw fail", opt, bm, nw, st, repr(exc)[:100], flush=True)
        continue
    e = ((part.sum(0)[:27] - ref_dw).norm() / ref_dw.norm()).item()
    t = timed(fn)
    res["dw"].append({"opt": opt, "bm": bm, "warps": nw, "stages": st, "per_sm": per_sm, "us": t, "err": e})
    print(f"dw opt={opt} bm={bm} w={nw} st={st} per_sm={per_sm}: {t:7.1f} us  err {e:.1e}", flush=True)
for per_sm in (1, 2, 4, 8):
    S = per_sm * sms
    part = torch.randn((S, 32 * 64), device=dev)
    out = torch.empty(32 * 64, device=dev)
    for blk in (32, 64, 128):
        fn = lambda: colsum_kernel[(triton.cdiv(2048, blk),)](part, out, S, 2048, BLOCK=blk, num_warps=1 if blk <= 32 else 2)
        fn()
        ok = torch.allclose(out, part.sum(0), atol=1e-4)
        res["sum"].append({"S": S, "blk": blk, "triton_us": timed(fn), "ok": ok})
    res["sum"].append({"S": S, "torch_us": timed(lambda: part.sum(0))})
    print("sum", res["sum"][-4:], flush=True)
json.dump(res, open(f"{OUT}/stem_variants.json", "w"), indent=1, default=str)
best_f = min(res["fwd"], key=lambda r: r["us"]) if res["fwd"] else None
best_d = sorted(res["dw"], key=lambda r: r["us"])[:5]
print("best fwd", best_f, "\nbest dw", best_d)
