import sys, re, os, subprocess
sys.path.insert(0, "/work/main"); sys.path.insert(0, "/work/main/.runs39")
os.environ["TRITON_INTERPRET"] = "0"
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from sliced import sliced_kernel as fn
bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
for spec in sys.argv[1:]:
    bm, bn, bk, st, sl = map(int, spec.split(","))
    sig = {n: "*bf16" for n in ("x_ptr", "w_ptr", "c_ptr", "bias_ptr")}
    sig.update({n: "i32" for n in ("M", "N", "K", "stride_x", "stride_w", "stride_cm", "stride_cn")})
    cx = dict(HAS_BIAS=True, ACT="relu", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=st, SLICES=sl, GROUP_M=8)
    sig.update({k: "constexpr" for k in cx})
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in ("x_ptr", "w_ptr", "c_ptr", "stride_x", "stride_w", "stride_cm")}
    src = GluonASTSource(fn, sig, {(fn.arg_names.index(k),): v for k, v in cx.items()}, attrs)
    try:
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    except Exception as e:
        print(spec, "FAILED", str(e)[-3000:]); continue
    open("/tmp/s39.ptx", "w").write(k.asm["ptx"])
    pt = subprocess.run([os.path.join(bin_dir, "ptxas"), "-arch=sm_90a", "-v", "/tmp/s39.ptx", "-o", "/tmp/s39.cubin"], capture_output=True, text=True)
    warn = [l for l in (pt.stderr + pt.stdout).splitlines() if "arning" in l or "Performance" in l]
    sass = subprocess.run([os.path.join(bin_dir, "cuobjdump"), "-sass", "/tmp/s39.cubin"], capture_output=True, text=True).stdout
    ins = [l.split(";")[0].split("*/")[-1].strip() for l in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", l)]
    print(spec, "shared", k.metadata.shared, "HGMMA", sum("HGMMA" in l for l in ins), "DEPBAR", sum("DEPBAR" in l for l in ins),
          "STL", sum('STL' in l for l in ins), "LDL", sum('LDL' in l for l in ins))
    for w in warn[:4]:
        print("   ", w[:250])
