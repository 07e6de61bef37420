"""A/B of the BN fast path (old = HEAD~ copy in triton_kernels/batchnorm_eager_old.py, new = tree): ResNet-18 step host
time at batch 8 (phases), one layer's host cost, and the batch-512 step as eager calls beside eager / compile."""
import json, os, statistics, time
import torch
from bench import resnet as R
from models.resnet import BatchNormAct2d
from triton_kernels import batchnorm_eager
from triton_kernels import batchnorm_eager_old

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
OUT = os.environ.get("OUT", "/tmp")
AMP = os.environ.get("AMP", "bf16")
WIDTHS = os.environ.get("WIDTHS", "64,128,256,512")
ROUNDS = int(os.environ.get("ROUNDS", "9"))
STEPS = int(os.environ.get("STEPS", "30"))
BIG = int(os.environ.get("BIG", "512"))
CLASSES = {"old": batchnorm_eager_old._FastTrain, "new": batchnorm_eager._FastTrain}
res = {}


def use(name):
    batchnorm_eager._FastTrain = CLASSES[name]
    batchnorm_eager._FAST.clear()


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


def trainer_for(backend, batch):
    args = R.parse_args(["--synthetic", "--amp", AMP, "--batch-size", str(batch), "--backend", backend, "--widths", WIDTHS])
    torch.manual_seed(0)
    model, fwd = R.build_model(args, backend, dev)
    return R.Trainer(args, model, fwd, dev, 10000)


def phases(tr, x, y):
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


def data(batch):
    return (torch.randn(batch, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last),
            torch.randint(0, 10, (batch,), device=dev))


# 1. batch 8 phases: eager, triton old, triton new (interleaved)
x, y = data(8)
tr_e, tr_t = trainer_for("eager", 8), trainer_for("triton", 8)
for name in ("old", "new"):
    use(name)
    for _ in range(5):
        phases(tr_t, x, y)
for _ in range(5):
    phases(tr_e, x, y)
split = {"eager": [], "old": [], "new": []}
for r in range(ROUNDS):
    for k in ("eager", "old", "new"):
        tr = tr_e if k == "eager" else tr_t
        if k != "eager":
            use(k)
            for _ in range(3):
                phases(tr, x, y)
        sync()
        acc = [0.0, 0.0, 0.0]
        for _ in range(STEPS):
            acc = [a + b for a, b in zip(acc, phases(tr, x, y))]
        split[k].append([1e3 * a / STEPS for a in acc])
for k, v in split.items():
    cols = list(zip(*v))
    med = [statistics.median(c) for c in cols]
    sums = sorted(sum(row) for row in v)
    res[f"phases@8/{k}"] = {"median_ms": med, "step_sums": sums}
    print(f"batch 8 {k:6s} fwd+loss / backward / optim median {med[0]:.2f} / {med[1]:.2f} / {med[2]:.2f} ms; "
          f"step median {statistics.median(sums):.2f} (min {sums[0]:.2f})", flush=True)
del tr_e, tr_t

# 2. one layer, small shape: ours old / new vs torch
for res_ in (False, True):
    out = {}
    for k in ("torch", "old", "new"):
        if k != "torch":
            use(k)
        m = BatchNormAct2d(64, relu=True).to(dev)
        m.fused = k != "torch"
        xx = torch.randn(2, 64, 4, 4, device=dev).contiguous(memory_format=torch.channels_last)
        xx = (xx.bfloat16() if AMP == "bf16" else xx).requires_grad_()
        rr = torch.randn_like(xx).requires_grad_() if res_ else None
        yy = m(xx, rr)
        g = torch.ones_like(yy)
        for _ in range(30):
            m(xx, rr).backward(g)
        fw, both = [], []
        for r in range(ROUNDS):
            sync()
            t0 = time.perf_counter()
            for _ in range(500):
                m(xx, rr)
            t1 = time.perf_counter()
            for _ in range(500):
                m(xx, rr).backward(g)
            t2 = time.perf_counter()
            fw.append(1e6 * (t1 - t0) / 500)
            both.append(1e6 * (t2 - t1) / 500)
        out[k] = (statistics.median(fw), statistics.median(both))
    res[f"layer/res={res_}"] = out
    print(f"layer (2,64,4,4) residual={res_}: " + "; ".join(f"{k} fwd {a:.1f} fwd+bwd {b:.1f} us" for k, (a, b) in out.items()),
          flush=True)

# 3. batch BIG as eager calls: eager, compile, triton old, triton new
x, y = data(BIG)
trs = {"eager": trainer_for("eager", BIG), "compile": trainer_for("compile", BIG), "triton": trainer_for("triton", BIG)}
for name in ("old", "new"):
    use(name)
    for _ in range(5):
        trs["triton"].step(x, y)
for k in ("eager", "compile"):
    for _ in range(15):
        trs[k].step(x, y)
sync()
walls = {"eager": [], "compile": [], "old": [], "new": []}
for r in range(ROUNDS):
    for k in walls:
        tr = trs[k] if k in trs else trs["triton"]
        if k in ("old", "new"):
            use(k)
            for _ in range(3):
                tr.step(x, y)
        sync()
        t0 = time.perf_counter()
        for _ in range(STEPS):
            tr.step(x, y)
        sync()
        walls[k].append(1e3 * (time.perf_counter() - t0) / STEPS)
for k, v in walls.items():
    v = sorted(v)
    res[f"step@{BIG}/{k}"] = v
    print(f"batch {BIG} {k:8s} step median {statistics.median(v):.3f} ms (min {v[0]:.3f}, max {v[-1]:.3f})", flush=True)
json.dump(res, open(f"{OUT}/resnet_host4.json", "w"), indent=1)
