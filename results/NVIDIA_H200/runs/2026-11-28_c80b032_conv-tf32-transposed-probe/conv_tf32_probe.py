"""fp32 conv2d at tf32 (ResNet-18 CIFAR 3x3 layers, batch 512): the tiled kernel's forced configs and the
transposed kernel (out^T = W . X^T, TMA operands, pixels as the wide MMA dimension) against cuDNN's TF32,
kernel time (lead spin), L2 flushed, one process.  --compile SHAPE_INDEX: launch every config once (fills
Triton's cache; run in parallel before the timing pass)."""
import json, os, statistics, sys
import torch
from torch.nn import functional
from triton_kernels import conv2d
from triton_kernels.runtime import Config, cuda_time_ms

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = True
SHAPES = [(64, 32, 64, 1), (128, 16, 128, 1), (256, 8, 256, 1), (512, 4, 512, 1), (64, 32, 128, 2), (128, 16, 256, 2)]


def tiled(bm, bn, bk, w, s, g=8):
    return Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g}, w, s)


def trans(bp, bn, bk, w, s, per_sm=1):
    return Config({"BLOCK_P": bp, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "PER_SM": per_sm}, w, s)


TILED = [tiled(128, 64, 64, 4, 4), tiled(128, 64, 32, 4, 4), tiled(128, 128, 32, 8, 4), tiled(128, 128, 64, 8, 3),
         tiled(256, 128, 32, 8, 4), tiled(128, 256, 32, 8, 4), tiled(256, 64, 32, 8, 4), tiled(128, 64, 32, 8, 5),
         tiled(128, 128, 32, 4, 4), tiled(64, 128, 32, 4, 4), tiled(256, 128, 32, 8, 3), tiled(128, 128, 16, 8, 6)]
TRANS = [trans(256, 64, 32, 4, 4), trans(256, 64, 32, 8, 4), trans(256, 128, 32, 8, 4), trans(256, 128, 32, 8, 3),
         trans(128, 128, 32, 8, 4), trans(128, 128, 32, 4, 4), trans(128, 256, 32, 8, 4), trans(256, 128, 16, 8, 6),
         trans(256, 64, 32, 4, 5), trans(128, 64, 32, 4, 4), trans(256, 256, 32, 8, 2), trans(256, 128, 32, 8, 4, 2)]


def fits(cfg, C, H, N, transposed):
    k = cfg.kwargs
    if k["BLOCK_N"] > N or k["BLOCK_K"] > C:
        return False
    if transposed:
        from autotune import spaces
        return spaces.transposed_rows(k["BLOCK_P"], H, H) is not None and C % k["BLOCK_K"] == 0
    return True


def med(fn, lead=0.3):
    return statistics.median(cuda_time_ms(fn, warmup=3, rep=30, lead_ms=lead))


def run(index, compile_only):
    C, H, N, s = SHAPES[index]
    g = torch.Generator(device="cuda").manual_seed(index)
    x = torch.randn(int(os.environ.get("BATCH", 512)), C, H, H, device="cuda", generator=g).contiguous(memory_format=torch.channels_last)
    w = torch.randn(N, C, 3, 3, device="cuda", generator=g) / (9 * C) ** 0.5
    k_major = conv2d.forward_weight(w, torch.float32, False, "tf32")
    w_t = conv2d.packed_weight(w, torch.float32, transposed=True)
    torch.backends.cudnn.allow_tf32 = False
    ref = functional.conv2d(x, w, None, s, 1)
    torch.backends.cudnn.allow_tf32 = True
    r = {"shape": f"{C}x{H}x{H}->{N} s{s}", "flop": 2.0 * ref.numel() * C * 9}
    if not compile_only:
        r["cudnn_ms"] = med(lambda: functional.conv2d(x, w, None, s, 1))
        r["cudnn_err"] = ((functional.conv2d(x, w, None, s, 1) - ref).norm() / ref.norm()).item()
        print(r, flush=True)
    rows = []
    for kind, configs in (("tiled", TILED), ("transposed", TRANS)):
        if kind == "transposed" and s != 1:
            continue
        for cfg in configs:
            if not fits(cfg, C, H, N, kind == "transposed"):
                continue
            if kind == "tiled":
                fn = lambda cfg=cfg: conv2d.conv2d_forward(x, k_major, None, None, (s, s), (1, 1), precision="tf32",
                                                           config=cfg)
            else:
                fn = lambda cfg=cfg: conv2d.conv2d_transposed_forward(x, w_t, None, precision="tf32", config=cfg)
            try:
                y = fn()
                torch.cuda.synchronize()
                if compile_only:
                    continue
                err = ((y - ref).norm() / ref.norm()).item()
                t = med(fn)
                row = dict(kind=kind, cfg=f"{cfg.kwargs} w{cfg.num_warps} s{cfg.num_stages}", ms=t, err=err,
                           tflops=r["flop"] / t / 1e9, vs_cudnn=r["cudnn_ms"] / t)
            except Exception as e:
                row = dict(kind=kind, cfg=f"{cfg.kwargs} w{cfg.num_warps} s{cfg.num_stages}",
                           failed=f"{type(e).__name__}: {str(e)[:200]}")
            rows.append(row)
            print("  ", {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    r["rows"] = rows
    return r


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compile"]:
        run(int(sys.argv[2]), True)
        sys.exit(0)
    out = [run(i, False) for i in range(len(SHAPES))]
    json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "conv_tf32_probe.json"), "w"), indent=1)
