# The second call's step A/B (run inline on the box, warm from the first call, with the module
# bn_tile_order.py of this folder on the path as bench.bn_tile_order): output step2_full.txt.
from pathlib import Path
import bench.bn_tile_order as b, bench.resnet as r, os
cache = Path(os.path.expanduser("~/bto")); out = Path(os.environ["OUT"])
for rnd in range(2):
    for v in ("interleaved-reverse", "chunked"):
        b.use(v, cache)
        print(f"=== round {rnd} variant {v}", flush=True)
        r.main(["--model", "resnet18", "--synthetic", "--batch-size", "512", "--amp", "bf16", "--sgd", "fused",
                "--backend", "triton+stepgraph", "--bench-steps", "50", "--bench-rounds", "3", "--warmup-iters", "60",
                "--no-progress", "--out-dir", f"{out}/{v}-{rnd}"])
