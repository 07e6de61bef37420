import gzip, json, sys, collections
for f in sys.argv[1:]:
    ev = json.load(gzip.open(f))["traceEvents"]
    k = sorted([e for e in ev if e.get("cat") == "kernel"], key=lambda e: e["ts"])
    # split steps: the SGD kernel ends a step
    t0 = k[0]["ts"]; span = k[-1]["ts"] + k[-1]["dur"] - t0
    busy = sum(e["dur"] for e in k)
    # union of intervals
    cur_s, cur_e, union = None, None, 0.0
    gaps = []
    for e in k:
        s, t = e["ts"], e["ts"] + e["dur"]
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                union += cur_e - cur_s; gaps.append((s - cur_e, prev_name, e["name"][:50]))
            cur_s, cur_e = s, t
        else:
            cur_e = max(cur_e, t)
        prev_name = e["name"][:50]
    union += cur_e - cur_s
    print(f"== {f}: kernels {len(k)}  ({len(k)/5:.1f}/step)  span {span/5:.1f} us/step  busy-union {union/5:.1f}  sum {busy/5:.1f}  gaps {sum(g[0] for g in gaps)/5:.1f} us/step in {len(gaps)/5:.1f}")
    big = sorted(gaps, reverse=True)[:15]
    for g in big: print(f"   gap {g[0]:7.1f} after {g[1]:50s} before {g[2]}")
    hist = collections.Counter(min(int(g[0]), 10) for g in gaps)
    print("   gap histogram (us):", sorted(hist.items()))
