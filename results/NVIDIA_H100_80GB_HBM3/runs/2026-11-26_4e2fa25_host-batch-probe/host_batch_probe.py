"""Why an eager-call ResNet-18 step's host time grows with the batch: triton and eager trainers at batch 8 and 512
in one process, rounds interleaved; per step the GPU is drained first, then the host time of the step's three
phases (forward + loss, backward, optimizer) is taken without any sync. Then cProfile of 10 such steps per
trainer, and the functions whose own time grows most from batch 8 to 512."""
import cProfile, io, json, os, pstats, statistics, time
import torch
from bench import resnet as R

dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
cuda = dev.type == "cuda"
OUT = os.environ.get("OUT", "/tmp")
ROUNDS = int(os.environ.get("ROUNDS", "5"))
BATCHES = tuple(int(b) for b in os.environ.get("BATCHES", "8,512").split(","))
BACKENDS = os.environ.get("BACKENDS", "triton,eager").split(",")
WIDTHS = os.environ.get("WIDTHS")
torch.backends.cudnn.benchmark = True


def sync():
    if cuda:
        torch.cuda.synchronize()


def trainer_for(backend, batch):
    argv = ["--synthetic", "--amp", "bf16" if cuda else "none", "--batch-size", str(batch), "--backend", backend]
    if WIDTHS:
        argv += ["--widths", WIDTHS]
    args = R.parse_args(argv)
    torch.manual_seed(0)
    model, fwd = R.build_model(args, backend, dev)
    tr = R.Trainer(args, model, fwd, dev, 10000)
    x = torch.randn(batch, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,), device=dev)
    return tr, x, y


def phases(tr, x, y):
    t0 = time.perf_counter()
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
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


runs = {(b, n): trainer_for(b, n) for b in BACKENDS for n in BATCHES}
for tr, x, y in runs.values():
    for _ in range(20):
        tr.step(x, y)
sync()
ph = {k: [] for k in runs}
back_to_back = {k: [] for k in runs}
for r in range(ROUNDS):
    for k, (tr, x, y) in runs.items():
        for _ in range(10):
            sync()
            ph[k].append(phases(tr, x, y))
        sync()
        t0 = time.perf_counter()
        for _ in range(10):
            tr.step(x, y)
        sync()
        back_to_back[k].append((time.perf_counter() - t0) / 10)
res = {}
for k in runs:
    med = [1e3 * statistics.median(c) for c in zip(*ph[k])]
    b2b = 1e3 * statistics.median(back_to_back[k])
    res[f"{k[0]}@{k[1]}"] = {"phases_ms": med, "back_to_back_ms": b2b}
    print(f"{k[0]:7s} batch {k[1]:4d}: host fwd+loss / backward / optim (GPU drained) {med[0]:.2f} / {med[1]:.2f} / "
          f"{med[2]:.2f} ms = {sum(med):.2f}; back to back (synced every 10) {b2b:.2f} ms/step", flush=True)

prof = {}
for k, (tr, x, y) in runs.items():
    pr = cProfile.Profile()
    for _ in range(10):
        sync()
        pr.enable()
        phases(tr, x, y)
        pr.disable()
    st = pstats.Stats(pr)
    prof[k] = {f"{f[0].split('/')[-1]}:{f[1]}:{f[2]}": (v[2] / 10 * 1e6, v[3] / 10 * 1e6, v[1] / 10)
               for f, v in st.stats.items()}  # (tottime us, cumtime us, calls) per step
for b in BACKENDS:
    lo, hi = prof[(b, BATCHES[0])], prof[(b, BATCHES[-1])]
    keys = sorted(set(lo) | set(hi), key=lambda f: -(hi.get(f, (0,))[0] - lo.get(f, (0,))[0]))
    print(f"== {b}: own time per step, batch {BATCHES[0]} -> {BATCHES[-1]} (total {sum(v[0] for v in lo.values()) / 1e3:.2f}"
          f" -> {sum(v[0] for v in hi.values()) / 1e3:.2f} ms)", flush=True)
    for f in keys[:25]:
        a, c = lo.get(f, (0, 0, 0)), hi.get(f, (0, 0, 0))
        print(f"   {a[0]:8.1f} -> {c[0]:8.1f} us  calls {c[2]:6.1f}  {f[:100]}", flush=True)
    res[f"cprofile_{b}"] = {"lo": sorted(lo.items(), key=lambda kv: -kv[1][0])[:80],
                            "hi": sorted(hi.items(), key=lambda kv: -kv[1][0])[:80]}
json.dump(res, open(f"{OUT}/host_batch_probe.json", "w"), indent=1)
