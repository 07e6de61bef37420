"""Session probe (issue 22), two parts.
1. tf32 C = A @ B with an N-major B (torch.matmul's layout) computed as C^T = B^T A^T in the persistent TMA kernel:
   B^T (not K-major) becomes wgmma's register operand (an elementwise `+ 0.0` keeps Triton from routing it back
   through shared memory), A^T (K-major) stays in shared memory. Against cuBLAS and today's plan (a K-major copy
   of B, then the kernel). Replayed from CUDA graphs, L2 flushed; results vs cuBLAS tf32 and float64.
2. The backward chain (dB, then dA as a dependent launch) for the studies' Linears below CHAIN_MIN_FLOPS:
   fwd+bwd chained vs plain vs torch eager, eager calls (L2 flushed) and replayed, interleaved rounds."""
import json, os, statistics, sys, time
import torch, triton
sys.path.insert(0, ".")
from triton_kernels import gemm, gemm_eager
from triton_kernels.runtime import capture_graph, cuda_time_ms
import importlib.util
spec = importlib.util.spec_from_file_location("swapk", os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf32_swap_kernels.py"))
swapk = importlib.util.module_from_spec(spec); spec.loader.exec_module(swapk)

OUT = os.environ.get("OUT", "/tmp")
PART = os.environ.get("PART", "12")
rows = []
def emit(**r):
    rows.append(r); print(json.dumps(r), flush=True)

gemm._ensure_allocator()
SMS = torch.cuda.get_device_properties(0).multi_processor_count

def replayed_us(fn, rep):
    graph, _ = capture_graph(fn)
    return statistics.median(cuda_time_ms(graph.replay, warmup=3, rep=rep)) * 1e3

def call_us(fn, rep):
    return statistics.median(cuda_time_ms(fn, warmup=3, rep=rep)) * 1e3

if "1" in PART:
    torch.backends.cuda.matmul.allow_tf32 = True
    CFGS = [(128, 128, 32, 8, 3), (128, 128, 32, 8, 4), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3),
            (128, 128, 64, 8, 3), (128, 256, 16, 8, 4), (128, 128, 32, 4, 4), (64, 256, 32, 4, 4),
            (128, 64, 32, 4, 5), (256, 128, 16, 8, 4), (128, 256, 64, 8, 2)]
    for n in (1024, 2048, 4096, 8192):
        g = torch.Generator(device="cuda").manual_seed(n)
        a = torch.randn(n, n, device="cuda", generator=g); b = torch.randn(n, n, device="cuda", generator=g)
        ref = torch.matmul(a, b)
        exact = (a.double() @ b.double())
        scale = exact.abs().max().item()
        rep = 20 if n == 8192 else 50
        cub = replayed_us(lambda: torch.matmul(a, b), rep)
        ours = replayed_us(lambda: gemm.gemm(a, b, precision="tf32"), rep)
        err_cub = ((ref.double() - exact).abs().max().item()) / scale
        err_ours = ((gemm.gemm(a, b, precision="tf32").double() - exact).abs().max().item()) / scale
        emit(part="tf32", n=n, variant="cublas", us=cub, err=err_cub)
        emit(part="tf32", n=n, variant="ours(copy)", us=ours, err=err_ours, ratio=cub / ours)
        for bm, bn, bk, w, st in CFGS:
            for reg in (True,):
                c = torch.full((n, n), float("nan"), device="cuda")
                tiles = triton.cdiv(n, bm) * triton.cdiv(n, bn)
                progs = min(tiles, SMS)
                def launch():
                    swapk.swap_kernel[(progs,)](a, b, c, n, n, n, progs, a.stride(0), b.stride(0), c.stride(0),
                                                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, PRECISION="tf32",
                                                TRANS_OUT=True, REG_A=reg, num_warps=w, num_stages=st)
                try:
                    launch(); torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001
                    emit(part="tf32", n=n, variant=f"swap {bm}x{bn}x{bk} w{w} s{st} reg{int(reg)}", error=str(e)[:200]); continue
                err = ((c.double() - exact).abs().max().item()) / scale
                us = replayed_us(launch, rep)
                emit(part="tf32", n=n, variant=f"swap {bm}x{bn}x{bk} w{w} s{st} reg{int(reg)}", us=us, err=err,
                     ratio=cub / us)
        del a, b, ref, exact
        torch.cuda.empty_cache()

if "2" in PART:
    torch.backends.cuda.matmul.allow_tf32 = False
    from torch.nn import functional
    SHAPES = [("fc1", 512, 8704, 1024, "relu"), ("fc2", 512, 1024, 1024, "relu"),
              ("big_gelu", 4096, 8704, 1024, "gelu")]
    for name, M, K, N, act in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(1)
        x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        w = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) / K ** 0.5).requires_grad_()
        bias = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        gy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16, generator=g)
        f = torch.relu if act == "relu" else functional.gelu
        def eager():
            y = f(functional.linear(x, w, bias)); return (y, *torch.autograd.grad(y, (x, w, bias), gy))
        def ours():
            y = gemm.linear(x, w, bias, activation=act); return (y, *torch.autograd.grad(y, (x, w, bias), gy))
        ours(); ours()
        key, call = gemm_eager.lookup("linear", x, w, bias, None, act, "ieee", None)
        assert call is not None
        outs = {}
        def set_chain(on):
            call.chain = on; call.backward_launches = {}
        graphs = {}
        for v in ("plain", "chain"):
            set_chain(v == "chain"); ours(); torch.cuda.synchronize()
            outs[v] = [t.clone() for t in ours()]
            graphs[v] = capture_graph(ours)[0]
        graphs["eager"] = capture_graph(eager)[0]
        same = all(torch.equal(p, q) for p, q in zip(outs["plain"], outs["chain"]))
        res = {k: {"call": [], "replayed": []} for k in ("eager", "plain", "chain")}
        for rnd in range(5):
            for v in ("eager", "plain", "chain"):
                if v != "eager":
                    set_chain(v == "chain"); ours()
                fn = eager if v == "eager" else ours
                res[v]["call"].append(call_us(fn, 30))
                res[v]["replayed"].append(statistics.median(cuda_time_ms(graphs[v].replay, warmup=3, rep=50)) * 1e3)
        for v in res:
            emit(part="chain", case=name, variant=v, call_us=statistics.median(res[v]["call"]),
                 replayed_us=statistics.median(res[v]["replayed"]), rounds=res[v], bit_equal=same)

with open(os.path.join(OUT, f"s23_probe_{PART}.json"), "w") as fh:
    json.dump(rows, fh, indent=1)
