"""Where the triton backend's extra host time goes (batch 8: host only): phase splits (forward+loss / backward /
optimizer) per backend, interleaved; one BN layer's forward and backward host cost, ours vs torch's; syncs."""
import json, os, statistics, time, warnings
import torch
from bench import resnet as R
from models.resnet import BatchNormAct2d

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
OUT = os.environ.get("OUT", "/tmp")
AMP = os.environ.get("AMP", "bf16")
WIDTHS = os.environ.get("WIDTHS", "64,128,256,512")
ROUNDS = int(os.environ.get("ROUNDS", "9"))
STEPS = int(os.environ.get("STEPS", "30"))
res = {}


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


def trainer_for(backend, batch):
    args = R.parse_args(["--synthetic", "--amp", AMP, "--batch-size", str(batch), "--backend", backend, "--widths", WIDTHS])
    torch.manual_seed(0)
    model, fwd = R.build_model(args, backend, dev)
    return R.Trainer(args, model, fwd, dev, 10000)


def phases(tr, x, y):
    """host seconds of forward+loss, backward, optimizer (+scheduler) of one step."""
    t0 = time.perf_counter()
    with torch.autocast(dev.type, dtype=tr.amp or torch.float32, enabled=tr.amp is not None):
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


# 1. phase splits at batch 8
batch = 8
x = torch.randn(batch, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 10, (batch,), device=dev)
variants = {"eager": trainer_for("eager", batch), "triton": trainer_for("triton", batch)}
tr = trainer_for("triton", batch)
for m in tr.model.modules():
    if isinstance(m, BatchNormAct2d):
        m.fused = False
variants["triton-torchbn"] = tr
for k, tr in variants.items():
    for _ in range(15):
        phases(tr, x, y)
sync()
split = {k: [] for k in variants}
for r in range(ROUNDS):
    for k, tr in variants.items():
        sync()
        acc = [0.0, 0.0, 0.0]
        for _ in range(STEPS):
            p = phases(tr, x, y)
            acc = [a + b for a, b in zip(acc, p)]
        split[k].append([1e3 * a / STEPS for a in acc])
for k in variants:
    cols = list(zip(*split[k]))
    med = [statistics.median(c) for c in cols]
    mins = [min(c) for c in cols]
    res[f"phases@{batch}/{k}"] = {"median_ms": med, "min_ms": mins}
    print(f"{k:15s} fwd+loss / backward / optim: median {med[0]:.2f} / {med[1]:.2f} / {med[2]:.2f} ms "
          f"(sum {sum(med):.2f}); min {mins[0]:.2f} / {mins[1]:.2f} / {mins[2]:.2f}", flush=True)
del variants, tr

# 2. one BN layer, host cost of forward and backward: ours (fused fast path) vs torch's BN + ReLU (+ add)
def layer(fused, res_, shape):
    m = BatchNormAct2d(shape[1], relu=True).to(dev)
    m.fused = fused
    xx = torch.randn(shape, device=dev).contiguous(memory_format=torch.channels_last)
    if AMP == "bf16":
        xx = xx.bfloat16()
    xx.requires_grad_()
    rr = torch.randn_like(xx).requires_grad_() if res_ else None
    return m, xx, rr

for res_ in (False, True):
    shape = tuple(int(v) for v in os.environ.get("SHAPE", "8,64,32,32").split(","))
    out = {}
    for name, fused in (("ours", True), ("torch", False)):
        m, xx, rr = layer(fused, res_, shape)
        for _ in range(10):
            yy = m(xx, rr)
            yy.backward(torch.ones_like(yy))
        g = torch.ones_like(yy)
        fw, bw = [], []
        for r in range(ROUNDS):
            sync()
            tf = tb = 0.0
            for _ in range(int(os.environ.get("LAYER_CALLS", "200"))):
                t0 = time.perf_counter()
                yy = m(xx, rr)
                t1 = time.perf_counter()
                yy.backward(g)
                t2 = time.perf_counter()
                tf += t1 - t0
                tb += t2 - t1
            fw.append(1e6 * tf / int(os.environ.get("LAYER_CALLS", "200")))
            bw.append(1e6 * tb / int(os.environ.get("LAYER_CALLS", "200")))
        out[name] = (statistics.median(fw), statistics.median(bw))
    res[f"layer/res={res_}"] = out
    print(f"BN layer residual={res_}: ours fwd {out['ours'][0]:.1f} us bwd {out['ours'][1]:.1f} us; "
          f"torch fwd {out['torch'][0]:.1f} us bwd {out['torch'][1]:.1f} us", flush=True)

# 3. synchronising calls in a step at batch 512 (sync debug mode warns on each)
if dev.type == "cuda":
    batch = 512
    x = torch.randn(batch, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,), device=dev)
    for b in ("eager", "triton"):
        tr = trainer_for(b, batch)
        for _ in range(5):
            tr.step(x, y)
        sync()
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            tr.step(x, y)
        torch.cuda.set_sync_debug_mode(0)
        msgs = sorted({str(m.message)[:160] for m in w})
        res[f"syncs/{b}"] = msgs
        print(f"{b}: {len(w)} sync warnings: {msgs[:5]}", flush=True)
        # per-step host intervals, back to back
        sync()
        ts = [time.perf_counter()]
        for _ in range(30):
            tr.step(x, y)
            ts.append(time.perf_counter())
        sync()
        te = time.perf_counter()
        iv = [1e3 * (b_ - a) for a, b_ in zip(ts, ts[1:])]
        res[f"intervals@512/{b}"] = {"host_intervals_ms": iv, "drain_ms": 1e3 * (te - ts[-1])}
        print(f"{b}@512 host step intervals median {statistics.median(iv):.2f} ms, drain after last {1e3 * (te - ts[-1]):.2f} ms",
              flush=True)
        del tr
json.dump(res, open(f"{OUT}/resnet_host2.json", "w"), indent=1)
