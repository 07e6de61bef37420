"""Experiment (issue 18): is cuDNN's 64-channel 3x3 forward slow because it waits on DRAM? Time it (and the
128-channel layer) with the L2 flushed and with its operands left in L2 (back-to-back calls on one input), at batch
512 (134 MB moved: does not fit the 50 MB L2) and batch 128 (34 MB: fits)."""
import statistics
import sys
import torch
sys.path.insert(0, ".")
from triton_kernels.runtime import cuda_time_ms


def main():
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    print(torch.cuda.get_device_name(dev))
    for c, hw in ((64, 32), (128, 16)):
        for batch in (512, 128, 64):
            x = torch.randn(batch, c, hw, hw, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
            w = torch.randn(c, c, 3, 3, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
            fn = lambda: torch.nn.functional.conv2d(x, w, padding=1)
            flops = 2 * x.numel() * c * 9
            dram = 2 * x.numel() * 2
            line = f"C={c:3d} {hw}x{hw} batch {batch:3d} ({dram / 2**20:5.1f} MB in+out):"
            t = statistics.median(cuda_time_ms(fn, warmup=5, rep=40, flush_l2=True))
            line += f"  flushed {t * 1e3:7.1f} us = {flops / t / 1e9:5.0f} TFLOP/s, {dram / t / 1e6:6.0f} GB/s"
            # 20 back-to-back calls on one input in a CUDA graph: no host gaps; the input stays in L2 when it fits
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(20):
                    fn()
            t = statistics.median(cuda_time_ms(graph.replay, warmup=3, rep=20, flush_l2=True)) / 20
            line += f" | graph of 20 {t * 1e3:7.1f} us = {flops / t / 1e9:5.0f} TFLOP/s, {dram / t / 1e6:6.0f} GB/s"
            print(line, flush=True)


if __name__ == "__main__":
    main()
