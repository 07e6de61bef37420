import faulthandler, sys
faulthandler.dump_traceback_later(42, exit=True)
print('start', flush=True); import atexit; atexit.register(lambda: print('clean exit', flush=True))

import sys, torch, torch.distributed
import bench.resnet as br
args = br.parse_args(["--widths", "8,16,16,32", "--backend", sys.argv[1], "--amp", sys.argv[2], "--lr", "0.05"])
steps = br.STEP_GRAPH_WARMUP + 3 if sys.argv[1].endswith("+stepgraph") else 4  # replays too
dist = br.Dist()
torch.manual_seed(0)
model, forward = br.build_model(args, args.backends[0], dist.device, dist)
start = [p.detach().clone() for p in model.parameters()]
trainer = br.Trainer(args, model, forward, dist.device, 100)
g = torch.Generator(device=dist.device).manual_seed(1 + dist.rank)  # each rank its own images
for _ in range(steps):
    x = torch.randn(16, 3, 32, 32, device=dist.device, generator=g)
    x = x.contiguous(memory_format=torch.channels_last) if args.channels_last else x
    print('step', flush=True); trainer.step(x, torch.randint(0, 10, (16,), device=dist.device, generator=g))
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
every = [torch.empty_like(flat) for _ in range(dist.world)]
torch.distributed.all_gather(every, flat)
assert all(torch.equal(every[0], f) for f in every), "ranks' weights differ: gradients not all-reduced"
assert all(not torch.equal(a, p) for a, p in zip(start, model.parameters())), "a weight did not move"
dist.close()
