"""Experiment (issue 18): how fast can the SMs read data that sits in L2? Programs stream over a buffer that fits
in L2 (after a warm pass), for a total of many passes; bytes read / kernel time. Beside it, cuDNN's 64-channel 3x3
forward at ResNet-18's first stage (batch 512, 32x32, bf16, channels_last) and its per-tap reload traffic."""
import statistics
import sys
import torch
import triton
import triton.language as tl
sys.path.insert(0, ".")
from triton_kernels.runtime import cuda_time_ms


@triton.jit
def _stream(x_ptr, out_ptr, n_blocks, passes, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for p in range(passes):
        for b in range(pid, n_blocks, nprog):
            offs = b * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs).to(tl.float32)
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


def main():
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    print(torch.cuda.get_device_name(dev), "SMs", sms, "L2 MB", torch.cuda.get_device_properties(dev).L2_cache_size / 2**20)
    for mb in (8, 16, 24, 32, 512):
        n = mb * 2**20 // 2
        x = torch.randn(n, device=dev).to(torch.bfloat16)
        for BLOCK, per_sm, warps in ((4096, 4, 8), (8192, 2, 8), (2048, 8, 4)):
            out = torch.empty(sms * per_sm * BLOCK, device=dev)
            passes = max(1, 2048 // mb)
            fn = lambda: _stream[(sms * per_sm,)](x, out, n // BLOCK, passes, BLOCK=BLOCK, num_warps=warps)
            t = statistics.median(cuda_time_ms(fn, warmup=2, rep=5, flush_l2=False))
            print(f"  buffer {mb:4d} MB, block {BLOCK}, {per_sm}/SM, {warps} warps: {passes * mb * 2**20 / t / 1e6:7.1f} GB/s "
                  f"({t:.3f} ms for {passes} passes)", flush=True)
    torch.backends.cudnn.benchmark = True
    x = torch.randn(512, 64, 32, 32, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 64, 3, 3, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    fn = lambda: torch.nn.functional.conv2d(x, w, padding=1)
    t = statistics.median(cuda_time_ms(fn, warmup=5, rep=30))
    print(f"cuDNN 64-ch 3x3 forward: {t * 1e3:.1f} us; 9x per-tap input reload = {9 * x.numel() * 2 / t / 1e6:.0f} GB/s "
          f"from L2; 2*N*H*W*64*576 = {2 * x.numel() * 576 / t / 1e9:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
