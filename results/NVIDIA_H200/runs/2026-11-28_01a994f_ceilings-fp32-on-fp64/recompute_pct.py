"""Every pct_roofline row of a results folder recomputed from its time_ms median and that folder's ceilings.json
(after the ceilings were measured anew): value = 100 * floor / time, floor from bench.harness.roofline_floor_ms of the
op suite's case. Rows whose case the suite no longer builds keep their value. Usage: recompute_pct.py RESULTS_DIR"""
import json, sys
sys.path.insert(0, "/work/main")
import pandas as pd
from bench.ops import build
from bench.harness import roofline_floor_ms
from bench.results import write_rows
out = sys.argv[1]
df = pd.read_csv(f"{out}/ops.csv", keep_default_na=False, na_values=[""])
ceil = json.load(open(f"{out}/ceilings.json"))
cases = {(c.name, json.dumps(c.params, sort_keys=True), str(c.dtype).replace("torch.", "")): c
         for c in build(quick=False, tiny=False) + build(quick=True, tiny=False)}
key = lambda r: (r["case"], json.dumps(json.loads(r["params"]), sort_keys=True), r["dtype"], r["backend"])
times = {key(r): float(r["value"]) for r in df.to_dict("records") if r["metric"] == "time_ms"}
rows, changed, kept = [], 0, 0
for r in df.to_dict("records"):
    if r["metric"] == "pct_roofline":
        case, t = cases.get(key(r)[:3]), times.get(key(r))
        floor = roofline_floor_ms(case, ceil) if case is not None else None
        if floor is not None and t:
            r = dict(r, value=100.0 * floor / t)
            changed += 1
        else:
            kept += 1
    rows.append({k: (None if (isinstance(v, float) and v != v) else v) for k, v in r.items()})
print(f"{changed} pct_roofline rows recomputed, {kept} kept")
print(write_rows(rows, out, "ops"))
