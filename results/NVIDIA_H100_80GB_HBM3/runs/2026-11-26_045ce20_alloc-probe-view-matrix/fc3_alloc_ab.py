"""Experiment (issue 22, fc3 host path): the fused backward's three gradient buffers allocated four ways, each
timed as a whole eager step (forward + autograd.grad) against torch's, interleaved in one process; then the
allocations alone on the main thread and on autograd's thread."""
import statistics, sys, time
import torch
from torch import nn
sys.path.insert(0, ".")
from models import layers
from triton_kernels import gemm_backward

import os
dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
DT = torch.bfloat16 if dev.type == "cuda" else torch.float16
current = gemm_backward.buffers


def new_empty(dc, a, b, need_a, need_bias, bias_dtype, b_transposed):
    M, K = a.shape
    N = b.shape[1]
    da = dc.new_empty((M, K)) if need_a else None
    db = dc.new_empty((N, K)).t() if b_transposed else dc.new_empty((K, N))
    dbias = dc.new_empty((N,), dtype=bias_dtype) if need_bias else None
    return da, db, dbias


def _pad(n, es):  # elements, rounded up to 128 bytes
    return -(-n * es // 128) * 128 // es


def shared(dc, a, b, need_a, need_bias, bias_dtype, b_transposed):
    M, K = a.shape
    N = b.shape[1]
    if bias_dtype is not None and bias_dtype != dc.dtype:
        return current(dc, a, b, need_a, need_bias, bias_dtype, b_transposed)
    es = dc.element_size()
    n_a = _pad(M * K, es) if need_a else 0
    n_b = _pad(N * K, es)
    buf = dc.new_empty((n_a + n_b + (N if need_bias else 0),))
    da = buf[:M * K].view(M, K) if need_a else None
    db = buf[n_a:n_a + N * K].view(N, K).t() if b_transposed else buf[n_a:n_a + N * K].view(K, N)
    dbias = buf[n_a + n_b:] if need_bias else None
    return da, db, dbias


def empty_cached_device(dc, a, b, need_a, need_bias, bias_dtype, b_transposed, _dev=dev):
    M, K = a.shape
    N = b.shape[1]
    dt = dc.dtype
    da = torch.empty((M, K), device=_dev, dtype=dt) if need_a else None
    db = torch.empty((N, K), device=_dev, dtype=dt).t() if b_transposed else torch.empty((K, N), device=_dev, dtype=dt)
    dbias = torch.empty((N,), device=_dev, dtype=bias_dtype) if need_bias else None
    return da, db, dbias


VARIANTS = {"torch.empty (main)": current, "new_empty": new_empty, "one shared buffer": shared,
            "torch.empty, device object kept": empty_cached_device}


def timed(fn, n=300):
    torch.cuda.synchronize() if dev.type == "cuda" else None
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize() if dev.type == "cuda" else None
    return (time.perf_counter() - t0) / n * 1e6


def case(name, K, N, act):
    ours = layers.Linear(K, N, activation=act).to(dev, DT) if act != "none" else \
        layers.Linear(K, N).to(dev, DT)
    twin = nn.Linear(K, N).to(dev, DT)
    twin.load_state_dict(ours.state_dict())
    relu = (lambda t: torch.relu(t)) if act == "relu" else (lambda t: t)
    x = torch.randn(512, K, device=dev, dtype=DT, requires_grad=True)
    g = torch.randn(512, N, device=dev, dtype=DT)
    ref = torch.autograd.grad(relu(twin(x)), (x, twin.weight, twin.bias), g)
    steps = {"torch": lambda: torch.autograd.grad(relu(twin(x)), (x, twin.weight, twin.bias), g)}
    for vname, fn in VARIANTS.items():
        def step(fn=fn):
            gemm_backward.buffers = fn
            return torch.autograd.grad(ours(x), (x, ours.weight, ours.bias), g)
        got = step()
        err = max(float((r.float() - o.float()).abs().max() / (r.float().abs().max() + 1e-6)) for r, o in zip(ref, got))
        print(f"{name} {vname}: max relative difference from torch {err:.2e}")
        steps[vname] = step
    for f in steps.values():
        for _ in range(50):
            f()
    res = {k: [] for k in steps}
    for _ in range(9):
        for k, f in steps.items():
            res[k].append(timed(f))
    gemm_backward.buffers = current
    t = statistics.median(res["torch"])
    for k, v in res.items():
        m = statistics.median(v)
        print(f"{name:28s} {k:34s} {m:7.1f} us per step  (p20 {sorted(v)[1]:.1f}, p80 {sorted(v)[-2]:.1f})  "
              f"ours/torch speed {t / m:.3f}x")


print(torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", torch.__version__)
case("fc3 512x1024->4", 1024, 4, "none")
case("fc2 512x1024->1024 relu", 1024, 1024, "relu")
