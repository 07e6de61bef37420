"""Where the studies' Linears lose under a CUDA graph: the kernels of one replay, in order, with their
durations and the gaps between them, for eager (cuBLAS) and ours; L2 flushed before each replay."""
import json, os, statistics, sys
import torch
from torch.profiler import profile, ProfilerActivity
from bench.cases import gemm as gemm_cases
from triton_kernels.runtime import capture_graph

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
FLUSH = torch.empty(256 * 2**20, dtype=torch.int8, device=dev)
res = {}
SHAPES = {"fc1": (512, 8704, 1024), "fc2": (512, 1024, 1024), "big": (4096, 8704, 1024)}


def replay_times(g, rep=300):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for i in range(rep):
        FLUSH.zero_()
        starts[i].record()
        g.replay()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))


def timeline(g, rep=30):
    """Kernels of each replay (between flushes): name, start offset from the first kernel, duration (us)."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(rep):
            FLUSH.zero_()
            g.replay()
        torch.cuda.synchronize()
    evs = sorted((e for e in prof.events() if e.device_type.name == "CUDA" and e.time_range.elapsed_us() > 0),
                 key=lambda e: e.time_range.start)
    runs, cur = [], None
    for e in evs:
        if "FillFunctor" in e.name and e.time_range.elapsed_us() > 20:  # the 256 MB flush
            cur = []
            runs.append(cur)
        elif cur is not None:
            cur.append((e.name[:90], e.time_range.start, e.time_range.end))
    runs = [r for r in runs if r]
    per = []
    for r in runs:
        t0 = r[0][1]
        per.append([(n, s - t0, e - s) for n, s, e in r])
    n = len(per[0])
    med = []
    for i in range(n):
        med.append((per[0][i][0], statistics.median(p[i][1] for p in per if len(p) == n),
                    statistics.median(p[i][2] for p in per if len(p) == n)))
    span = statistics.median(p[-1][1] + p[-1][2] for p in per if len(p) == n)
    return med, span


def part_a():
    out = {}
    for name, (M, K, N) in SHAPES.items():
        for backward in (False, True):
            case = gemm_cases.linear_case(M, K, N, torch.bfloat16, "relu", backward=backward)
            inputs = case.inputs(0, dev)
            for b in ("eager", "triton"):
                fn = case.fns[b]
                g, _ = capture_graph(lambda: fn(*inputs), warmup=3)
                t = replay_times(g)
                med, span = timeline(g)
                key = f"{name}{'_fwdbwd' if backward else ''}/{b}"
                out[key] = dict(replay_us=t, span_us=span, kernels=med)
                print(f"{key}: replay {t:.2f} us, kernels span {span:.2f} us", flush=True)
                for k, s, d in med:
                    print(f"    +{s:7.2f}  {d:7.2f}  {k}", flush=True)
    res["timelines"] = out


for part in sys.argv[1:] or ["a"]:
    {"a": part_a}[part]()
    with open(os.path.join(OUT, "probe1.json"), "w") as f:
        json.dump(res, f, indent=1)
