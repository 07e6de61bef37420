"""Experiment (session 54): which phase of an eager ResNet-18 training step grows with autograd's device threads on?

Session 53 measured the step 1.2-4.9 ms slower with the threads on (the default) than off, far more than the ~60 us
one backward call's two thread hand-offs cost (handoff_probe.py). Here each phase's host time is taken per step
without synchronising (forward + loss, zero_grad + backward, optimiser + scheduler), then the wall time of the
round to its synchronize, for eager and triton (tuned: the tuning cache of this call's bench.resnet runs), threads
on and off interleaved. If the backward's host time grows with the threads on, the device thread itself runs the
backward's host path slower; if not, the cost is elsewhere (the GPU side, or waits).
"""
import statistics
import sys
import time

import torch

from bench import resnet as bench_resnet


def main():
    device = torch.device(sys.argv[2] if len(sys.argv) > 2 else "cuda")
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 512
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows = {}
    for backend in sys.argv[1].split(","):
        args = bench_resnet.parse_args(["--model", "resnet18", "--synthetic", "--amp", "bf16", "--backend", backend])
        bench_resnet.seed_everything(0)
        model, forward = bench_resnet.build_model(args, backend, device)
        trainer = bench_resnet.Trainer(args, model, forward, device, total_steps=10_000)
        x = torch.randn(batch, 3, 32, 32, device=device).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (batch,), device=device)
        for _ in range(30 if device.type == "cuda" else 1):
            trainer.step(x, y)
        sync()
        steps = 40 if device.type == "cuda" else 2
        for rnd in range(4 if device.type == "cuda" else 1):
            for threads in (True, False):
                trainer.autograd_threads = threads
                phases = {"fwd": [], "bwd": [], "opt": []}
                start = time.perf_counter()
                for _ in range(steps):
                    t0 = time.perf_counter()
                    with torch.autocast(device.type, dtype=torch.bfloat16):
                        out = forward(x)
                        loss = trainer.criterion(out, y)
                    t1 = time.perf_counter()
                    trainer.optimizer.zero_grad(set_to_none=True)
                    with torch.autograd.set_multithreading_enabled(threads):
                        loss.backward()
                    t2 = time.perf_counter()
                    trainer.optimizer.step()
                    trainer.scheduler.step()
                    t3 = time.perf_counter()
                    for name, a, b in (("fwd", t0, t1), ("bwd", t1, t2), ("opt", t2, t3)):
                        phases[name].append((b - a) * 1e3)
                sync()
                wall = (time.perf_counter() - start) / steps * 1e3
                key = (backend, "on" if threads else "off")
                rows.setdefault(key, []).append((wall, {k: statistics.median(v) for k, v in phases.items()}))
                print(f"{backend:7s} threads {key[1]:3s} round {rnd}: wall {wall:6.2f} ms/step; host medians fwd "
                      f"{rows[key][-1][1]['fwd']:5.2f}, bwd {rows[key][-1][1]['bwd']:5.2f}, opt "
                      f"{rows[key][-1][1]['opt']:5.2f} ms", flush=True)
        del model, forward, trainer
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print("medians over rounds (ms per step): wall | host fwd, bwd, opt")
    for (backend, threads), entries in rows.items():
        med = {k: statistics.median(e[1][k] for e in entries) for k in ("fwd", "bwd", "opt")}
        print(f"{backend:7s} threads {threads:3s} wall {statistics.median(e[0] for e in entries):6.2f} | "
              f"{med['fwd']:5.2f} {med['bwd']:5.2f} {med['opt']:5.2f}")


if __name__ == "__main__":
    main()
