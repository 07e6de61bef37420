"""Host time per eager call of the Linear+ReLU 4096 x 8704 -> 1024 fwd + bwd, bf16 and under bf16 autocast (fp32
master weights), eager against ours, with the GPU kept busy ahead (torch.cuda._sleep) so only host work is timed;
five repetitions, backends alternating; then a cProfile of 200 calls of each under autocast with the backward on
the calling thread (what autocast adds to ours)."""
import cProfile, io, pstats, statistics, time
import torch
from bench import harness
from bench.cases.gemm import linear_case

dev = torch.device("cuda")
cases = {"bf16": linear_case(4096, 8704, 1024, torch.bfloat16, "relu", True),
         "autocast": linear_case(4096, 8704, 1024, torch.bfloat16, "relu", True, autocast=True)}
calls = {}
for label, case in cases.items():
    inputs = case.inputs(0, dev)
    for b in ("eager", "triton"):
        fn = harness.build_backend(b, case)
        calls[label, b] = (lambda fn=fn, inputs=inputs: fn(*inputs))
        for _ in range(20):
            calls[label, b]()
torch.cuda.synchronize()
medians = {k: [] for k in calls}
for rep in range(5):
    for k, call in calls.items():
        ts = []
        for _ in range(4):
            torch.cuda._sleep(int(2e9 * 0.05))
            for _ in range(20):
                t0 = time.perf_counter()
                call()
                ts.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
        medians[k].append(statistics.median(ts))
for k, m in medians.items():
    print(f"{k[0]} {k[1]} host us per fwd+bwd call, median of each of 5 reps: {' '.join(f'{x:.0f}' for x in m)}"
          f" -> {statistics.median(m):.0f}", flush=True)
torch.autograd.set_multithreading_enabled(False)
for k in (("autocast", "eager"), ("bf16", "triton"), ("autocast", "triton")):
    torch.cuda._sleep(int(2e9 * 0.8))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        calls[k]()
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    st.sort_stats("tottime").print_stats(22)
    print(f"=== {k}, backward on the calling thread, 200 calls\n", out.getvalue(), flush=True)
torch.autograd.set_multithreading_enabled(True)
