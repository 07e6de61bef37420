"""A/B of the Triton ResNet step's host path on the GPU: fast path on/off, gc on/off, autograd threads."""
import sys, time, gc, statistics
import torch
sys.path.insert(0, ".")
from bench import resnet as R
from bench import resnet_data
from triton_kernels import batchnorm_eager

args = R.parse_args(["--synthetic", "--batch-size", "512", "--amp", "bf16", "--backend", "triton"])
dev = torch.device("cuda")
torch.backends.cudnn.benchmark = True
data = resnet_data.load(None, True, None, None)
loader = resnet_data.GpuLoader(data.train_images, data.train_labels, 512, 0, dev, channels_last=True)
batches = [loader.batch(0, i) for i in range(20)]
fast_on = batchnorm_eager.fast_train
def bench(tr, label, n=30, reps=3):
    out = []
    for _ in range(reps):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for i in range(n):
            tr.step(*batches[i % 20])
        t1 = time.perf_counter(); torch.cuda.synchronize(); t2 = time.perf_counter()
        out.append(((t2 - t0) / n * 1e3, (t1 - t0) / n * 1e3))
    w = statistics.median(o[0] for o in out); e = statistics.median(o[1] for o in out)
    print(f"{label:40s} wall {w:6.2f} ms/step  enqueue {e:6.2f}", flush=True)
for backend in sys.argv[1].split(","):
    model, fwd = R.build_model(args, backend, dev)
    tr = R.Trainer(args, model, fwd, dev, 10000)
    for i in range(30):
        tr.step(*batches[i % 20])
    bench(tr, f"{backend}")
    if backend == "triton":
        batchnorm_eager.fast_train = lambda *a, **k: None
        bench(tr, "triton, fast path off")
        batchnorm_eager.fast_train = fast_on
        bench(tr, "triton, fast path on again")
    gc.disable(); bench(tr, f"{backend}, gc disabled"); gc.enable()
    gc.freeze(); bench(tr, f"{backend}, gc.freeze()"); gc.unfreeze()
    torch.autograd.set_multithreading_enabled(False)
    bench(tr, f"{backend}, autograd single-threaded")
    torch.autograd.set_multithreading_enabled(True)
    # forward only (no_grad) and forward+backward without optimizer
    x, y = batches[0]
    def fwd_only():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            model(x)
    class T:  # adapter
        step = staticmethod(lambda *b: fwd_only())
    bench(T, f"{backend}, forward only (no_grad)")
    del tr, model, fwd
    torch.cuda.empty_cache()
