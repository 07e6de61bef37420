"""Programmatic dependent launch of the batch norm's apply / dx kernels, per layer shape, off and on: GPU time
per call (a) launched from the stream with the queue kept ahead of the GPU (a sleep kernel first, so the
host's launch path is hidden and consecutive kernels meet on the GPU), (b) replayed from a CUDA graph.
Forward (statistics + apply) and forward + backward."""
import json, os, statistics
import torch
from triton_kernels import batchnorm as bn, batchnorm_eager as bne

OUT = os.environ.get("OUT", "/tmp")
dev = torch.device("cuda", 0)
SHAPES = [(512, 512, 4, 4), (512, 256, 8, 8), (512, 128, 16, 16), (512, 64, 32, 32)]
CALLS, ROUNDS = 40, 7
res_all = {}


def reset(variant):
    bn._PLANS.clear(); bne._FAST.clear(); bne._FAST_INFER.clear()
    for t in bn._tuners.values():
        t._memory.clear(); t.trials.clear()
    os.environ["TRITON_PLAYGROUND_CACHE"] = f"/tmp/pdlprobe_{variant}_{os.getpid()}"
    bn._PDL[dev] = variant == "on"


def make(shape, residual):
    C = shape[1]
    x = torch.randn(shape, device=dev).to(torch.bfloat16).to(memory_format=torch.channels_last).requires_grad_()
    r = torch.randn_like(x).requires_grad_() if residual else None
    w = torch.rand(C, device=dev).requires_grad_(); b = torch.randn(C, device=dev).requires_grad_()
    g = torch.randn_like(x)

    def fwd():
        with torch.no_grad():
            return bn.batch_norm(x, None, None, w, b, True, residual=r, relu=True)

    def fwdbwd():
        y = bn.batch_norm(x, None, None, w, b, True, residual=r, relu=True)
        return torch.autograd.grad(y, [t for t in (x, r, w, b) if t is not None], g)
    return fwd, fwdbwd


def queued_us(fn):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        torch.cuda._sleep(50_000_000)  # ~25 ms: the host enqueues every call meanwhile
        s.record()
        for _ in range(CALLS):
            fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1e3 / CALLS)
    return statistics.median(out)


def graph_us(fn):
    stream = torch.cuda.Stream(); stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(ROUNDS):
        graph.replay()
        torch.cuda.synchronize()
        s.record(); graph.replay(); e.record(); torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1e3 / CALLS)
    return statistics.median(out)


rows = []
for variant in ("off", "on"):
    reset(variant)
    for shape in SHAPES:
        for residual in (True, False):
            fwd, fwdbwd = make(shape, residual)
            for name, fn in (("fwd", fwd), ("fwdbwd", fwdbwd)):
                for _ in range(3):
                    fn()
                q, gph = queued_us(fn), graph_us(fn)
                rows.append(dict(variant=variant, shape="x".join(map(str, shape)), residual=residual, pass_=name,
                                 queued_us=q, graph_us=gph))
                print(f"{variant:3s} {rows[-1]['shape']:14s} res={residual!s:5s} {name:6s} queued {q:7.2f} us  graph {gph:7.2f} us",
                      flush=True)
json.dump(rows, open(f"{OUT}/pdl_probe.json", "w"), indent=1)
print("\nshape          res    pass    queued off/on (us)      graph off/on (us)")
for r in rows:
    if r["variant"] == "off":
        o = next(x for x in rows if x["variant"] == "on" and x["shape"] == r["shape"] and x["residual"] == r["residual"]
                 and x["pass_"] == r["pass_"])
        print(f"{r['shape']:14s} {r['residual']!s:5s}  {r['pass_']:6s}  {r['queued_us']:7.2f} {o['queued_us']:7.2f} ({o['queued_us'] - r['queued_us']:+6.2f})"
              f"   {r['graph_us']:7.2f} {o['graph_us']:7.2f} ({o['graph_us'] - r['graph_us']:+6.2f})")
