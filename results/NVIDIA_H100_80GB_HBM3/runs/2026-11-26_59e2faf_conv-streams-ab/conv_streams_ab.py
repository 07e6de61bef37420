"""cuDNN convolution backward with the weight gradient on a second stream, ResNet-18 step replayed from CUDA graphs,
one process, one batch-norm tuning shared by every variant. Variants:
  base      the model as it is (torch's conv2d: dgrad then wgrad on one stream)
  join_now  dgrad on the current stream, wgrad on a side stream, the current stream waits for it at once
            (only the layer's own dgrad overlaps its wgrad)
  deferred  as join_now, but the current stream waits for every wgrad only in the prologue cast's backward
            (the end of the backward): each wgrad overlaps the following layers' batch-norm backward and dgrads
  deferred_fwd  deferred + in the forward, the downsample branch (1x1 conv + bn) on the side stream
Rounds alternate; each prints median replayed step ms; also checks the variants' gradients against base after one
step from equal weights (bit equality is not expected: cuDNN algorithms may differ)."""
import json, os, statistics, time
import torch
from bench import resnet as R
from models import resnet as M
from triton_kernels import foreach_cast as FC

dev = torch.device("cuda")
OUT = os.environ.get("OUT", "/tmp")
B = int(os.environ.get("BATCH", "512"))
ROUNDS = int(os.environ.get("ROUNDS", "9"))
STEPS = int(os.environ.get("STEPS", "30"))
MODEL = os.environ.get("MODEL", "resnet18")
torch.backends.cudnn.benchmark = True
res = {}
SIDE = {}
PENDING = []
MODE = {"v": "base"}


def side():
    d = torch.cuda.current_device()
    if d not in SIDE:
        SIDE[d] = torch.cuda.Stream()
    return SIDE[d]


def join():
    if PENDING:
        cur = torch.cuda.current_stream()
        cur.wait_stream(side())
        for ts in PENDING:
            for t in ts:
                if t is not None:
                    t.record_stream(cur)
        PENDING.clear()


class SplitConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding):
        ctx.save_for_backward(x, weight)
        ctx.cfg = (stride, padding, bias is not None)
        return torch.ops.aten.convolution(x, weight, bias, stride, padding, [1, 1], False, [0, 0], 1)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        stride, padding, has_bias = ctx.cfg
        cur = torch.cuda.current_stream()
        s = side()
        s.wait_stream(cur)
        with torch.cuda.stream(s):
            _, dw, db = torch.ops.aten.convolution_backward(dy, x, weight, [weight.shape[0]] if has_bias else None,
                                                            stride, padding, [1, 1], False, [0, 0], 1,
                                                            [False, True, has_bias])
        PENDING.append((dy, x, dw, db))
        dx = None
        if ctx.needs_input_grad[0]:
            dx = torch.ops.aten.convolution_backward(dy, x, weight, None, stride, padding, [1, 1], False, [0, 0], 1,
                                                     [True, False, False])[0]
        if MODE["v"] == "join_now":
            join()
        return dx, dw, db, None, None


def conv_split(conv, x):
    weight = conv.weight if getattr(conv, "cast_weight", None) is None else conv.cast_weight
    if torch.is_autocast_enabled("cuda"):
        dt = torch.get_autocast_dtype("cuda")
        x, weight = x.to(dt), weight.to(dt)
    with torch.autocast("cuda", enabled=False):
        return SplitConv.apply(x, weight, conv.bias, list(conv.stride), list(conv.padding))


orig_cast_bwd = FC._CastParameters.backward


def cast_bwd(ctx, *grads):
    join()
    return orig_cast_bwd(ctx, *grads)


FC._CastParameters.backward = staticmethod(cast_bwd)

orig_block_fwd = M.BasicBlock.forward


def block_fwd(self, x):
    if MODE["v"] != "deferred_fwd" or self.downsample is None:
        return orig_block_fwd(self, x)
    x, x2 = x if isinstance(x, tuple) else (x, x)
    cur = torch.cuda.current_stream()
    s = side()
    s.wait_stream(cur)
    with torch.cuda.stream(s):
        identity = self.downsample(x2)
    y = self.bn1(self.conv1(x))
    y = self.conv2(y)
    cur.wait_stream(s)
    identity.record_stream(cur)
    return self.bn2(y, identity)


M.BasicBlock.forward = block_fwd

xs = torch.randn(B, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
ys = torch.randint(0, 10, (B,), device=dev)


def trainer(backend):
    args = R.parse_args(["--synthetic", "--model", MODEL, "--amp", "bf16", "--batch-size", str(B), "--backend", backend])
    torch.manual_seed(0)
    model, fwd = R.build_model(args, backend, dev)
    return R.Trainer(args, model, fwd, dev, 100000)


def step_ms(tr, steps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(steps):
        tr.step(xs, ys)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / steps


def set_variant(v):
    MODE["v"] = v
    M.CONV_IMPLEMENTATIONS["cudnn"] = M._conv_cudnn if v == "base" else conv_split


VARIANTS = os.environ.get("VARIANTS", "base,join_now,deferred,deferred_fwd").split(",")
# gradients after one eager step from equal weights, against base (eager calls, the triton backend)
grads = {}
for v in VARIANTS:
    set_variant(v)
    tr = trainer("triton")
    tr.optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = tr.criterion(tr.forward(xs), ys)
    loss.backward()
    torch.cuda.synchronize()
    grads[v] = [p.grad.float().clone() for p in tr.model.parameters()]
    del tr
for v in VARIANTS[1:]:
    rel = max(((a - b).norm() / b.norm().clamp_min(1e-30)).item() for a, b in zip(grads[v], grads["base"]))
    res[f"grad_max_rel_vs_base_{v}"] = rel
    print(f"{v}: max relative gradient difference vs base {rel:.3e}", flush=True)
del grads

graphs = {}
for v in VARIANTS:
    set_variant(v)
    t0 = time.time()
    graphs[v] = trainer("triton+graph")
    step_ms(graphs[v], 20)
    print(f"captured {v} in {time.time() - t0:.1f} s", flush=True)

times = {v: [] for v in graphs}
for r in range(ROUNDS):
    for v, tr in graphs.items():
        set_variant(v)
        times[v].append(step_ms(tr, STEPS))
res["triton+graph"] = {v: {"median_ms": statistics.median(t), "rounds": t} for v, t in times.items()}
base = res["triton+graph"]["base"]["median_ms"]
for v, t in times.items():
    med = res["triton+graph"][v]["median_ms"]
    print(f"triton+graph {v:13s} {med:7.3f} ms  base-this {base - med:+.3f} ms  rounds {[round(x, 3) for x in t]}",
          flush=True)

# eager calls (host path included), fewer rounds
if os.environ.get("EAGER", "1") == "1":
    eag = {}
    for v in VARIANTS:
        set_variant(v)
        eag[v] = trainer("triton")
        step_ms(eag[v], 10)
    et = {v: [] for v in eag}
    for r in range(5):
        for v, tr in eag.items():
            set_variant(v)
            et[v].append(step_ms(tr, STEPS))
    res["triton"] = {v: {"median_ms": statistics.median(t), "rounds": t} for v, t in et.items()}
    for v, t in et.items():
        print(f"triton (eager calls) {v:13s} {statistics.median(t):7.3f} ms rounds {[round(x, 3) for x in t]}", flush=True)
json.dump(res, open(f"{OUT}/conv_streams_ab_{MODEL}.json", "w"), indent=1, default=str)
