"""Host path of the ResNet-18 training step per backend: batch 8 (host only) and 512, interleaved; cProfile and
torch.profiler of the triton step at batch 8."""
import cProfile, io, json, os, pstats, sys, time
import torch
from bench import resnet as R

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
OUT = os.environ.get("OUT", "/tmp")
BACKENDS = os.environ.get("BACKENDS", "eager,compile,triton").split(",")
BATCHES = [int(b) for b in os.environ.get("BATCHES", "8,512").split(",")]
STEPS = int(os.environ.get("STEPS", "30"))
WIDTHS = os.environ.get("WIDTHS", "64,128,256,512")
res = {}


def trainer_for(backend, batch):
    args = R.parse_args(["--synthetic", "--amp", os.environ.get("AMP", "bf16"), "--batch-size", str(batch), "--backend", backend,
                         "--widths", WIDTHS])
    torch.manual_seed(0)
    model, fwd = R.build_model(args, backend, dev)
    return R.Trainer(args, model, fwd, dev, 10000)


def data(batch):
    x = torch.randn(batch, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
    return x, torch.randint(0, 10, (batch,), device=dev)


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


for batch in BATCHES:
    x, y = data(batch)
    trainers = {}
    for b in BACKENDS:
        t0 = time.perf_counter()
        trainers[b] = trainer_for(b, batch)
        for _ in range(15):
            trainers[b].step(x, y)
        sync()
        print(f"batch {batch} {b}: warm {time.perf_counter() - t0:.1f} s", flush=True)
    wall = {b: [] for b in BACKENDS}
    host = {b: [] for b in BACKENDS}
    for r in range(5):
        for b in BACKENDS:
            sync()
            t0 = time.perf_counter()
            for _ in range(STEPS):
                trainers[b].step(x, y)
            t1 = time.perf_counter()
            sync()
            t2 = time.perf_counter()
            wall[b].append(1e3 * (t2 - t0) / STEPS)
            host[b].append(1e3 * (t1 - t0) / STEPS)
    for b in BACKENDS:
        w, h = sorted(wall[b]), sorted(host[b])
        res[f"{b}@{batch}"] = {"wall_ms": w, "host_ms": h}
        print(f"batch {batch} {b:8s} wall/step median {w[2]:.3f} ms  host-return/step {h[2]:.3f} ms  "
              f"rounds {[round(v, 2) for v in wall[b]]}", flush=True)
    if batch == BATCHES[0]:
        for b in ("triton", "eager"):
            if b not in trainers:
                continue
            torch.autograd.set_multithreading_enabled(False)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(20):
                trainers[b].step(x, y)
            prof.disable()
            sync()
            torch.autograd.set_multithreading_enabled(True)
            s = io.StringIO()
            st = pstats.Stats(prof, stream=s)
            s.write(f"=== cProfile {b} batch {batch}, 20 steps, own time\n")
            st.sort_stats("tottime").print_stats(45)
            s.write(f"=== cProfile {b}, cumulative\n")
            st.sort_stats("cumulative").print_stats(60)
            open(f"{OUT}/cprofile_{b}.txt", "w").write(s.getvalue())
        for b in BACKENDS:
            acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if dev.type == "cuda" else [])
            with torch.profiler.profile(activities=acts) as p:
                for _ in range(10):
                    trainers[b].step(x, y)
                sync()
            ka = p.key_averages()
            tab = ka.table(sort_by="self_cpu_time_total", row_limit=45)
            open(f"{OUT}/torchprof_{b}.txt", "w").write(tab)
            launches = sum(e.count for e in ka if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx",
                                                            "cudaLaunchKernelExC"))
            res[f"{b}@{batch}"]["launch_calls_per_step"] = launches / 10
            print(f"{b}: launch calls per step {launches / 10}", flush=True)
    del trainers
json.dump(res, open(f"{OUT}/resnet_host.json", "w"), indent=1)
