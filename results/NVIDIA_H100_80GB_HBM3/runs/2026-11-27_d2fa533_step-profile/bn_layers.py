import gzip, json, sys
ev = json.load(gzip.open(sys.argv[1]))["traceEvents"]
ks = sorted([e for e in ev if e.get("cat") == "kernel"], key=lambda e: e["ts"])
names = ["_bn_stats", "_bn_apply", "_bn_bwd_reduce", "_bn_bwd_dx"]
sizes = [67.1]*5 + [33.6]*5 + [16.8]*5 + [8.4]*5
for nm in names:
    d = [k for k in ks if nm in k["name"]][:20]  # first step
    durs = [k["dur"] for k in d]
    grids = [k["args"].get("grid") for k in d]
    order = durs if nm in ("_bn_stats", "_bn_apply") else durs[::-1]
    g = grids if nm in ("_bn_stats", "_bn_apply") else grids[::-1]
    print(nm, "sum", round(sum(durs),1))
    print("   ", " ".join(f"{x:.0f}" for x in order))
    print("    GB/s per MB of activation:", " ".join(f"{s/x*1e3:.0f}" for s, x in zip(sizes, order)))
    print("    grids", g[:6], g[10:12], g[15:17])
