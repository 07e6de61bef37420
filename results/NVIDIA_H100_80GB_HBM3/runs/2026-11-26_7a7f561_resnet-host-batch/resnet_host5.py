"""Why the ResNet-18 step's host time grows with the batch: per-op CPU self time (torch.profiler, 20 steps) of the
triton and eager backends at batch 8 and 512, side by side; plus plain host time per step phase at both sizes."""
import collections, json, os, statistics, time
import torch
from bench import resnet as R

dev = torch.device("cuda")
OUT = os.environ.get("OUT", "/tmp")
res = {}


def trainer_for(backend, batch):
    args = R.parse_args(["--synthetic", "--amp", "bf16", "--batch-size", str(batch), "--backend", backend])
    torch.manual_seed(0)
    model, fwd = R.build_model(args, backend, dev)
    return R.Trainer(args, model, fwd, dev, 10000)


def phases(tr, x, y):
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = tr.forward(x)
        loss = tr.criterion(out, y)
    t1 = time.perf_counter()
    tr.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    t2 = time.perf_counter()
    tr.optimizer.step()
    tr.scheduler.step()
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2


for backend in ("triton", "eager"):
    for batch in (8, 512):
        x = torch.randn(batch, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (batch,), device=dev)
        tr = trainer_for(backend, batch)
        for _ in range(30):
            tr.step(x, y)
        torch.cuda.synchronize()
        # phases, with a sync after each phase so that each phase's host time is its own (GPU drained first)
        ph = []
        for _ in range(40):
            torch.cuda.synchronize()
            ph.append(phases(tr, x, y))
        med = [1e3 * statistics.median(c) for c in zip(*ph)]
        print(f"{backend} batch {batch}: host fwd+loss / backward / optim (GPU idle at each start) "
              f"{med[0]:.2f} / {med[1]:.2f} / {med[2]:.2f} ms", flush=True)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            for _ in range(20):
                tr.step(x, y)
            torch.cuda.synchronize()
        self_us = collections.defaultdict(float)
        calls = collections.Counter()
        for e in p.key_averages():
            self_us[e.key] += e.self_cpu_time_total / 20
            calls[e.key] += e.count / 20
        res[f"{backend}@{batch}"] = {"phases_ms": med, "self_us": dict(self_us), "calls": dict(calls)}
        del tr
for backend in ("triton", "eager"):
    a, b = res[f"{backend}@8"]["self_us"], res[f"{backend}@512"]["self_us"]
    keys = sorted(set(a) | set(b), key=lambda k: -(b.get(k, 0) - a.get(k, 0)))
    print(f"== {backend}: CPU self time per step, batch 8 -> 512 (total {sum(a.values()) / 1e3:.2f} -> {sum(b.values()) / 1e3:.2f} ms)")
    for k in keys[:18]:
        print(f"   {a.get(k, 0):9.1f} -> {b.get(k, 0):9.1f} us  (x{res[f'{backend}@512']['calls'].get(k, 0):.0f})  {k[:70]}")
json.dump(res, open(f"{OUT}/resnet_host5.json", "w"))
