"""tf32, N-major B, C^T = B^T A^T with B^T as wgmma's register operand, asynchronous (one product in flight)
against synchronous (each product waited for before the next register load, which keeps the PTX rule that a
register operand stays unchanged while its product runs). Per tile and size: the waits in Triton's PTX, max
relative error against float64 over 8 launches on fresh outputs, whether the 8 results are equal bit for bit,
and the time replayed (L2 flushed) against cuBLAS and today's copy of B."""
import importlib.util, json, os, re, statistics, sys
import torch, triton
sys.path.insert(0, ".")
from triton_kernels import gemm
from triton_kernels.runtime import capture_graph, cuda_time_ms

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("swapk", os.path.join(here, "tf32_swap_kernels.py"))
swapk = importlib.util.module_from_spec(spec); spec.loader.exec_module(swapk)
OUT = os.environ.get("OUT", "/tmp")
torch.backends.cuda.matmul.allow_tf32 = True
gemm._ensure_allocator()
SMS = torch.cuda.get_device_properties(0).multi_processor_count
TILES = [(256, 128, 32, 8, 3), (256, 128, 32, 8, 4), (128, 64, 32, 4, 5), (128, 128, 32, 8, 4), (256, 64, 64, 4, 3)]
rows = []
for n in (1024, 2048, 4096, 8192):
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", generator=g); b = torch.randn(n, n, device="cuda", generator=g)
    exact = a.double() @ b.double(); scale = exact.abs().max().item()
    rep = 15 if n == 8192 else 50

    def replayed(fn):
        graph, _ = capture_graph(fn)
        return statistics.median(cuda_time_ms(graph.replay, warmup=3, rep=rep)) * 1e3
    cub = replayed(lambda: torch.matmul(a, b))
    copy = replayed(lambda: gemm.gemm(a, b, precision="tf32"))
    rows.append(dict(n=n, variant="cublas", us=cub)); rows.append(dict(n=n, variant="copy of B (tuned)", us=copy, ratio=cub / copy))
    print(json.dumps(rows[-2]), json.dumps(rows[-1]), flush=True)
    for bm, bn, bk, w, st in TILES:
        for sync in (False, True):
            c = torch.empty((n, n), device="cuda")
            progs = min(triton.cdiv(n, bm) * triton.cdiv(n, bn), SMS)

            def launch():
                return swapk.swap_kernel[(progs,)](a, b, c, n, n, n, progs, a.stride(0), b.stride(0), c.stride(0),
                                                   BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, PRECISION="tf32",
                                                   TRANS_OUT=True, REG_A=True, SYNC=sync, num_warps=w, num_stages=st)
            name = f"{bm}x{bn}x{bk} w{w}s{st} {'sync' if sync else 'async'}"
            try:
                k = launch()
                waits = re.findall(r"wgmma.wait_group.sync.aligned (\d+)", k.asm["ptx"])
                errs, outs = [], []
                for _ in range(8):
                    c.fill_(float("nan")); launch(); torch.cuda.synchronize()
                    errs.append((c.double() - exact).abs().max().item() / scale); outs.append(c.clone())
                same = all(torch.equal(outs[0], o) for o in outs[1:])
                us = replayed(launch)
                r = dict(n=n, variant=name, us=us, ratio=cub / us, max_err=max(errs), bit_equal=same, waits=waits)
            except Exception as e:  # noqa: BLE001
                r = dict(n=n, variant=name, error=str(e)[:200])
            rows.append(r); print(json.dumps(r), flush=True)
    del a, b, exact
    torch.cuda.empty_cache()
with open(os.path.join(OUT, "sync_probe.json"), "w") as fh:
    json.dump(rows, fh, indent=1)
