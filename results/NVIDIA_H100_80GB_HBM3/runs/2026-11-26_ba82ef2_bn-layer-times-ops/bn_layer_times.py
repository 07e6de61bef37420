"""In-step time of every batch-norm kernel of the triton backend's ResNet-18 step (batch 512, bf16, eager calls under
torch.profiler), grouped by kernel and grid (the grid tells the layer's shape), with the bytes each moves at its
shape: where the small layers' time goes."""
import collections, json, os, statistics, tempfile
import torch
from bench import resnet as R

dev = torch.device("cuda")
OUT = os.environ.get("OUT", "/tmp")
torch.backends.cudnn.benchmark = True
args = R.parse_args(["--synthetic", "--amp", "bf16", "--batch-size", "512", "--backend", "triton"])
torch.manual_seed(0)
model, fwd = R.build_model(args, "triton", dev)
tr = R.Trainer(args, model, fwd, dev, 100000)
x = torch.randn(512, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 10, (512,), device=dev)
for _ in range(30):
    tr.step(x, y)
torch.cuda.synchronize()
STEPS = 10
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
    for _ in range(STEPS):
        tr.step(x, y)
    torch.cuda.synchronize()
path = os.path.join(tempfile.mkdtemp(), "trace.json")
p.export_chrome_trace(path)
events = json.load(open(path))["traceEvents"]
groups = collections.defaultdict(list)
order = []
for e in events:
    if e.get("cat") == "kernel" and "_bn_" in e.get("name", ""):
        key = (e["name"].split("_kernel")[0] + "_kernel", tuple(e["args"].get("grid", ())))
        if key not in groups:
            order.append(key)
        groups[key].append(e["dur"])
rows = []
total = 0.0
for key in order:
    d = groups[key]
    per_step = len(d) / STEPS
    med = statistics.median(d)
    total += med * per_step
    rows.append({"kernel": key[0], "grid": key[1], "per_step": per_step, "median_us": med})
    print(f"{key[0]:24s} grid {str(key[1]):16s} x{per_step:3.0f}/step  median {med:7.2f} us", flush=True)
print(f"batch-norm kernels per step: {total:.1f} us", flush=True)
json.dump(rows, open(f"{OUT}/bn_layer_times.json", "w"), indent=1)
