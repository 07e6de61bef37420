"""Where the ResNet-18 training step's time goes, per backend: wall per step (host-bound or not),
kernel time per step, and the host calls that might block (syncs, mallocs, memcpys)."""
import sys, time, statistics, cProfile, pstats, io
import torch
from torch.profiler import profile, ProfilerActivity
sys.path.insert(0, ".")
from bench import resnet as R
from bench import resnet_data

backends = sys.argv[1].split(",") if len(sys.argv) > 1 else ["eager", "triton"]
args = R.parse_args(["--synthetic", "--batch-size", "512", "--amp", "bf16", "--backend", "eager"])
dev = torch.device("cuda")
torch.backends.cudnn.benchmark = True
data = resnet_data.load(None, True, None, None)
loader = resnet_data.GpuLoader(data.train_images, data.train_labels, 512, 0, dev, channels_last=True)
batches = [loader.batch(0, i) for i in range(20)]
for b in backends:
    model, fwd = R.build_model(args, b, dev)
    tr = R.Trainer(args, model, fwd, dev, 10000)
    for i in range(40):
        tr.step(*batches[i % 20])
    torch.cuda.synchronize()
    # wall per step, back to back
    t0 = time.perf_counter()
    for i in range(30):
        tr.step(*batches[i % 20])
    t_enq = time.perf_counter() - t0
    torch.cuda.synchronize()
    t_all = time.perf_counter() - t0
    print(f"=== {b}: wall {t_all/30*1e3:.2f} ms/step, host enqueue {t_enq/30*1e3:.2f} ms/step", flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(5):
            tr.step(*batches[i % 20])
        torch.cuda.synchronize()
    ka = prof.key_averages()
    gpu = sum(e.self_device_time_total for e in ka if e.device_type.name == "CUDA") / 5 / 1e3
    print(f"    kernel time {gpu:.2f} ms/step", flush=True)
    rows = sorted(ka, key=lambda e: -e.self_device_time_total)[:25]
    print("    top device time (ms/step, calls/step):")
    for e in rows:
        if e.self_device_time_total > 0:
            print(f"      {e.self_device_time_total/5/1e3:7.3f} {e.count/5:6.1f}  {e.key[:100]}")
    print("    runtime calls (count/step, self cpu ms/step):")
    for e in sorted(ka, key=lambda e: -e.self_cpu_time_total):
        if e.key.startswith("cuda") or e.key.startswith("cu"):
            print(f"      {e.count/5:7.1f} {e.self_cpu_time_total/5/1e3:7.3f}  {e.key[:80]}")
    print("    top self cpu (ms/step, calls/step):")
    for e in sorted(ka, key=lambda e: -e.self_cpu_time_total)[:25]:
        print(f"      {e.self_cpu_time_total/5/1e3:7.3f} {e.count/5:6.1f}  {e.key[:100]}")
    if b.startswith("triton") and not b.endswith("graph"):
        torch.autograd.set_multithreading_enabled(False)
        pr = cProfile.Profile(); pr.enable()
        for i in range(10):
            tr.step(*batches[i % 20])
        pr.disable(); torch.cuda.synchronize()
        torch.autograd.set_multithreading_enabled(True)
        s = io.StringIO(); st = pstats.Stats(pr, stream=s)
        st.sort_stats("tottime").print_stats(30); st.sort_stats("cumulative").print_stats(40)
        print(s.getvalue())
    del tr, model, fwd
    torch.cuda.empty_cache()
