"""The Triton backend's host path as eager calls, before and after this commit's two trims, in one process: "old"
patches back the per-buffer stream lookups (a stream key and a capture check for each of the batch norms'
partials, counters and coefficients) and nn.Module.__setattr__ in the prologue; "new" is the code as it is; eager
is the reference. ResNet-18, batch 512, bf16; per step the GPU is drained, then the step's host time is taken
without a sync (phases), and back-to-back steps are timed (eager calls); ROUNDS rounds interleaved."""
import json, os, statistics, threading, time
import torch
import models.resnet as MR
from bench import resnet as R
from triton_kernels import batchnorm as bn, batchnorm_eager as bne

dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
cuda = dev.type == "cuda"
OUT = os.environ.get("OUT", "/tmp")
B = int(os.environ.get("BATCH", "512"))
ROUNDS = int(os.environ.get("ROUNDS", "10"))
WIDTHS = os.environ.get("WIDTHS")
torch.backends.cudnn.benchmark = True
NEW = {"buffers": bne.stream_buffers, "set_plain": MR._set_plain}
_OLD_SCRATCH = {}


def _old_scratch(x, slot, n):  # the pre-trim stream_scratch: its own capture check and stream key
    if bn._capturing_on(x):
        return x.new_empty(n, dtype=torch.float32)
    key = (*bn._stream_key(x), slot, threading.get_ident())
    buf = _OLD_SCRATCH.get(key)
    if buf is None or buf.numel() < n:
        buf = _OLD_SCRATCH[key] = x.new_empty(max(n, 1024), dtype=torch.float32)
    return buf


def old_buffers(x, part, counters, coef=0):
    p = _old_scratch(x, "part", part)
    c = bn._stream_counters(x, counters, bn._stream_key(x), bn._capturing_on(x))
    return p, c, (_old_scratch(x, "coef", coef) if coef else None)


def use(variant):
    bne.stream_buffers = old_buffers if variant == "old" else NEW["buffers"]
    MR._set_plain = (lambda m, n, v: setattr(m, n, v)) if variant == "old" else NEW["set_plain"]


def sync():
    if cuda:
        torch.cuda.synchronize()


def trainer(backend):
    argv = ["--synthetic", "--amp", "bf16" if cuda else "none", "--batch-size", str(B), "--backend", backend]
    if WIDTHS:
        argv += ["--widths", WIDTHS]
    args = R.parse_args(argv)
    torch.manual_seed(0)
    model, fwd = R.build_model(args, backend, dev)
    return R.Trainer(args, model, fwd, dev, 100000)


x = torch.randn(B, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 10, (B,), device=dev)
runs = {"old": trainer("triton"), "new": trainer("triton"), "eager": trainer("eager")}
for v, tr in runs.items():
    use(v)
    for _ in range(20):
        tr.step(x, y)
sync()
host = {v: [] for v in runs}
b2b = {v: [] for v in runs}
for r in range(ROUNDS):
    for v, tr in runs.items():
        use(v)
        for _ in range(10):
            sync()
            t0 = time.perf_counter()
            tr.step(x, y)
            host[v].append(time.perf_counter() - t0)
        sync()
        t0 = time.perf_counter()
        for _ in range(10):
            tr.step(x, y)
        sync()
        b2b[v].append((time.perf_counter() - t0) / 10)
use("new")
res = {v: {"host_ms": 1e3 * statistics.median(host[v]), "eager_call_ms": 1e3 * statistics.median(b2b[v]),
           "eager_call_rounds_ms": [1e3 * t for t in b2b[v]]} for v in runs}
for v, r in res.items():
    print(f"{v:6s} host per step (GPU drained) {r['host_ms']:7.3f} ms   eager calls back to back {r['eager_call_ms']:7.3f} ms"
          f"  rounds {[round(t, 2) for t in r['eager_call_rounds_ms']]}", flush=True)
json.dump(res, open(f"{OUT}/host_trim_ab.json", "w"), indent=1)
