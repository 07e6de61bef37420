"""Experiment (session 55): does this box's CPU speed vary, by core and over time, with no GPU work at all?

Session 55's third call found a single-threaded eager-call ResNet-18 step (autograd's device threads off, no
run-queue wait, no garbage collection) taking 7.7-15 ms of main-thread CPU for the same work, minutes apart, in one
process. Here a fixed pure-Python loop (the same bytecode every time) is timed on each core in turn (the thread
pinned with os.sched_setaffinity), best of 3 per core, cycle after cycle for `seconds`: if its time moves like
the step's, the host path's spread is the CPU's speed, not the step's code.

usage: python cpu_speed_probe.py [seconds]
"""
import os
import statistics
import sys
import time


def work():
    total = 0
    for i in range(200_000):
        total += i * i
    return total


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60
    cores = sorted(os.sched_getaffinity(0))
    per_core = {core: [] for core in cores}
    deadline = time.monotonic() + seconds
    cycle = 0
    while time.monotonic() < deadline:
        line = []
        for core in cores:
            os.sched_setaffinity(0, {core})
            best = min(_timed() for _ in range(3))
            per_core[core].append(best)
            line.append(f"{best:5.1f}")
        print(f"cycle {cycle:3d} t {seconds - (deadline - time.monotonic()):5.1f} s ms per core: {' '.join(line)}",
              flush=True)
        cycle += 1
    os.sched_setaffinity(0, set(cores))
    every = [t for times in per_core.values() for t in times]
    print(f"all cores: min {min(every):.1f} median {statistics.median(every):.1f} max {max(every):.1f} ms")
    for core, times in per_core.items():
        print(f"core {core:2d}: min {min(times):5.1f} median {statistics.median(times):5.1f} max {max(times):5.1f} ms")


def _timed():
    start = time.perf_counter()
    work()
    return (time.perf_counter() - start) * 1e3


if __name__ == "__main__":
    main()
