"""A/B of the Triton backend's bf16 weight gradients (models.resnet low_precision_grads, read by the Triton SGD)
against fp32 ones (today's backward cast): ResNet-18 step, batch 512 bf16, triton+stepgraph, one process, one
tuning shared, rounds interleaved; compile+stepgraph once for the ratio. OUT: rows per run."""
import os

import bench.resnet as r

out = os.environ.get("OUT", "/tmp/grads_ab")
init = r.Trainer.__init__
variant = {"low": True}


def patched(self, *args, **kwargs):
    init(self, *args, **kwargs)
    if hasattr(self.model, "low_precision_grads"):
        self.model.low_precision_grads = self.model.low_precision_grads and variant["low"]
        print(f"[ab] low_precision_grads = {self.model.low_precision_grads}", flush=True)


r.Trainer.__init__ = patched
common = ["--model", "resnet18", "--synthetic", "--batch-size", "512", "--amp", "bf16", "--sgd", "fused",
          "--bench-steps", "50", "--bench-rounds", "3", "--warmup-iters", "60", "--no-progress"]
r.main(common + ["--backend", "compile+stepgraph", "--out-dir", f"{out}/compile"])
for rnd in range(3):
    for low in (True, False):
        variant["low"] = low
        name = f"{'bf16' if low else 'fp32'}-grads-{rnd}"
        print(f"=== round {rnd}: {name}", flush=True)
        r.main(common + ["--backend", "triton+stepgraph", "--out-dir", f"{out}/{name}"])
