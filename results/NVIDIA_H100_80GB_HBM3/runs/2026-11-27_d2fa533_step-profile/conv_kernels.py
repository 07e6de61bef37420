import gzip, json, sys
ev = json.load(gzip.open(sys.argv[1]))["traceEvents"]
ks = sorted([e for e in ev if e.get("cat") == "kernel"], key=lambda e: e["ts"])
n = len(ks) // 5
step = ks[:n]
skip = ("_bn_", "elementwise", "index_", "nll", "softmax", "reduce_kernel", "Fill", "gather", "multi_tensor", "_head", "_pool", "_sgd", "_foreach")
tot = 0
for k in step:
    if any(s in k["name"] for s in skip): continue
    tot += k["dur"]
    print(f'{k["dur"]:7.1f}  {k["name"][:100]}  grid={k["args"].get("grid")}')
print("total", tot)
