"""Rows of a GPU op-suite run made outside gpu_run.sh: the git_commit column set to the commit the tree was at
(the box had no .git), and the pct_roofline rows the box could not compute (no ceilings.json there)
added from each time_ms median and results/<device>/ceilings.json ($CEILINGS, else the H100's). Usage: fix_rows.py
ops.csv commit [merge_dir]"""
import json, os, sys
sys.path.insert(0, "/work/main")
import pandas as pd
from bench.ops import build
from bench.harness import roofline_floor_ms
from bench.results import write_rows
src, commit = sys.argv[1], sys.argv[2]
df = pd.read_csv(src, keep_default_na=False, na_values=[""])
df["git_commit"] = commit
ceil = json.load(open(os.environ.get("CEILINGS", "/work/main/results/NVIDIA_H100_80GB_HBM3/ceilings.json")))
by_key = {}
for c in build(quick=False, tiny=False) + build(quick=True, tiny=False):
    by_key[(c.name, json.dumps(c.params, sort_keys=True), str(c.dtype).replace("torch.", ""))] = c
rows = df.to_dict("records")
have = {(r["case"], r["params"], r["dtype"], r["backend"]) for r in rows if r["metric"] == "pct_roofline"}
added = []
for r in rows:
    if r["metric"] != "time_ms":
        continue
    key = (r["case"], json.dumps(json.loads(r["params"]), sort_keys=True), r["dtype"])
    case = by_key.get(key)
    if case is None or (r["case"], r["params"], r["dtype"], r["backend"]) in have:
        continue
    floor = roofline_floor_ms(case, ceil)
    if floor is None:
        continue
    new = dict(r, metric="pct_roofline", value=100.0 * floor / float(r["value"]), unit="%", p20=None, p80=None,
               ci_low=None, ci_high=None, note="from the run's median and ceilings.json, after the run")
    added.append(new)
rows = [{k: (None if (isinstance(v, float) and v != v) else v) for k, v in r.items()} for r in rows + added]
print(f"{len(rows) - len(added)} rows, {len(added)} pct_roofline rows added")
out = sys.argv[3] if len(sys.argv) > 3 else None
if out:
    print(write_rows(rows, out, "ops"))
else:
    pd.DataFrame(rows).to_csv(src + ".fixed", index=False)
