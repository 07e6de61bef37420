import gzip, json, sys, collections, re
def load(p):
    ev = json.load(gzip.open(p))["traceEvents"]
    return [e for e in ev if e.get("cat") == "kernel"]
def cat(name):
    n = name
    if "xmma" in n or "cutlass" in n or "cudnn" in n.lower() or "implicit_gemm" in n or "nhwc" in n or "conv" in n.lower() and "triton" not in n: return "cudnn/conv"
    if "_bn_stats" in n: return "bn stats"
    if "_bn_apply" in n: return "bn apply"
    if "_bn_bwd_reduce" in n: return "bn bwd reduce"
    if "_bn_bwd_dx" in n: return "bn bwd dx"
    if "gemm" in n.lower() or "sm90" in n: return "gemm"
    return n[:70]
for p in sys.argv[1:]:
    ks = load(p)
    steps = 5
    tot = collections.Counter(); cnt = collections.Counter()
    for k in ks:
        c = cat(k["name"]); tot[c] += k["dur"]; cnt[c] += 1
    print("==", p, "total us/step", sum(tot.values())/steps, "kernels/step", len(ks)/steps)
    for c, t in tot.most_common(40):
        print(f"  {t/steps:9.1f} us  {cnt[c]/steps:6.1f}x  {c}")
