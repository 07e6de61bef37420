"""fc1 forward: what bounds it after the L2 flush; cuBLAS's kernels; and whether finer interleaving steadies the
host-bound fwd+bwd ratios."""
import json, os, statistics, sys, time
import torch
from triton_kernels import gemm
from bench import harness
from bench.cases import gemm as gemm_cases

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
res = {}
FLUSH = torch.empty(256 * 2**20, dtype=torch.int8, device=dev)
CLEAN = torch.empty(64 * 2**20, dtype=torch.float32, device=dev)  # 256 MB read to leave the L2 clean


def gpu_times(fn, flush, rep=200):
    """Kernel times alone: flush (dirty / clean / none), then a GPU spin so the host is ahead, then events."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for i in range(rep):
        if flush == "dirty":
            FLUSH.zero_()
        elif flush == "clean":
            FLUSH.zero_()
            CLEAN.sum()
        torch.cuda._sleep(400_000)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    return ts[len(ts) // 2]


def part_a():
    out = {}
    for name, (M, K, N) in {"fc1": (512, 8704, 1024), "fc2": (512, 1024, 1024),
                            "big": (4096, 8704, 1024)}.items():
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16, generator=g)
        w = torch.randn(N, K, device=dev, dtype=torch.bfloat16, generator=g) / K ** 0.5
        b = torch.randn(N, device=dev, dtype=torch.bfloat16, generator=g)
        y = gemm.linear(x, w, b, activation="relu")
        torch.testing.assert_close(y.float(), torch.relu(torch.addmm(b, x, w.t())).float(), atol=3e-2, rtol=3e-2)
        xs, ws = torch.empty_like(x), torch.empty_like(w)
        fns = {
            "mm": lambda: torch.mm(x, w.t()),
            "addmm": lambda: torch.addmm(b, x, w.t()),
            "addmm+relu": lambda: torch.relu(torch.addmm(b, x, w.t())),
            "ours": lambda: gemm.linear(x, w, b, activation="relu"),
            "read x,w (sum)": lambda: (x.sum(), w.sum()),
            "copy x,w": lambda: (xs.copy_(x), ws.copy_(w)),
        }
        row = {}
        for flush in ("dirty", "clean", "none"):
            for fname, fn in fns.items():
                row[f"{fname} | {flush}"] = gpu_times(fn, flush)
                print(name, fname, flush, f"{row[f'{fname} | {flush}']:.2f} us", flush=True)
        out[name] = row
    res["fc_forward_us"] = out


def part_b():
    from torch.profiler import profile, ProfilerActivity
    names = {}
    for name, (M, K, N) in {"fc1": (512, 8704, 1024), "fc2": (512, 1024, 1024)}.items():
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
        b = torch.randn(N, device=dev, dtype=torch.bfloat16)
        torch.addmm(b, x, w.t()); torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                torch.addmm(b, x, w.t())
            torch.cuda.synchronize()
        names[name] = sorted({e.key for e in prof.key_averages()})
        print(name, names[name], flush=True)
    res["cublas_kernels"] = names


def part_c():
    """fwd+bwd eager calls: the op suite's 5 x ~200 interleaved rounds against finer interleaving."""
    want = ["char_cnn_fc1_linear_relu_fwdbwd", "char_cnn_fc3_linear_fwdbwd", "sgemm_width64_linear_relu_fwdbwd"]
    cases = {c.name: c for c in gemm_cases.cases() if c.name in want}
    out = {}
    for name in want:
        case = cases[name]
        inputs = case.inputs(0, dev)
        calls = {b: (lambda fn=case.fns[b]: fn(*inputs)) for b in ("eager", "triton")}
        for call in calls.values():
            for _ in range(20):
                call()
        torch.cuda.synchronize()
        out[name] = {}
        for rounds, reps in ((5, 200), (25, 40), (100, 10), (500, 2)):
            trials = []
            for _ in range(3):
                rm = {b: [] for b in calls}
                samples = {b: [] for b in calls}
                for _ in range(rounds):
                    for b, call in calls.items():
                        ts = harness.time_call(call, reps, device=dev)
                        samples[b] += ts
                        rm[b].append(statistics.median(ts))
                est, lo, hi = harness.bootstrap_ratio_ci(rm["eager"], rm["triton"])
                trials.append(dict(est=est, lo=lo, hi=hi, ratio_of_medians=statistics.median(samples["eager"]) /
                                   statistics.median(samples["triton"]),
                                   eager_ms=statistics.median(samples["eager"]),
                                   triton_ms=statistics.median(samples["triton"])))
                print(name, rounds, reps, {k: round(v, 4) for k, v in trials[-1].items()}, flush=True)
            out[name][f"{rounds}x{reps}"] = trials
        # host time per call with the GPU busy ahead (no flush)
        host = {}
        for b, call in calls.items():
            torch.cuda._sleep(int(2e9 * 0.2))
            ts = []
            for _ in range(100):
                t0 = time.perf_counter(); call(); ts.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
            host[b] = statistics.median(ts)
        out[name]["host_us_gpu_busy"] = host
        print(name, "host us", host, flush=True)
    res["interleave"] = out


for part in sys.argv[1:] or ["a", "b", "c"]:
    {"a": part_a, "b": part_b, "c": part_c}[part]()
    with open(os.path.join(OUT, "probe1.json"), "w") as f:
        json.dump(res, f, indent=1)
