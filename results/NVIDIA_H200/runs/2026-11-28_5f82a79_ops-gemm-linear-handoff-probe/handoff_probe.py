"""Experiment (session 54): where does a backward on autograd's device thread lose its host time?

Session 53 found that an eager fwd+bwd call costs 20-290 us more with autograd's device threads on (the default: a
CUDA backward runs on a worker thread while the calling thread waits) than with them off, and more for a Python
autograd node than for torch's own. Candidates: (a) the two thread wake-ups per backward call (caller -> device
thread -> caller), (b) the GIL passed between the two threads, (c) a slower host path on the device thread itself
(each kernel launch dearer there). This probe measures each directly on tiny CUDA tensors (no GPU-bound work):

1. thread ping-pong: round trip between two Python threads through threading.Event (two wake-ups + two GIL passes)
2. launch cost: 400 tiny in-place kernel launches timed on the calling thread, inside a Python node's backward on
   the device thread, and inside a plain Python thread
3. the backward of a trivial graph (one elementwise op; an identity Python node; the node + 20 launches inside its
   backward), host time per call, device threads on and off, with the time from the call to the node's backward
   entry and from its exit to the caller's return
4. 3 again with sys.setswitchinterval(1e-5) (does the GIL's 5 ms switch interval take part?)
"""
import statistics
import sys
import threading
import time

import torch

STAMPS = {}


def ping_pong(rounds=2000):
    ping, pong = threading.Event(), threading.Event()

    def partner():
        for _ in range(rounds):
            ping.wait()
            ping.clear()
            pong.set()

    thread = threading.Thread(target=partner)
    thread.start()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        ping.set()
        pong.wait()
        pong.clear()
        times.append(time.perf_counter_ns() - t0)
    thread.join()
    return statistics.median(times) / 1e3, min(times) / 1e3


def launches(t, count):
    t0 = time.perf_counter_ns()
    for _ in range(count):
        t.add_(1)
    return (time.perf_counter_ns() - t0) / count / 1e3


class Identity(torch.autograd.Function):
    """An identity node whose backward stamps its entry and exit (and optionally launches `work` kernels)."""

    @staticmethod
    def forward(ctx, x, work, scratch):
        ctx.work, ctx.scratch = work, scratch
        return x.view_as(x)

    @staticmethod
    def backward(ctx, dy):
        STAMPS["enter"] = time.perf_counter_ns()
        STAMPS["thread"] = threading.get_native_id()
        if ctx.work:
            STAMPS["launch_us"] = launches(ctx.scratch, ctx.work)
        STAMPS["exit"] = time.perf_counter_ns()
        return dy, None, None


def main():
    torch.cuda.init()
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"main thread {threading.get_native_id()}, cpus {len(__import__('os').sched_getaffinity(0))}", flush=True)
    scratch = torch.zeros(1, device="cuda")
    x = torch.randn(8, device="cuda", requires_grad=True)
    dy = torch.ones(8, device="cuda")
    for _ in range(3):
        med, low = ping_pong()
        print(f"1 ping-pong between two Python threads: median {med:.1f} us, min {low:.1f} us", flush=True)

    for _ in range(20):
        launches(scratch, 50)
    torch.cuda.synchronize()
    for rep in range(3):
        main_us = launches(scratch, 400)
        torch.cuda.synchronize()
        torch.autograd.set_multithreading_enabled(True)
        torch.autograd.grad(Identity.apply(x, 400, scratch), x, dy)
        device_us, device_thread = STAMPS["launch_us"], STAMPS["thread"]
        torch.cuda.synchronize()
        box = {}
        thread = threading.Thread(target=lambda: box.setdefault("us", launches(scratch, 400)))
        thread.start()
        thread.join()
        torch.cuda.synchronize()
        print(f"2 launch cost per tiny kernel: calling thread {main_us:.2f} us, device thread ({device_thread}) "
              f"{device_us:.2f} us, a Python thread {box['us']:.2f} us", flush=True)

    graphs = {
        "eager x*2": lambda: torch.autograd.grad(x * 2, x, dy),
        "python node": lambda: torch.autograd.grad(Identity.apply(x, 0, scratch), x, dy),
        "python node + 20 launches": lambda: torch.autograd.grad(Identity.apply(x, 20, scratch), x, dy),
    }
    for interval in (sys.getswitchinterval(), 1e-5):
        sys.setswitchinterval(interval)
        for threads in (True, False):
            torch.autograd.set_multithreading_enabled(threads)
            for name, fn in graphs.items():
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
                total, to_enter, from_exit = [], [], []
                for _ in range(300):
                    t0 = time.perf_counter_ns()
                    fn()
                    t1 = time.perf_counter_ns()
                    total.append(t1 - t0)
                    if name != "eager x*2":
                        to_enter.append(STAMPS["enter"] - t0)
                        from_exit.append(t1 - STAMPS["exit"])
                torch.cuda.synchronize()
                split = (f"; call->backward entry {statistics.median(to_enter) / 1e3:6.1f} us, backward exit->return "
                         f"{statistics.median(from_exit) / 1e3:6.1f} us" if to_enter else "")
                print(f"3 switch {interval:.0e} s, device threads {'on ' if threads else 'off'} {name:26s} "
                      f"median {statistics.median(total) / 1e3:6.1f} us, min {min(total) / 1e3:6.1f}{split}",
                      flush=True)
    torch.autograd.set_multithreading_enabled(True)


if __name__ == "__main__":
    main()
