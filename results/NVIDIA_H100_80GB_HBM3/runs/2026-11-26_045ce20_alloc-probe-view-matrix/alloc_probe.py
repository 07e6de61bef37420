"""Experiment (issue 22, next GPU session): the cost of allocating the backward's gradients from Python on the GPU
box, on the main thread and on autograd's thread: torch.empty(shape, device=, dtype=) vs Tensor.new_empty(shape)
vs one shared allocation split into views, for fc3's three gradients (512x1024, 4x1024, 4)."""
import statistics, sys, time
import torch

dev = torch.device("cuda")
dc = torch.randn(512, 4, device=dev, dtype=torch.bfloat16)
shapes = ((512, 1024), (4, 1024), (4,))

def empty():
    return [torch.empty(s, device=dc.device, dtype=dc.dtype) for s in shapes]

def new_empty():
    return [dc.new_empty(s) for s in shapes]

sizes = [512 * 1024, 4 * 1024, 4]
def shared():
    buf = dc.new_empty((sum(sizes),))
    a = buf[:sizes[0]].view(512, 1024)
    b = buf[sizes[0]:sizes[0] + sizes[1]].view(4, 1024)
    return a, b, buf[sizes[0] + sizes[1]:]

def per_call(fn, n=2000):
    for _ in range(200):
        fn()
    out = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(out)

class Probe(torch.autograd.Function):
    fn = None
    result = 0.0
    @staticmethod
    def forward(ctx, x):
        return x.clone()
    @staticmethod
    def backward(ctx, g):
        Probe.result = per_call(Probe.fn, 500)
        return g

for name, fn in (("torch.empty", empty), ("new_empty", new_empty), ("shared + views", shared)):
    Probe.fn = fn
    x = torch.randn(4, device=dev, requires_grad=True)
    Probe.apply(x).sum().backward()
    print(f"{name:16s} main thread {per_call(fn):6.1f} us, autograd thread {Probe.result:6.1f} us per three gradients")
