"""Experiment (session 55): where does an eager-call ResNet-18 step's variable host time go?

Session 55's first call: on one box, the Triton step (batch 512, bf16, synthetic, eager calls) timed 7.2-8.1 ms
per step with the process under `taskset -c 15` from its start, 11.4-12.8 ms pinned to core 15 inside the process
after a warm-up on all cores, and rounds of 40 steps ranged 7.5-16 ms. Here one backend per process, rounds of 40
back-to-back steps (no synchronisation inside a round, as a user's loop) cycling through settings (cores: all or
a core number, pinned with bench.harness.host_cores; "-off": autograd's device threads off), each round recording
per step: the wall time, the main thread's CPU time and run-queue wait (/proc/self/task/<tid>/schedstat), its
involuntary context switches, every other thread's CPU time by name, and the core the main and autograd threads
last ran on, and the time of cpu_speed_probe's fixed loop before and after the round (calib). (The second call's version also timed the garbage collector: 0.00 ms per step, dropped.)

usage: python host_noise_probe.py eager|triton [intra-op threads or -] [settings, e.g. all,15,all-off]
"""
import collections
import os
import statistics
import sys
import threading
import time

import torch

from bench import resnet as bench_resnet
from bench.harness import host_cores
from cpu_speed_probe import work

STEPS = 40 if os.environ.get("PROBE_DEVICE", "cuda") == "cuda" else 2


def thread_stats():
    """{tid: (name, cpu_ns, wait_ns, timeslices)} for every thread of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                cpu, wait, slices = map(int, f.read().split())
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except FileNotFoundError:
            continue
        out[int(tid)] = (name, cpu, wait, slices)
    return out


def cpu_speed():
    """The best of 3 times (ms) of cpu_speed_probe's fixed pure-Python loop on this thread: the CPU's speed now."""
    return min(_timed_work() for _ in range(3))


def _timed_work():
    start = time.perf_counter()
    work()
    return (time.perf_counter() - start) * 1e3


def last_cpu(tid):
    """The core a thread last ran on (field 39 of /proc/<tid>/stat)."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def involuntary_switches(tid):
    with open(f"/proc/self/task/{tid}/status") as f:
        for line in f:
            if line.startswith("nonvoluntary_ctxt_switches"):
                return int(line.split()[1])
    return 0


def main():
    backend = sys.argv[1]
    if len(sys.argv) > 2 and sys.argv[2] != "-":
        torch.set_num_threads(int(sys.argv[2]))
    device = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))  # cpu: a smoke test only
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    batch = 512 if device.type == "cuda" else 8
    print(f"pid {os.getpid()} cores {sorted(os.sched_getaffinity(0))} intra-op threads {torch.get_num_threads()}",
          flush=True)
    args = bench_resnet.parse_args(["--model", "resnet18", "--synthetic", "--amp", "bf16", "--backend", backend])
    bench_resnet.seed_everything(0)
    model, forward = bench_resnet.build_model(args, backend, device)
    trainer = bench_resnet.Trainer(args, model, forward, device, total_steps=10_000)
    x = torch.randn(batch, 3, 32, 32, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,), device=device)
    for _ in range(30 if device.type == "cuda" else 1):
        trainer.step(x, y)
    sync()
    settings = sys.argv[3].split(",") if len(sys.argv) > 3 else ["all"]
    main_tid = threading.get_native_id()
    rows = collections.defaultdict(list)
    for rnd in range(int(os.environ.get("PROBE_ROUNDS", 3 * len(settings)))):
        setting = settings[rnd % len(settings)]
        cores, _, threads = setting.partition("-")
        trainer.autograd_threads = threads != "off"
        with host_cores(cores):
            calib_before = cpu_speed()
            before, ctx0 = thread_stats(), involuntary_switches(main_tid)
            start = time.perf_counter()
            for _ in range(STEPS):
                trainer.step(x, y)
            sync()
            wall = (time.perf_counter() - start) / STEPS * 1e3
            after, ctx1 = thread_stats(), involuntary_switches(main_tid)
            calib = (calib_before + cpu_speed()) / 2
            where = {name: last_cpu(tid) for tid, (name, *_) in after.items()
                     if tid == main_tid or name.startswith("pt_autograd")}
        main_cpu = (after[main_tid][1] - before[main_tid][1]) / STEPS / 1e6
        main_wait = (after[main_tid][2] - before[main_tid][2]) / STEPS / 1e6
        others = collections.Counter()
        for tid, (name, cpu, _, _) in after.items():
            if tid != main_tid:
                others[name] += (cpu - before.get(tid, (name, 0, 0, 0))[1]) / STEPS / 1e6
        rows[setting].append((wall, main_cpu, main_wait, sum(others.values()), calib, wall / calib))
        top = ", ".join(f"{name} {ms:.2f}" for name, ms in others.most_common(2))
        print(f"{backend:6s} round {rnd:2d} {setting:7s}: wall {wall:6.2f} ms/step | main cpu {main_cpu:5.2f} wait "
              f"{main_wait:5.2f} invol {(ctx1 - ctx0) / STEPS:4.1f}/step | other threads {sum(others.values()):5.2f} "
              f"ms: {top} | calib {calib:5.2f} ms, wall / calib {wall / calib:5.2f} | last cpus {where}", flush=True)
    print("medians (ms per step): wall | main cpu, wait | other threads' cpu | calib ms, wall / calib")
    for setting, entries in rows.items():
        cols = [statistics.median(e[i] for e in entries) for i in range(6)]
        print(f"{backend:6s} {setting:7s}: {cols[0]:6.2f} | {cols[1]:5.2f} {cols[2]:5.2f} | {cols[3]:5.2f} | "
              f"{cols[4]:5.2f} {cols[5]:5.2f}")

if __name__ == "__main__":
    main()
