"""Host time per eager call of the Linear fwd + bwd cases (GPU busy ahead), eager against ours, and a cProfile of
ours with the backward on the calling thread."""
import cProfile, io, pstats, statistics, time
import torch
from bench import harness
from bench.cases.gemm import linear_case

dev = torch.device("cuda")
cases = {"4096": linear_case(4096, 8704, 1024, torch.bfloat16, "relu", True),
         "fc1": linear_case(512, 8704, 1024, torch.bfloat16, "relu", True),
         "fc3": linear_case(512, 1024, 4, torch.bfloat16, "none", True)}
for label, case in cases.items():
    inputs = case.inputs(0, dev)
    calls = {}
    for b in ("eager", "triton"):
        fn = harness.build_backend(b, case)
        calls[b] = (lambda fn=fn: fn(*inputs))
        for _ in range(20):
            calls[b]()
    torch.cuda.synchronize()
    for rep in range(2):
        for b, call in calls.items():
            ts = []
            for _ in range(5):
                torch.cuda._sleep(int(2e9 * 0.05))
                for _ in range(20):
                    t0 = time.perf_counter()
                    call()
                    ts.append((time.perf_counter() - t0) * 1e6)
                torch.cuda.synchronize()
            print(f"{label} {b} host us per fwd+bwd call: median {statistics.median(ts):.1f} "
                  f"p20 {harness.quantile(ts, 0.2):.1f} p80 {harness.quantile(ts, 0.8):.1f}", flush=True)
    if label != "4096":
        continue
    torch.autograd.set_multithreading_enabled(False)
    for b in ("eager", "triton"):
        torch.cuda._sleep(int(2e9 * 0.5))
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(100):
            calls[b]()
        prof.disable()
        torch.cuda.synchronize()
        out = io.StringIO()
        st = pstats.Stats(prof, stream=out)
        st.sort_stats("tottime").print_stats(30)
        st.sort_stats("cumulative").print_stats(40)
        print(f"=== {b}, backward on the calling thread, 100 calls\n", out.getvalue())
    torch.autograd.set_multithreading_enabled(True)
