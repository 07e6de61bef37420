"""Experiment (issue 22): the one-launch backward (gemm_backward.py) against gemm.py's three launches and
eager PyTorch, forward + backward of the studies' Linear shapes: back-to-back eager calls (wall per call,
host included) and CUDA-graph replays (GPU time), interleaved rounds in one process."""
import statistics, sys, time
import torch
sys.path.insert(0, ".")
from bench.cases import gemm as gemm_cases
from triton_kernels import gemm_backward, gemm_eager
from triton_kernels.runtime import capture_graph, cuda_time_ms

dev = torch.device("cuda")
names = ["mnist_softmax_regression_linear_fwdbwd", "sgemm_width16_linear_relu_fwdbwd", "sgemm_width64_linear_relu_fwdbwd",
         "char_cnn_fc1_linear_relu_fwdbwd", "char_cnn_fc2_linear_relu_fwdbwd", "char_cnn_fc3_linear_fwdbwd",
         "linear_relu_fwdbwd"]
cases = {c.name: c for c in gemm_cases.cases() if c.name in names}
RULE = gemm_backward.FUSED_MAX_FLOPS
VARIANTS = {"eager": ("eager", None), "fused": ("triton", 2**62), "three": ("triton", -1)}

def use(limit):
    if limit is not None:
        gemm_backward.FUSED_MAX_FLOPS = limit
        gemm_eager._CALLS.clear()

def wall_per_call(fn, args, n=200):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6

for name in names:
    case = cases[name]
    args = case.inputs(0, dev)
    outs, graphs, walls = {}, {}, {v: [] for v in VARIANTS}
    for v, (backend, limit) in VARIANTS.items():
        use(limit)
        fn = case.fns[backend]
        for _ in range(5):
            out = fn(*args)
        # no graph may keep the leaves' gradient accumulators alive: made on this stream, a capture's backward
        # would wait on it (legacy stream during capture)
        outs[v] = [t.detach().float().clone() for t in out]
        del out
        graphs[v] = capture_graph(lambda fn=fn: fn(*args))[0]
    for r in range(5):
        for v, (backend, limit) in VARIANTS.items():
            use(limit)
            fn = case.fns[backend]
            for _ in range(3):
                fn(*args)
            walls[v].append(wall_per_call(fn, args))
    replay = {v: statistics.median(cuda_time_ms(g.replay, warmup=5, rep=100)) * 1e3 for v, g in graphs.items()}
    wall = {v: statistics.median(w) for v, w in walls.items()}
    diff = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for a, b in zip(outs["fused"], outs["three"]))
    print(f"{name:40s} call us: " + " ".join(f"{v} {wall[v]:6.1f}" for v in VARIANTS)
          + f" | graph us: " + " ".join(f"{v} {replay[v]:6.1f}" for v in VARIANTS)
          + f" | eager/fused call {wall['eager'] / wall['fused']:.3f}x graph {replay['eager'] / replay['fused']:.3f}x"
          + f" | eager/three call {wall['eager'] / wall['three']:.3f}x graph {replay['eager'] / replay['three']:.3f}x"
          + f" | fused vs three max rel diff {diff:.1e}", flush=True)
    use(RULE)

# per-kernel GPU time of one forward + backward (torch.profiler, 20 calls after warm-up)
from torch.profiler import ProfilerActivity, profile
for name in ("char_cnn_fc1_linear_relu_fwdbwd", "sgemm_width64_linear_relu_fwdbwd", "sgemm_width16_linear_relu_fwdbwd"):
    case = cases[name]; args = case.inputs(0, dev)
    for backend in ("eager", "triton"):
        fn = case.fns[backend]
        for _ in range(10):
            fn(*args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                fn(*args)
            torch.cuda.synchronize()
        print(f"--- {name} {backend}: kernels, us per call")
        for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
            if e.device_time_total > 0:
                print(f"  {e.device_time_total / 20:8.2f}  x{e.count // 20}  {e.key[:110]}")
