"""conv2d forward, 3x3 stride 1 (ResNet-18 CIFAR layers, batch 512, and batch 16): cuDNN against our tiled
kernel and our transposed kernel, each tuned by the production tuner (plus forced transposed configs for
16-bit), kernel time (lead spin), L2 flushed, one process; bf16 and fp32 at tf32."""
import json, os, statistics, sys
import torch
from torch.nn import functional
from triton_kernels import conv2d
from triton_kernels.runtime import Config, cuda_time_ms

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = True
SHAPES = [(512, 64, 32, 64), (512, 128, 16, 128), (512, 256, 8, 256), (512, 512, 4, 512), (16, 64, 32, 64),
          (16, 256, 8, 256), (512, 64, 16, 64), (64, 128, 32, 128)]


def trans(bp, bn, bk, w, s, per_sm=1):
    return Config({"BLOCK_P": bp, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "PER_SM": per_sm}, w, s)


EXTRA_16 = [trans(128, 64, 64, 8, 3, 2), trans(128, 64, 64, 4, 3, 2), trans(256, 64, 64, 8, 3), trans(256, 64, 64, 8, 4),
            trans(128, 64, 64, 8, 4, 2), trans(256, 64, 64, 4, 4), trans(128, 128, 64, 8, 3, 2)]


def med(fn, lead=0.3):
    return statistics.median(cuda_time_ms(fn, warmup=3, rep=30, lead_ms=lead))


def fits(cfg, C, H, N):
    from autotune import spaces
    k = cfg.kwargs
    return (k["BLOCK_N"] <= max(16, N) and C % k["BLOCK_K"] == 0
            and spaces.transposed_rows(k["BLOCK_P"], H, H) is not None)


out = []
for dtype, precision in ((torch.bfloat16, "ieee"), (torch.float32, "tf32")):
    for B, C, H, N in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(C)
        x = torch.randn(B, C, H, H, device="cuda", generator=g).to(dtype).contiguous(memory_format=torch.channels_last)
        w = (torch.randn(N, C, 3, 3, device="cuda", generator=g) / (9 * C) ** 0.5).to(dtype)
        w = w.contiguous(memory_format=torch.channels_last)
        ref = functional.conv2d(x.double(), w.double(), None, 1, 1)
        r = {"dtype": str(dtype), "shape": f"B{B} {C}x{H}x{H}->{N}", "flop": 2.0 * ref.numel() * C * 9}
        r["cudnn_ms"] = med(lambda: functional.conv2d(x, w, None, 1, 1))
        r["cudnn_err"] = ((functional.conv2d(x, w, None, 1, 1).double() - ref).norm() / ref.norm()).item()
        with torch.no_grad():
            for path in ("tiled", "transposed", "auto"):
                fn = lambda path=path: conv2d.conv2d(x, w, None, 1, 1, precision=precision, path=path)
                r[path + "_err"] = ((fn().double() - ref).norm() / ref.norm()).item()
                r[path + "_ms"] = med(fn)
                r[path + "_call_ms"] = med(fn, 0.0)
            r["cudnn_call_ms"] = med(lambda: functional.conv2d(x, w, None, 1, 1), 0.0)
            wt = conv2d.packed_weight(w, dtype, transposed=True)
            forced = []
            for cfg in (EXTRA_16 if dtype != torch.float32 else []):
                if not fits(cfg, C, H, N):
                    continue
                fn = lambda cfg=cfg: conv2d.conv2d_transposed_forward(x, wt, None, precision=precision, config=cfg)
                forced.append((f"{cfg.kwargs} w{cfg.num_warps} s{cfg.num_stages}", med(fn)))
            r["forced"] = forced
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != "forced"}, flush=True)
        for f in forced:
            print("    ", f[0], round(f[1], 4), flush=True)
        out.append(r)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "conv_auto_probe.json"), "w"), indent=1)
