"""Experiment (issue 22): where the forward + backward of the studies' Linear shapes spends its host time.
Per shape, eager (torch) vs ours: back-to-back calls (wall per call, one sync at the end: the host path when
it exceeds the GPU time), the same calls replayed from a CUDA graph (GPU time), and a cProfile of ours."""
import cProfile, io, pstats, statistics, sys, time
import torch
sys.path.insert(0, ".")
from bench.cases import gemm as gemm_cases
from triton_kernels.runtime import capture_graph, cuda_time_ms

dev = torch.device("cuda")
names = ["mnist_softmax_regression_linear_fwdbwd", "sgemm_width16_linear_relu_fwdbwd", "sgemm_width64_linear_relu_fwdbwd",
         "char_cnn_fc1_linear_relu_fwdbwd", "char_cnn_fc2_linear_relu_fwdbwd", "char_cnn_fc3_linear_fwdbwd",
         "linear_relu_fwdbwd"]
cases = {c.name: c for c in gemm_cases.cases() if c.name in names}

def wall_per_call(fn, args, n=300, rounds=5):
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(n):
            fn(*args)
        torch.cuda.synchronize(); out.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(out)

for name in names:
    case = cases[name]
    args = case.inputs(0, dev)
    line = [f"{name:42s}"]
    res = {}
    for backend in ("eager", "triton"):
        fn = case.fns[backend]
        for _ in range(5):
            fn(*args)
        res[backend] = wall_per_call(fn, args)
        try:
            graph, _ = capture_graph(lambda: fn(*args))
            res[backend + "+graph"] = statistics.median(cuda_time_ms(graph.replay, warmup=5, rep=100)) * 1e3
        except Exception as e:
            res[backend + "+graph"] = float("nan"); print(name, backend, "capture failed:", type(e).__name__, str(e)[:300])
    print(name, " ".join(f"{k} {v:7.1f}us" for k, v in res.items()),
          f"| call {res['eager'] / res['triton']:.3f}x  graph {res['eager+graph'] / res['triton+graph']:.3f}x", flush=True)

torch.autograd.set_multithreading_enabled(False)
for name in ("char_cnn_fc2_linear_relu_fwdbwd", "mnist_softmax_regression_linear_fwdbwd"):
    case = cases[name]; args = case.inputs(0, dev)
    for backend in ("triton", "eager"):
        fn = case.fns[backend]
        for _ in range(5):
            fn(*args)
        torch.cuda.synchronize()
        prof = cProfile.Profile(); prof.enable()
        for _ in range(300):
            fn(*args)
        prof.disable(); torch.cuda.synchronize()
        s = io.StringIO(); st = pstats.Stats(prof, stream=s)
        print(f"=== {name} {backend}: 300 calls, by own time"); st.sort_stats("tottime").print_stats(22)
        print(s.getvalue()[:6000])
