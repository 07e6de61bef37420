"""Linear + GELU (erf) 4096 x 8704 -> 1024 bf16 forward: the persistent TMA kernel's epilogue variants.

Variants are copies of triton_kernels/gemm_kernels.py written by variants(): the production kernel (GELU
not flattened, two column halves), GELU flattened with halves, flattened whole-tile; each at 3 and 4 stages,
128x256x64 8 warps (the tuned tile) and 128x128x64. Also ReLU / tanh-GELU production and cuBLAS (linear +
gelu). Kernel time: CUDA events, L2 flushed, 0.5 ms GPU lead (runtime.cuda_time_ms)."""
import importlib.util, json, os, statistics, sys
sys.path.insert(0, ".")
import torch
from torch.nn import functional
from triton_kernels import gemm
from triton_kernels.runtime import cuda_time_ms
from triton_kernels.gemm import _ensure_allocator

OUT = os.environ.get("OUT", "/tmp")
SRC = open("triton_kernels/gemm_kernels.py").read()


def variant(name, flatten_gelu, halves):
    s = SRC
    if flatten_gelu:
        s = s.replace('FLATTEN: tl.constexpr = (ACT != "gelu") and', 'FLATTEN: tl.constexpr =')
    if not halves:
        s = s.replace('if BLOCK_N >= 128 and ACT == "gelu":', 'if False:')
    assert flatten_gelu is False or s != SRC
    path = f"/tmp/{name}.py"
    open(path, "w").write(s)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod._gemm_tma_kernel


M, K, N = 4096, 8704, 1024
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) / K ** 0.5
b = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g)
ref = {act: (functional.gelu(functional.linear(x.double(), w.double(), b.double()), approximate="none")
             if act == "gelu" else functional.gelu(functional.linear(x.double(), w.double(), b.double()), approximate="tanh")
             if act == "gelu_tanh" else torch.relu(functional.linear(x.double(), w.double(), b.double())))
       for act in ("gelu", "relu", "gelu_tanh")}
kernels = {"prod": variant("v_prod", False, True), "flat_halves": variant("v_flat_halves", True, True),
           "flat_whole": variant("v_flat_whole", True, False)}
_ensure_allocator()
SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows = []


def run(kernel, act, bm, bn, bk, stages, warps):
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    tiles = (M // bm) * (N // bn)
    progs = min(tiles, SMS)
    def call():
        kernel[(progs,)](a_ptr=x, b_ptr=w, c_ptr=c, bias_ptr=b, res_ptr=c, z_ptr=c, M=M, N=N, K=K, NUM_PROGS=progs,
                         stride_a=K, stride_b=K, stride_cm=N, stride_cn=1, stride_bias=1, stride_rm=0, stride_rn=0,
                         stride_zm=0, stride_zn=0, A_T=False, B_T=True, HAS_BIAS=True, HAS_RES=False, SAVE_Z=False,
                         ACT=act, PRECISION="ieee", INDEX_64=False, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                         PDL=False, num_warps=warps, num_stages=stages)
    call(); torch.cuda.synchronize()
    err = ((c.double() - ref[act]).abs().max() / ref[act].abs().max()).item()
    ts = []
    for _ in range(3):
        ts += cuda_time_ms(call, warmup=3, rep=40, flush_l2=True, lead_ms=0.5)
    return statistics.median(ts), err


configs = [(128, 256, 64, 3, 8), (128, 256, 64, 4, 8), (128, 128, 64, 4, 8), (128, 128, 64, 5, 8), (128, 128, 64, 4, 4)]
for name, kernel in kernels.items():
    for act in (("gelu", "relu", "gelu_tanh") if name == "prod" else ("gelu",)):
        for cfg in configs:
            try:
                ms, err = run(kernel, act, *cfg)
            except Exception as e:  # out of resources
                print(name, act, cfg, "failed:", str(e).splitlines()[0][:120], flush=True)
                continue
            rows.append(dict(variant=name, act=act, cfg=cfg, ms=ms, err=err))
            print(f"{name:12s} {act:9s} {cfg}: {ms * 1e3:7.1f} us  err {err:.1e}", flush=True)
for act in ("gelu", "relu", "gelu_tanh"):
    f = (lambda: functional.gelu(functional.linear(x, w, b))) if act == "gelu" else \
        (lambda: functional.gelu(functional.linear(x, w, b), approximate="tanh")) if act == "gelu_tanh" else \
        (lambda: torch.relu(functional.linear(x, w, b)))
    ts = []
    for _ in range(3):
        ts += cuda_time_ms(f, warmup=3, rep=40, flush_l2=True, lead_ms=0.5)
    rows.append(dict(variant="cublas", act=act, cfg=None, ms=statistics.median(ts), err=None))
    print(f"cublas       {act:9s}: {statistics.median(ts) * 1e3:7.1f} us", flush=True)
json.dump(rows, open(os.path.join(OUT, "gelu_probe.json"), "w"), indent=1)
