"""Experiment (session 54): does the core a ResNet-18 eager-call step is pinned to matter? bench.resnet
--host-cores pinned every thread to core 0 after the warm-up and its Triton step read 11.9 ms (p20 8.1), where
taskset -c 2 for the whole process gave 6.5 ms. Here one process warms eager and triton once (all cores), then
times 40 back-to-back steps per setting (wall to a synchronize, and CUDA-event medians per step), the settings
interleaved over 3 rounds: all cores, core 0, core 2, core 15, each pinned with bench.harness.host_cores.
Session 55: the settings come from argv[1] (comma-separated), so the same script runs inside `taskset -c 15`
(pinned from the start) and outside it (pinned after the warm-up) on one box."""
import statistics
import sys
import time

import torch

from bench import resnet as bench_resnet
from bench.harness import host_cores
from triton_kernels.runtime import CudaEventTimer

SETTINGS = tuple(sys.argv[1].split(",")) if len(sys.argv) > 1 else ("all", "0", "2", "15")


def main():
    device = torch.device("cuda")
    trainers = {}
    for backend in ("eager", "triton"):
        args = bench_resnet.parse_args(["--model", "resnet18", "--synthetic", "--amp", "bf16", "--backend", backend])
        bench_resnet.seed_everything(0)
        model, forward = bench_resnet.build_model(args, backend, device)
        trainers[backend] = bench_resnet.Trainer(args, model, forward, device, total_steps=10_000)
    x = torch.randn(512, 3, 32, 32, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (512,), device=device)
    for trainer in trainers.values():
        for _ in range(30):
            trainer.step(x, y)
    torch.cuda.synchronize()
    walls = {(b, s): [] for b in trainers for s in SETTINGS}
    events = {(b, s): [] for b in trainers for s in SETTINGS}
    for rnd in range(3):
        for setting in SETTINGS:
            with host_cores(setting):
                for backend, trainer in trainers.items():
                    timer = CudaEventTimer()
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    for _ in range(40):
                        with timer.span():
                            trainer.step(x, y)
                    torch.cuda.synchronize()
                    walls[backend, setting].append((time.perf_counter() - start) / 40 * 1e3)
                    events[backend, setting].append(statistics.median(timer.times_ms()))
                    print(f"round {rnd} cores {setting:3s} {backend:6s} wall {walls[backend, setting][-1]:6.2f} "
                          f"ms/step, event median {events[backend, setting][-1]:6.2f} ms", flush=True)
    print("medians over rounds (ms per step): wall / event median")
    for key in walls:
        print(f"{key[0]:6s} cores {key[1]:3s} {statistics.median(walls[key]):6.2f} / "
              f"{statistics.median(events[key]):6.2f}")


if __name__ == "__main__":
    main()
