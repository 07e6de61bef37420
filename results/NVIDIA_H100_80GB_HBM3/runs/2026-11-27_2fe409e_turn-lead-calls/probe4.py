"""Turns of 4 timed calls with 0, 2 or 4 untimed lead calls, against loops of 200 calls (5 rounds), in one
process: per backend the median time and each ratio with its bootstrap CI over the rounds."""
import json, os
import torch
from bench import harness
from bench.cases.gemm import linear_case
from bench.cases.layernorm import ln_relu_maxpool_case

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
bf16 = torch.bfloat16
CASES = [(ln_relu_maxpool_case(128, 256, 1008, bf16), ("eager", "compile", "triton")),
         (linear_case(512, 8704, 1024, bf16, "relu", name="fc1"), ("eager", "triton")),
         (linear_case(512, 8704, 1024, bf16, "relu", True, name="fc1"), ("eager", "triton")),
         (linear_case(512, 1024, 4, bf16, "none", True, name="fc3"), ("eager", "triton")),
         (linear_case(4096, 8704, 1024, bf16, "relu", True), ("eager", "triton"))]
DESIGNS = [("loop 5 x 200", 5, 200, 0), ("turns of 4, lead 0", 250, 4, 0), ("turns of 4, lead 2", 250, 4, 2),
           ("turns of 4, lead 4", 250, 4, 4), ("loop 5 x 200, again", 5, 200, 0)]
res = {}
for case, backends in CASES:
    inputs = case.inputs(0, dev)
    calls = {}
    for b in backends:
        fn = harness.build_backend(b, case)
        calls[b] = (lambda fn=fn: fn(*inputs))
        for _ in range(10):
            calls[b]()
    torch.cuda.synchronize()
    name = case.name
    res[name] = {}
    for label, rounds, reps, lead in DESIGNS:
        got = harness.time_rounds(calls, {b: reps for b in calls}, rounds, dev, lead=lead)
        row = {}
        for b, rs in got.items():
            row[b] = harness.median([t for r in rs for t in r])
        meds = {b: [harness.median(r) for r in rs] for b, rs in got.items()}
        for ref in ("eager", "compile"):
            if ref in meds:
                row[f"{ref}/triton"] = harness.bootstrap_ratio_ci(meds[ref], meds["triton"])
        res[name][label] = row
        print(name, label, {k: (round(v * 1e3, 1) if isinstance(v, float) else tuple(round(x, 3) for x in v))
                            for k, v in row.items()}, flush=True)
    with open(os.path.join(OUT, "probe4.json"), "w") as f:
        json.dump(res, f, indent=1)
