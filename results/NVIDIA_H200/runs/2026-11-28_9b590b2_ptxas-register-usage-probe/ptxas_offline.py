"""Offline (CPU) sm_90 compiles of the fp32 ieee GEMM kernel at the tuned and other configs, with ptxas options
varied: registers, spills, instruction histogram of the SASS."""
import collections, copy, json, os, re, subprocess, sys, tempfile
os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, "/work/main")
import triton
from triton.backends.compiler import GPUTarget
from tests.offline_compile import SPECS_FILE, source_of
NVDISASM = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/nvdisasm")
base = [s for s in json.load(open(SPECS_FILE)) if s["name"] == "_gemm_kernel"
        and s["args"]["PRECISION"].get("v") == "tf32"][0]
for n, a in base["args"].items():
    if a["t"] == "int":
        a["v"] = 4096
configs = [(128, 64, 32, 4, 4), (128, 128, 16, 8, 3), (128, 128, 32, 8, 3), (64, 128, 32, 4, 4)]
opts_list = sys.argv[1:] or ["", "--register-usage-level=0", "--register-usage-level=10"]
for bm, bn, bk, w, st in configs:
    for ptx in opts_list:
        spec = copy.deepcopy(base)
        for k, v in dict(PRECISION="ieee", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8).items():
            spec["args"][k]["v"] = v
        opts = {"num_warps": w, "num_stages": st}
        if ptx.startswith("maxnreg="):
            opts["maxnreg"] = int(ptx.split("=")[1])
        elif ptx:
            opts["ptx_options"] = ptx
        k = triton.compile(source_of(spec), target=GPUTarget("cuda", 90, 32), options=opts)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(k.asm["cubin"]); f.flush()
            sass = subprocess.run([NVDISASM, "-c", f.name], capture_output=True, text=True).stdout
        ops = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(
            r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass, re.M))
        md = k.metadata
        print(f"{bm}x{bn}x{bk} w{w} s{st} [{ptx or 'default'}] regs {getattr(md, 'num_regs', '?')} "
              f"spills {getattr(md, 'n_spills', '?')} total {sum(ops.values())} "
              + " ".join(f"{o}={ops[o]}" for o in ("FFMA", "LDS", "LDSM", "LDGSTS", "BAR", "BRA", "IMAD", "MOV")),
              flush=True)
