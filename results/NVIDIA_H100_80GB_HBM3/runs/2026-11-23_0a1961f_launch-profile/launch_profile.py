"""Where does an eager call's host time go? Floors and a profile of one steady-state call per op."""
import cProfile, inspect, io, os, pstats, sys, time, json
import torch, triton, triton.language as tl
OUT = os.environ.get("OUT", "/tmp")
from triton_kernels import launcher as L
from triton_kernels import softmax as S, gemm as G, layernorm as LN, cross_entropy as CE

print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())
from triton.runtime.jit import JITFunction
from triton.compiler.compiler import CompiledKernel
with open(f"{OUT}/triton_src.txt", "w") as f:
    f.write(inspect.getsource(JITFunction.run)); f.write(inspect.getsource(CompiledKernel))

def per_call_us(fn, n=2000, reps=5):
    for _ in range(200): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n): fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / n * 1e6)
    return sorted(ts)[len(ts)//2]

def graph_us(fn, n=2000):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(20): fn()
    for _ in range(5): g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n // 20): g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6

@triton.jit
def empty8(a, b, n0, n1, n2, n3, n4, n5, BLOCK: tl.constexpr):
    pass

@triton.jit
def copy_k(x, y, n, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + o, tl.load(x + o, mask=o < n), mask=o < n)

a = torch.randn(1024, device="cuda"); b = torch.empty_like(a)
rows = {}
rows["floor kernel[grid] empty(8 args)"] = per_call_us(lambda: empty8[(1,)](a, b, 1, 2, 3, 4, 5, 6, BLOCK=128))
ck = empty8[(1,)](a, b, 1, 2, 3, 4, 5, 6, BLOCK=128)
stream = torch.cuda.current_stream().cuda_stream
rows["floor direct compiled.run empty(8 args)"] = per_call_us(lambda: ck.run(1, 1, 1, stream, ck.function, ck.packed_metadata, None, None, None, a, b, 1, 2, 3, 4, 5, 6, 128))
bk = L.bind(empty8, BLOCK=128, num_warps=4, num_stages=1)
rows["BoundKernel empty(8 args)"] = per_call_us(lambda: bk[(1,)](a, b, 1, 2, 3, 4, 5, 6))
rows["BoundKernel.launch empty(8 args)"] = per_call_us(lambda: bk.launch((1,), a, b, 1, 2, 3, 4, 5, 6))
rows["torch.empty_like 1024"] = per_call_us(lambda: torch.empty_like(a))
rows["torch.cuda.current_stream().cuda_stream"] = per_call_us(lambda: torch.cuda.current_stream().cuda_stream)
from triton.runtime import driver
gs = driver.active.get_current_stream
rows["driver get_current_stream"] = per_call_us(lambda: gs(0))
rows["torch.cuda.current_device"] = per_call_us(lambda: torch.cuda.current_device())
rows["knobs launch_enter_hook read"] = per_call_us(lambda: triton.knobs.runtime.launch_enter_hook)
rows["guard 8 args"] = per_call_us(lambda: L._guard((a, b, 1, 2, 3, 4, 5, 6)))
# correctness of the bound path across alignments / sizes
bc = L.bind(copy_k, BLOCK=256, num_warps=4)
for n in (1, 17, 256, 1000, 1024):
    for off in (0, 1, 4):
        x = torch.randn(n + off, device="cuda")[off:]; y = torch.full((n + off,), float("nan"), device="cuda")[off:]
        for _ in range(2): bc[(triton.cdiv(n, 256),)](x, y, n)
        assert torch.equal(x, y), (n, off)
print("bound copy: correct across sizes and offsets; compiled variants:", len(bc._compiled))

with torch.no_grad():
    cases = {
        "softmax 128x10": (lambda x=torch.randn(128, 10, device="cuda"): (lambda: torch.softmax(x, -1), lambda: S.softmax(x, -1))),
        "linear 128x784->10": (lambda x=torch.randn(128, 784, device="cuda"), w=torch.randn(10, 784, device="cuda"), bb=torch.randn(10, device="cuda"): (lambda: torch.nn.functional.linear(x, w, bb), lambda: G.linear(x, w, bb))),
        "layernorm 64x1024": (lambda x=torch.randn(64, 1024, device="cuda"), w=torch.randn(1024, device="cuda"), bb=torch.randn(1024, device="cuda"): (lambda: torch.nn.functional.layer_norm(x, (1024,), w, bb), lambda: LN.layer_norm(x, 1024, w, bb))),
        "cross_entropy 128x10": (lambda x=torch.randn(128, 10, device="cuda"), t=torch.randint(0, 10, (128,), device="cuda"): (lambda: torch.nn.functional.cross_entropy(x, t), lambda: CE.cross_entropy(x, t))),
    }
    for name, mk in cases.items():
        ref, ours = mk()
        rows[f"{name} torch"] = per_call_us(ref)
        rows[f"{name} ours"] = per_call_us(ours)
        rows[f"{name} ours graph"] = graph_us(ours)
        pr = cProfile.Profile(); pr.enable()
        for _ in range(3000): ours()
        torch.cuda.synchronize(); pr.disable()
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
        with open(f"{OUT}/profile_{name.split()[0]}.txt", "w") as f: f.write(s.getvalue())
for k, v in rows.items():
    print(f"{v:9.2f} us  {k}")
json.dump(rows, open(f"{OUT}/launch_floors.json", "w"), indent=1)
