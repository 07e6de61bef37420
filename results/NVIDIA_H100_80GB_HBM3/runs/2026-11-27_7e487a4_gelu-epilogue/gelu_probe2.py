"""Linear + GELU 4096 x 8704 -> 1024 bf16 forward, second probe: where the erf epilogue's ~8 us go.
Variants (copies of triton_kernels/gemm_kernels.py): ReLU / tanh-GELU not flattened; the erf GELU with 12
or 16 warps, 256x128 tiles, quarter-tile epilogue; a polynomial-sigmoid GELU (timing only, ~3e-6 abs)."""
import importlib.util, json, os, statistics, sys
sys.path.insert(0, ".")
import torch
from torch.nn import functional
from triton_kernels.runtime import cuda_time_ms
from triton_kernels.gemm import _ensure_allocator

OUT = os.environ.get("OUT", "/tmp")
SRC = open("triton_kernels/gemm_kernels.py").read()
FLAT = 'FLATTEN: tl.constexpr = (ACT != "gelu") and (a_ptr.dtype.element_ty.primitive_bitwidth == 16)'
POLY = [-2.3018429279327393, -0.0008072779746726155, -0.10683122277259827, 0.0070707895793020725,
        -0.007719699293375015, 0.004145326092839241, -0.0009129929821938276, 9.442798909731209e-05,
        -3.827297405223362e-06]
poly_src = "        a = tl.minimum(tl.abs(z), 5.5)\n        r = %r\n" % POLY[-1] + "".join(
    "        r = r * a + %r\n" % v for v in POLY[-2::-1]) + "        z = z / (1.0 + tl.exp2(z * r))\n"
QUARTERS = '''    if BLOCK_N >= 128 and ACT == "gelu":
        Q: tl.constexpr = BLOCK_N // 4
        h0, h1 = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        q0, q1 = tl.split(tl.permute(tl.reshape(h0, (BLOCK_M, 2, Q)), (0, 2, 1)))
        q2, q3 = tl.split(tl.permute(tl.reshape(h1, (BLOCK_M, 2, Q)), (0, 2, 1)))
        offs_n = off_n + tl.arange(0, Q)
        _epilogue(q0, offs_m, offs_n, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
                  stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z, ACT, INDEX_64)
        _epilogue(q1, offs_m, offs_n + Q, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
                  stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z, ACT, INDEX_64)
        _epilogue(q2, offs_m, offs_n + 2 * Q, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
                  stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z, ACT, INDEX_64)
        _epilogue(q3, offs_m, offs_n + 3 * Q, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
                  stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z, ACT, INDEX_64)
    elif False:
'''


def variant(name, subs):
    s = SRC
    for old, new in subs:
        assert old in s, old
        s = s.replace(old, new)
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
z64 = functional.linear(x.double(), w.double(), b.double())
ref = {"gelu": functional.gelu(z64), "relu": torch.relu(z64), "gelu_tanh": functional.gelu(z64, approximate="tanh")}
_ensure_allocator()
SMS = torch.cuda.get_device_properties(0).multi_processor_count


def run(kernel, act, bm, bn, bk, stages, warps):
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    progs = min((M // bm) * (N // bn), SMS)
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


T = (128, 256, 64)
plan = [
    ("prod", [], [("gelu", T + (3, 8)), ("relu", T + (4, 8)), ("gelu_tanh", T + (4, 8)),
                  ("gelu", T + (3, 12)), ("gelu", T + (4, 12)), ("gelu", T + (3, 16)), ("gelu", T + (4, 16)),
                  ("gelu", (256, 128, 64, 3, 8)), ("gelu", (256, 128, 64, 4, 8)), ("relu", (256, 128, 64, 4, 8))]),
    ("noflat", [(FLAT, "FLATTEN: tl.constexpr = False")],
     [("relu", T + (3, 8)), ("relu", T + (4, 8)), ("gelu_tanh", T + (3, 8)), ("gelu_tanh", T + (4, 8))]),
    ("quarters", [('    if BLOCK_N >= 128 and ACT == "gelu":\n', QUARTERS)], [("gelu", T + (3, 8)), ("gelu", T + (4, 8))]),
    ("poly", [("        z = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))\n", poly_src)],
     [("gelu", T + (3, 8)), ("gelu", T + (4, 8))]),
    ("poly_flat", [("        z = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))\n", poly_src),
                   (FLAT, 'FLATTEN: tl.constexpr = (a_ptr.dtype.element_ty.primitive_bitwidth == 16)'),
                   ('if BLOCK_N >= 128 and ACT == "gelu":', 'if False:')],
     [("gelu", T + (3, 8)), ("gelu", T + (4, 8))]),
]
rows = []
for name, subs, runs in plan:
    kernel = variant("v_" + name, subs)
    for act, cfg in runs:
        try:
            ms, err = run(kernel, act, *cfg)
        except Exception as e:
            print(name, act, cfg, "failed:", str(e).splitlines()[0][:120], flush=True)
            continue
        rows.append(dict(variant=name, act=act, cfg=cfg, ms=ms, err=err))
        print(f"{name:10s} {act:9s} {cfg}: {ms * 1e3:7.1f} us  err {err:.1e}", flush=True)
for act, f in (("gelu", lambda: functional.gelu(functional.linear(x, w, b))),
               ("relu", lambda: torch.relu(functional.linear(x, w, b)))):
    ts = []
    for _ in range(3):
        ts += cuda_time_ms(f, warmup=3, rep=40, flush_l2=True, lead_ms=0.5)
    rows.append(dict(variant="cublas", act=act, cfg=None, ms=statistics.median(ts), err=None))
    print(f"cublas     {act:9s}: {statistics.median(ts) * 1e3:7.1f} us", flush=True)
json.dump(rows, open(os.path.join(OUT, "gelu_probe2.json"), "w"), indent=1)
