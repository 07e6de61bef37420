"""The backward of Linear(8704 -> 1024) at 4096 rows, bf16: dX = dZ W (4096 x 8704, sum over 1024) and
dW = dZ^T X (1024 x 8704, sum over 4096), the tuned plans of each, in four orders / launch modes: dX then dW
(today), dW then dX, and each with the second GEMM a programmatic dependent launch of the first (the first lets
it launch once all its programs started; it fills the SMs the first's last wave leaves idle and ends only after
the first). cuBLAS's two mm for reference. GPU time per pair: replayed from a CUDA graph and queued (a sleep
kernel ahead, the host's launches hidden)."""
import json, os, statistics
import torch
from triton_kernels import gemm as G
from triton_kernels.launcher import bind

OUT = os.environ.get("OUT", "/tmp")
torch.manual_seed(0)
dev = "cuda"
M, K, N = 4096, 8704, 1024
x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
w = torch.randn(N, K, device=dev, dtype=torch.bfloat16) * 0.02
dz = torch.randn(M, N, device=dev, dtype=torch.bfloat16)
da = torch.empty(M, K, device=dev, dtype=torch.bfloat16)
dw = torch.empty(N, K, device=dev, dtype=torch.bfloat16)
G.gemm(dz, w); G.gemm(dz.t(), x)  # tune both through the public path
pa = G.find_plan(dz, w, da, None, None, None, "none", "ieee", False)
pw = G.find_plan(dz.t(), x, dw, None, None, None, "none", "ieee", False)
la = G.plan_launches(pa, dz, w, da, None, None, None, M, K, N)
lw = G.plan_launches(pw, dz.t(), x, dw, None, None, None, N, K, M)
info = {"dX_plan": [(k.kernel.__name__, k.constexprs, k.options, g) for k, g, _ in la],
        "dW_plan": [(k.kernel.__name__, k.constexprs, k.options, g) for k, g, _ in lw]}
print(json.dumps(info, default=str, indent=0), flush=True)
assert len(la) == 1 and len(lw) == 1, "split-K / relayout plans: not probed"


def variant(launch, pdl_first: bool, pdl_second: bool):
    k, g, args = launch
    if not (pdl_first or pdl_second):
        return k, g, args
    opts = dict(k.options, launch_pdl=True) if pdl_second else dict(k.options)
    return bind(k.kernel, **k.constexprs, PDL=True, **opts), g, args


def pair(first, second, pdl):
    a = variant(first, pdl, False)
    b = variant(second, False, pdl)

    def run():
        a[0].launch(a[1], **a[2])
        b[0].launch(b[1], **b[2])
    return run


ORDERS = {"dX,dW": pair(la[0], lw[0], False), "dW,dX": pair(lw[0], la[0], False),
          "dX,dW pdl": pair(la[0], lw[0], True), "dW,dX pdl": pair(lw[0], la[0], True),
          "cublas dX,dW": lambda: (torch.mm(dz, w, out=da), torch.mm(dz.t(), x, out=dw)),
          "dX": lambda: la[0][0].launch(la[0][1], **la[0][2]), "dW": lambda: lw[0][0].launch(lw[0][1], **lw[0][2]),
          "cublas dX": lambda: torch.mm(dz, w, out=da), "cublas dW": lambda: torch.mm(dz.t(), x, out=dw)}
outs = {}
for name, fn in ORDERS.items():
    if name.startswith("cublas") or name in ("dX", "dW"):
        continue
    da.fill_(float("nan")); dw.fill_(float("nan"))
    fn(); torch.cuda.synchronize()
    outs[name] = (da.clone(), dw.clone())
base = outs["dX,dW"]
for name, (a_, w_) in outs.items():
    print(f"{name:10s} dX equal {torch.equal(a_, base[0])}  dW equal {torch.equal(w_, base[1])}", flush=True)
ref = (dz.double() @ w.double(), dz.double().t() @ x.double())
print("rel err vs fp64: dX %.2e dW %.2e" % (((base[0].double() - ref[0]).norm() / ref[0].norm()).item(),
                                             ((base[1].double() - ref[1]).norm() / ref[1].norm()).item()))

REPS, ROUNDS = 10, 9


def graph_us(fn):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(REPS):
            fn()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(ROUNDS):
        g.replay(); torch.cuda.synchronize()
        st.record(); g.replay(); en.record(); torch.cuda.synchronize()
        out.append(st.elapsed_time(en) * 1e3 / REPS)
    return statistics.median(out)


def queued_us(fn):
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)
        st.record()
        for _ in range(REPS):
            fn()
        en.record(); torch.cuda.synchronize()
        out.append(st.elapsed_time(en) * 1e3 / REPS)
    return statistics.median(out)


res = {"plans": info}
for rnd in range(2):  # two passes, to see the spread
    for name, fn in ORDERS.items():
        gq = graph_us(fn)
        qq = queued_us(fn)
        res.setdefault(name, []).append({"graph_us": gq, "queued_us": qq})
        print(f"pass {rnd} {name:14s} graph {gq:8.2f} us  queued {qq:8.2f} us", flush=True)
json.dump(res, open(f"{OUT}/gemm_pdl_probe.json", "w"), indent=1, default=str)
