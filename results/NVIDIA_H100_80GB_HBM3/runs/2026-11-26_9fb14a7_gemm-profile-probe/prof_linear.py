"""Experiment (issue 22): per-kernel GPU time of Linear+act forward+backward, ours vs eager (torch.profiler)."""
import sys, collections, torch
sys.path.insert(0, ".")
from bench.cases.gemm import linear_case

def profile(fn, args, label, calls=5):
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    tot = collections.defaultdict(float); cnt = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            tot[e.name] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            cnt[e.name] += 1
    print(f"--- {label}: {sum(tot.values()) / calls:.1f} us of kernels per call")
    for name, us in sorted(tot.items(), key=lambda kv: -kv[1]):
        print(f"   {us / calls:8.1f} us  x{cnt[name] // calls}  {name[:150]}")

for act in ("relu", "gelu"):
    for M, K, N in ((4096, 8704, 1024), (512, 8704, 1024)):
        case = linear_case(M, K, N, torch.bfloat16, act, backward=True)
        args = case.inputs(0, torch.device("cuda"))
        for backend in ("eager", "triton"):
            profile(case.fns[backend], args, f"{act} {M}x{K}x{N} fwd+bwd {backend}")
for M, K, N, act in ((512, 8704, 1024, "relu"), (512, 1024, 4, "none")):
    case = linear_case(M, K, N, torch.bfloat16, act)
    args = case.inputs(0, torch.device("cuda"))
    for backend in ("eager", "triton"):
        profile(case.fns[backend], args, f"{act} {M}x{K}x{N} fwd {backend}")
