"""Offline sm_90 compile of the stream-K kernel (Triton 3.6 wheel, no GPU): shared memory, wgmma, spills."""
import sys, re, os, subprocess
sys.path.insert(0, "/work/main")
os.environ["TRITON_INTERPRET"] = "0"
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton_kernels.gemm_kernels import _gemm_streamk_kernel as fn, _gemm_tma_kernel
bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
for spec in sys.argv[1:]:
    bm, bn, bk, warps, st, at, bt = map(int, spec.split(","))
    which = fn
    sig = {n: "*bf16" for n in ("a_ptr", "b_ptr", "c_ptr", "bias_ptr", "res_ptr", "z_ptr")}
    sig.update(part_ptr="*fp32", count_ptr="*i32")
    sig.update({n: "i32" for n in ("M", "N", "K", "NUM_PROGS", "stride_a", "stride_b", "stride_cm", "stride_cn",
                                   "stride_bias", "stride_rm", "stride_rn", "stride_zm", "stride_zn")})
    cx = dict(A_T=bool(at), B_T=bool(bt), HAS_BIAS=False, HAS_RES=False, SAVE_Z=False, ACT="none", PRECISION="ieee",
              INDEX_64=False, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8)
    sig.update({k: "constexpr" for k in cx})
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in ("a_ptr", "b_ptr", "c_ptr", "part_ptr", "stride_a", "stride_b", "stride_cm")}
    src = ASTSource(fn, sig, {(fn.arg_names.index(k),): v for k, v in cx.items()}, attrs)
    try:
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=st))
    except Exception as e:
        print(spec, "FAILED", str(e)[-3000:]); continue
    open("/tmp/s40.ptx", "w").write(k.asm["ptx"])
    open("/tmp/s40.ttgir", "w").write(k.asm["ttgir"])
    pt = subprocess.run([os.path.join(bin_dir, "ptxas"), "-arch=sm_90a", "-v", "/tmp/s40.ptx", "-o", "/tmp/s40.cubin"], capture_output=True, text=True)
    warn = [l for l in (pt.stderr + pt.stdout).splitlines() if "arning" in l or "Performance" in l or "registers" in l]
    sass = subprocess.run([os.path.join(bin_dir, "cuobjdump"), "-sass", "/tmp/s40.cubin"], capture_output=True, text=True).stdout
    ins = [l.split(";")[0].split("*/")[-1].strip() for l in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", l)]
    print(spec, "shared", k.metadata.shared, "HGMMA", sum("HGMMA" in l for l in ins), "UTMALDG", sum("UTMALDG" in l for l in ins),
          "STL", sum('STL' in l for l in ins), "LDL", sum('LDL' in l for l in ins), "ATOM/RED", sum(('ATOM' in l or 'RED' in l) for l in ins))
    for w in warn[:4]:
        print("   ", w[:250])
