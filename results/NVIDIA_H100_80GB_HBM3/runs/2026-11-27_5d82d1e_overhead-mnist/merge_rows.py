"""Merge a GPU run's CSV into the headline file of the same name (by key), as the tools' own writes do."""
import sys
from pathlib import Path
sys.path.insert(0, "/work/main")
import pandas as pd
from bench.results import write_rows
src, out = Path(sys.argv[1]), sys.argv[2]
df = pd.read_csv(src, keep_default_na=False, na_values=[""])
rows = [{k: (None if (isinstance(v, float) and v != v) else v) for k, v in r.items()} for r in df.to_dict("records")]
for r in rows:
    if r.get("dtype") is None:
        r["dtype"] = ""  # a row without a dtype keeps an empty field, as the tools write it
stem = src.stem
suite = rows[0]["suite"]
tag = stem[len(suite) + 1:] if stem != suite else None
assert stem.startswith(suite), (stem, suite)
print(write_rows(rows, out, suite, tag), len(rows))
