import gzip, json, sys, collections, re
def cls(n):
    for p, c in (("xmma_fprop", "cudnn-fprop"), ("xmma_dgrad", "cudnn-dgrad"), ("xmma_wgrad", "cudnn-wgrad"), ("init_device_workspace", "cudnn-init"), ("nvjet", "cublas"), ("splitKreduce", "cublas-reduce")):
        if p in n: return c
    if n.startswith("triton_"): return "inductor:" + re.sub(r"_\d+$", "", n)[:40]
    return n[:40]
for f in sys.argv[1:]:
    ev = json.load(gzip.open(f))["traceEvents"]
    k = sorted([e for e in ev if e.get("cat") == "kernel"], key=lambda e: e["ts"])
    pairs = collections.defaultdict(list)
    for a, b in zip(k, k[1:]):
        g = b["ts"] - (a["ts"] + a["dur"])
        pairs[(cls(a["name"]), cls(b["name"]))].append(g)
    print("==", f)
    rows = sorted(pairs.items(), key=lambda kv: -sum(max(x, 0) for x in kv[1]))
    for (a, b), gs in rows[:25]:
        gs = [max(x, 0) for x in gs]
        print(f"  {sum(gs)/5:7.1f} us/step  n={len(gs)/5:5.1f}  median {sorted(gs)[len(gs)//2]:5.2f}  {a:42s} -> {b}")
