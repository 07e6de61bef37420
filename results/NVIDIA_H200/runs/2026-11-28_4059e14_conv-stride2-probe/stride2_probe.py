"""conv2d forward at ResNet-18 CIFAR's stride-2 layers (3x3 pad 1 and 1x1 pad 0, batch 512 and 16): cuDNN against
our tiled kernel and our transposed kernel (stride 2 through the 5-D TMA view), each tuned by the production tuner,
plus every listed transposed config forced; kernel time (lead spin) and eager-call time, L2 flushed, one process;
bf16 and fp32 at tf32. Errors against float64."""
import json, os, statistics
import torch
from torch.nn import functional
from triton_kernels import conv2d
from triton_kernels.runtime import cuda_time_ms
from autotune import spaces

torch.backends.cudnn.benchmark = True
torch.backends.cudnn.allow_tf32 = True
# (B, C_in, H_in, C_out, K)
SHAPES = [(512, 64, 32, 128, 3), (512, 128, 16, 256, 3), (512, 256, 8, 512, 3),
          (512, 64, 32, 128, 1), (512, 128, 16, 256, 1), (512, 256, 8, 512, 1),
          (16, 128, 16, 256, 3), (64, 64, 32, 128, 3)]


def med(fn, lead=0.3):
    return statistics.median(cuda_time_ms(fn, warmup=3, rep=30, lead_ms=lead))


def fits(cfg, C, H, N, elem):
    k = cfg.kwargs
    smem = cfg.num_stages * (k["BLOCK_N"] + k["BLOCK_P"]) * k["BLOCK_K"] * elem <= spaces.SMEM_LIMIT
    return (smem and k["BLOCK_N"] <= max(16, N) and C % k["BLOCK_K"] == 0
            and spaces.transposed_rows(k["BLOCK_P"], H, H) is not None)


out = []
for dtype, precision in ((torch.bfloat16, "ieee"), (torch.float32, "tf32")):
    listed = spaces.CONV2D_TRANSPOSED_CONFIGS if dtype != torch.float32 else spaces.CONV2D_TRANSPOSED_4BYTE_CONFIGS
    for B, C, H, N, K in SHAPES:
        pad = K // 2
        g = torch.Generator(device="cuda").manual_seed(C + K)
        x = torch.randn(B, C, H, H, device="cuda", generator=g).to(dtype).contiguous(memory_format=torch.channels_last)
        w = (torch.randn(N, C, K, K, device="cuda", generator=g) / (K * K * C) ** 0.5).to(dtype)
        w = w.contiguous(memory_format=torch.channels_last)
        ref = functional.conv2d(x.double(), w.double(), None, 2, pad)
        r = {"dtype": str(dtype).split(".")[1], "precision": precision, "shape": f"B{B} {C}x{H}x{H}->{N} k{K} s2",
             "flop": 2.0 * ref.numel() * C * K * K}
        cud = lambda: functional.conv2d(x, w, None, 2, pad)
        r["cudnn_err"] = ((cud().double() - ref).norm() / ref.norm()).item()
        r["cudnn_ms"] = med(cud)
        r["cudnn_call_ms"] = med(cud, 0.0)
        with torch.no_grad():
            for path in ("tiled", "transposed", "auto"):
                fn = lambda path=path: conv2d.conv2d(x, w, None, 2, pad, precision=precision, path=path)
                try:
                    r[path + "_err"] = ((fn().double() - ref).norm() / ref.norm()).item()
                    r[path + "_ms"] = med(fn)
                    r[path + "_call_ms"] = med(fn, 0.0)
                except Exception as e:  # record, go on
                    r[path + "_error"] = repr(e)[:300]
            wt = conv2d.packed_weight(w, dtype, transposed=True)
            forced = []
            for cfg in listed:
                if not fits(cfg, C, H // 2, N, x.element_size()):
                    continue
                fn = lambda cfg=cfg: conv2d.conv2d_transposed_forward(x, wt, None, precision=precision, stride=2,
                                                                      padding=pad, config=cfg)
                try:
                    err = ((fn().double() - ref).norm() / ref.norm()).item()
                    forced.append((f"{cfg.kwargs} w{cfg.num_warps} s{cfg.num_stages}", med(fn), err))
                except Exception as e:
                    forced.append((f"{cfg.kwargs} w{cfg.num_warps} s{cfg.num_stages}", None, repr(e)[:200]))
            r["forced"] = forced
        show = {k: (round(v, 4) if isinstance(v, float) and "err" not in k else v) for k, v in r.items()
                if k != "forced"}
        if "transposed_ms" in r and "tiled_ms" in r:
            show["trans/tiled"] = round(r["transposed_ms"] / r["tiled_ms"], 3)
            show["cudnn/trans"] = round(r["cudnn_ms"] / r["transposed_ms"], 3)
            show["cudnn/tiled"] = round(r["cudnn_ms"] / r["tiled_ms"], 3)
        print(show, flush=True)
        for f in forced:
            print("    ", f[0], f[1] if f[1] is None else round(f[1], 4), f[2], flush=True)
        out.append(r)
        json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "stride2_probe.json"), "w"), indent=1)
