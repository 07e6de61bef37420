"""Compile the fused MLP / ResNet-MLP and cross-entropy kernels' recorded sm_90 specs with the tree on sys.path
(argv[1]) and print each compiled kernel's SASS instruction counts (opcode histogram) and registers."""
import collections, json, os, re, subprocess, sys, tempfile
sys.path.insert(0, sys.argv[1])
os.environ["TRITON_INTERPRET"] = "0"
import triton
from triton.backends.compiler import GPUTarget
sys.path.append("/work/main")
from tests.offline_compile import OPTIONS, SPECS_FILE, source_of
NVDISASM = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/nvdisasm")
specs = [s for s in json.load(open(SPECS_FILE)) if s["name"] in ("_mlp_fwd_kernel", "_mlp_bwd_kernel",
         "_resnet_fwd_kernel", "_resnet_bwd_kernel", "_ce_fwd_chunked_kernel")]
for i, spec in enumerate(specs):
    opts = {k: v for k, v in spec["options"].items() if k in OPTIONS}
    k = triton.compile(source_of(spec), target=GPUTarget("cuda", 90, 32), options=opts)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"]); f.flush()
        sass = subprocess.run([NVDISASM, "-c", f.name], capture_output=True, text=True).stdout
    ops = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass, re.M))
    print("   from", sys.modules[spec["module"]].__file__, "FMNMX.NAN", sass.count("FMNMX.NAN"), "FSETP.NE", sass.count("FSETP.NE"))
    mode = {n: a.get("v") for n, a in spec["args"].items() if a["t"] == "constexpr"}
    regs = re.findall(r"\.maxnreg\s+(\d+)|REG:(\d+)", sass)
    print(i, spec["name"], "regs", k.metadata.__dict__.get("num_regs", getattr(k, "n_regs", "?")) if hasattr(k.metadata, "__dict__") else "?", "total", sum(ops.values()), dict(sorted((o, c) for o, c in ops.items() if o in ("FMNMX", "FSETP", "FSEL", "HMMA", "FFMA", "FMUL", "FADD", "ISETP", "BRA", "LDG", "STG", "LDS", "STS", "SEL"))), json.dumps(mode)[:150])
