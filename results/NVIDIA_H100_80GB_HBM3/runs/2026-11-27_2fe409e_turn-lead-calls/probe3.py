"""torch.compile's LN -> ReLU -> MaxPool1d(3) [256, 1008] x 128: 0.127 ms in 200-call turns (cf5e71e), 0.206 ms in
turns of ~4 (6232faa). Same process, same box: both turn lengths, and each backend's host time per call."""
import json, os, statistics, time
import torch
from bench import harness
from bench.cases.layernorm import ln_relu_maxpool_case

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
case = ln_relu_maxpool_case(128, 256, 1008, torch.bfloat16)
inputs = case.inputs(0, dev)
calls = {}
for b in ("eager", "compile", "triton"):
    fn = harness.build_backend(b, case)
    calls[b] = (lambda fn=fn: fn(*inputs))
    for _ in range(20):
        calls[b]()
torch.cuda.synchronize()
res = {}
for label, rounds, reps in (("turns of 4", 250, 4), ("turns of 200", 5, 200), ("turns of 4, again", 250, 4),
                            ("turns of 200, again", 5, 200)):
    got = harness.time_rounds(calls, {b: reps for b in calls}, rounds, dev)
    res[label] = {}
    for b, rs in got.items():
        flat = [t for r in rs for t in r]
        first = [r[0] for r in rs]
        rest = [t for r in rs for t in r[1:]]
        res[label][b] = dict(median=statistics.median(flat), p20=harness.quantile(flat, 0.2),
                             p80=harness.quantile(flat, 0.8), first_median=statistics.median(first),
                             rest_median=statistics.median(rest))
        print(label, b, {k: round(v * 1e3, 1) for k, v in res[label][b].items()}, "us", flush=True)
host = {}
for b, call in calls.items():  # host time per call, the GPU busy ahead (no flush)
    ts = []
    for _ in range(5):
        torch.cuda._sleep(int(2e9 * 0.05))
        for _ in range(20):
            t0 = time.perf_counter()
            call()
            ts.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    host[b] = statistics.median(ts)
    print("host us per call", b, round(host[b], 1), flush=True)
res["host_us_per_call"] = host
with open(os.path.join(OUT, "probe3.json"), "w") as f:
    json.dump(res, f, indent=1)
