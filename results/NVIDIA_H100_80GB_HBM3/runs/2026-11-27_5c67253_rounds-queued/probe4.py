"""The harness's timing designs on host-heavy cases, three trials each: the old one (5 rounds of ~200 calls, a
synchronisation per round), rounds of 2 with a synchronisation per round (the first try), and time_rounds (rounds
of 2, one synchronisation at the end)."""
import json, os, statistics
import torch
from bench import harness
from bench.cases import gemm as gemm_cases

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
want = ["linear_relu_fwdbwd", "char_cnn_fc1_linear_relu_fwdbwd", "char_cnn_fc3_linear_fwdbwd", "linear_gelu"]
cases = {c.name: c for c in gemm_cases.cases() if c.name in want and c.params.get("M") in (4096, 512)}
res = {}
for name in want:
    case = cases[name]
    inputs = case.inputs(0, dev)
    calls = {b: (lambda fn=case.fns[b]: fn(*inputs)) for b in ("eager", "triton")}
    for call in calls.values():
        for _ in range(20):
            call()
    torch.cuda.synchronize()
    res[name] = {}
    for design in ("5x200 synced", "500x2 synced", "500x2 time_rounds"):
        rounds = 5 if design.startswith("5x") else 500
        reps = {b: 1000 // rounds for b in calls}
        trials = []
        for _ in range(3):
            if design.endswith("synced"):
                per = {b: [] for b in calls}
                for _ in range(rounds):
                    for b, call in calls.items():
                        per[b].append(harness.time_call(call, reps[b], device=dev))
            else:
                per = harness.time_rounds(calls, reps, rounds, dev)
            rm = {b: [statistics.median(r) for r in per[b]] for b in calls}
            med = {b: statistics.median([t for r in per[b] for t in r]) for b in calls}
            est, lo, hi = harness.bootstrap_ratio_ci(rm["eager"], rm["triton"])
            trials.append(dict(est=est, lo=lo, hi=hi, eager_ms=med["eager"], triton_ms=med["triton"]))
            print(name, design, {k: round(v, 4) for k, v in trials[-1].items()}, flush=True)
        res[name][design] = trials
    with open(os.path.join(OUT, "probe4.json"), "w") as f:
        json.dump(res, f, indent=1)
