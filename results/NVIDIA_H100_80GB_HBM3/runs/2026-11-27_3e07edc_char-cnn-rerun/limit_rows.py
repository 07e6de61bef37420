"""The Char-CNN run's limit_inputs_per_s / pct_roofline rows (the box had no ceilings.json): the limit as the
earlier run computed it from ceilings.json (it depends on the shape only), the % from this run's inputs/s."""
import sys
sys.path.insert(0, "/work/main")
import pandas as pd
from bench.results import write_rows
run_csv, headline, commit = sys.argv[1], sys.argv[2], sys.argv[3]
new = pd.read_csv(run_csv, keep_default_na=False, na_values=[""])
old = pd.read_csv(f"{headline}/char_cnn.csv", keep_default_na=False, na_values=[""])
rate = {(r.case, r.params, r.dtype, r.backend): r.value for r in new.itertuples() if r.metric == "inputs_per_s"}
out = []
for r in old.to_dict("records"):
    if r["metric"] not in ("limit_inputs_per_s", "pct_roofline"):
        continue
    key = (r["case"], r["params"], r["dtype"], r["backend"])
    if key not in rate:
        continue
    limit = float(old[(old.case == r["case"]) & (old.params == r["params"]) & (old.dtype == r["dtype"])
                      & (old.backend == r["backend"]) & (old.metric == "limit_inputs_per_s")].value.iloc[0])
    r = dict(r, git_commit=commit, value=limit if r["metric"] == "limit_inputs_per_s" else 100.0 * rate[key] / limit)
    r = {k: (None if (isinstance(v, float) and v != v) else v) for k, v in r.items()}
    out.append(r)
    print(r["backend"], r["dtype"], r["metric"], round(r["value"], 2))
print(write_rows(out, headline, "char_cnn"))
