"""Cold-cache tuning of the batch-norm kernels, repeated: each round a fresh process with an empty tuning cache
runs one training forward + backward of the fused BN + residual + ReLU at ResNet-18's four layer shapes (batch
512, bf16, channels_last) and reports each kernel's pick and every trial's first-pass and final-round time."""
import json, os, subprocess, sys, tempfile

OUT = os.environ.get("OUT", "/tmp")
ROUNDS = int(os.environ.get("ROUNDS", "4"))
CHILD = r'''
import json, os, torch
from triton_kernels import batchnorm
dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
B = int(os.environ.get("BATCH", "512"))
for C, H in ((64, 32), (128, 16), (256, 8), (512, 4)):
    x = torch.randn(B, C, H, H, device=dev).to(dt).contiguous(memory_format=torch.channels_last).requires_grad_()
    r = torch.randn_like(x)
    w = torch.ones(C, device=dev, requires_grad=True); b = torch.zeros(C, device=dev, requires_grad=True)
    rm, rv = torch.zeros(C, device=dev), torch.ones(C, device=dev)
    y = batchnorm.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5, residual=r, relu=True)
    y.backward(torch.randn_like(y))
out = {name: t.trials for name, t in batchnorm._tuners.items()}
print(json.dumps(out))
'''
res = []
for i in range(ROUNDS):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRITON_PLAYGROUND_CACHE=cache, TRITON_PLAYGROUND_AUTOTUNE="1")
        p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
        if p.returncode:
            print(p.stderr[-2000:]); sys.exit(1)
        trials = json.loads(p.stdout.strip().splitlines()[-1])
        res.append(trials)
        for name, keys in trials.items():
            for key, ts in keys.items():
                shape = json.loads(key)
                ok = [t for t in ts if t.get("ms") is not None]
                best_first = min(ok, key=lambda t: t["ms"])
                fin = [t for t in ok if "final_ms" in t]
                pick = min(fin, key=lambda t: t["final_ms"]) if fin else best_first
                print(f"round {i} {name:10s} {str(shape.get('channels'))+'x'+str(shape.get('pixels')):>12s} "
                      f"pick {pick['config']['kwargs']} w{pick['config']['num_warps']} s{pick['config']['num_stages']} "
                      f"first {pick['ms'] * 1e3:.1f} final {pick.get('final_ms', float('nan')) * 1e3:.1f} us; "
                      f"first-pass spread {min(t['ms'] for t in ok) * 1e3:.1f}-{max(t['ms'] for t in ok) * 1e3:.1f}", flush=True)
json.dump(res, open(f"{OUT}/bn_tune_repeat.json", "w"), indent=1)
