"""harness.time_rounds as the op suite runs it (four backends, each turn on an idle GPU, rounds of ROUND_CALLS),
three trials each, on the host-heavy cases."""
import json, os, statistics
import torch
from bench import harness
from bench.cases import gemm as gemm_cases

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
want = ["linear_relu_fwdbwd", "char_cnn_fc1_linear_relu_fwdbwd", "char_cnn_fc3_linear_fwdbwd",
        "mnist_softmax_regression_linear_fwdbwd"]
cases = {c.name: c for c in gemm_cases.cases() if c.name in want and c.params.get("M") in (4096, 512, 128)}
res = {}
for name in want:
    case = cases[name]
    inputs = case.inputs(0, dev)
    calls = {}
    for b in ("eager", "triton", "eager+graph", "triton+graph"):
        fn = harness.build_backend(b, case)
        fn = harness.CudaGraphed(fn, inputs) if harness.is_graphed(b) else fn
        calls[b] = (lambda fn=fn: fn(*inputs))
    for call in calls.values():
        for _ in range(10):
            call()
    res[name] = []
    for _ in range(3):
        total = {b: 1000 for b in calls}
        rounds, reps = harness.round_plan(total, harness.RunConfig(), True, list(calls))
        per = harness.time_rounds(calls, reps, rounds, dev)
        rm = {b: [statistics.median(r) for r in per[b]] for b in calls}
        med = {b: statistics.median([t for r in per[b] for t in r]) for b in calls}
        est, lo, hi = harness.bootstrap_ratio_ci(rm["eager"], rm["triton"])
        t = dict(est=est, lo=lo, hi=hi, **{f"{b}_ms": v for b, v in med.items()})
        res[name].append(t)
        print(name, rounds, reps["eager"], {k: round(v, 4) for k, v in t.items()}, flush=True)
    with open(os.path.join(OUT, "probe5.json"), "w") as f:
        json.dump(res, f, indent=1)
