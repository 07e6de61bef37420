import sys, re, os, subprocess, tempfile
sys.path.insert(0, "/work/main/.runs38")
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
import tf32_coop as tc
bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
for bm, bn, bk, stages, creg, pipe in [tuple(int(x) for x in v.split(",")) for v in sys.argv[1:]]:
    al = gl.NVMMASharedLayout.get_default_for([bm, bk], gl.float32)
    bl = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)
    fn = tc.tf32_coop_kernel
    sig = {"a_desc": f"tensordesc<fp32[{bm}, {bk}],{al!r}>", "b_desc": f"tensordesc<fp32[{bk}, {bn // 2}],{bl!r}>",
           "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32", "stride_cm": "i32", "NUM_PROGS": "i32",
           "STAGES": "constexpr", "GROUP_M": "constexpr", "PIPE": "constexpr", "CONSUMER_REGS": "constexpr",
           "PRODUCER_REGS": "constexpr", "STORE": "constexpr"}
    constexprs = {"STAGES": stages, "GROUP_M": 8, "PIPE": pipe, "CONSUMER_REGS": creg, "PRODUCER_REGS": 24, "STORE": bool(int(os.environ.get("STORE", 1)))}
    attrs = {(2,): [["tt.divisibility", 16]], (6,): [["tt.divisibility", 16]]}
    src = GluonASTSource(fn, sig, {(fn.arg_names.index(k),): v for k, v in constexprs.items()}, attrs)
    tag = (bm, bn, bk, stages, creg, pipe)
    try:
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    except Exception as e:
        print(tag, "FAILED", repr(e)[-1500:]); continue
    ptx = k.asm["ptx"]
    name = "coop_" + "_".join(map(str, tag))
    open(f"/tmp/s38/{name}.ptx", "w").write(ptx)
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    res = subprocess.run([os.path.join(bin_dir, "cuobjdump"), "-res-usage", f.name], capture_output=True, text=True).stdout
    pt = subprocess.run([os.path.join(bin_dir, "ptxas"), "-arch=sm_90a", "-v", "--warn-on-spills", f"/tmp/s38/{name}.ptx",
                         "-o", "/tmp/s38/x.cubin"], capture_output=True, text=True)
    warn = [l for l in (pt.stderr + pt.stdout).splitlines() if "arning" in l or "Performance" in l]
    sass = subprocess.run([os.path.join(bin_dir, "cuobjdump"), "-sass", "/tmp/s38/x.cubin"], capture_output=True,
                          text=True).stdout
    open(f"/tmp/s38/{name}.sass", "w").write(sass)
    ins = [l.split(";")[0].split("*/")[-1].strip() for l in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", l)]
    hg = [i for i, l in enumerate(ins) if "HGMMA" in l]
    serial = sum(1 for i in hg if any("DEPBAR" in l for l in ins[i + 1:i + 3]))
    warn.append(f"HGMMA {len(hg)}, followed by a DEPBAR {serial}; STL {sum('STL' in l for l in ins)}, "
                f"LDL {sum('LDL' in l for l in ins)}")
    print(tag, "shared", k.metadata.shared, re.findall(r"REG:\d+|STACK:\d+", res), "wgmma",
          len(re.findall(r"wgmma.mma_async", ptx)), "ld.shared", len(re.findall(r"ld.shared", ptx)),
          re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+\d+", ptx)[:8])
    for w in warn[:6]:
        print("   ", w[:300])
