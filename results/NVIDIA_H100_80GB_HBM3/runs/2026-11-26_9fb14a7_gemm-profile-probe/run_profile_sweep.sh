#!/usr/bin/env bash
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
TRITON_PLAYGROUND_VERBOSE=1 timeout 200 python3 prof_linear.py 2>&1 | grep -v -i warn
echo "=== sweep fc1 / fc3 $(date +%T)"
timeout 300 python3 -m autotune.sweep --kernel gemm --shapes 512x1024x8704,512x4x1024 --dtype bf16 --layouts nt --act relu \
  --space full --sample 100 --time-budget 240 --out $OUT --no-cache --no-progress 2>&1 | grep -v -i warn | tail -5
python3 - <<'PY'
import pandas as pd, glob, os
df = pd.read_csv(glob.glob(os.environ["OUT"] + "/sweeps/*.csv")[0]); ok = df[df.status == "ok"]
for shape, g in ok.groupby("shape"):
    print(shape); print(g.sort_values("ms")[["BLOCK_M","BLOCK_N","BLOCK_K","GROUP_M","TMA","SPLIT_K","num_warps","num_stages","tuner_rank","ms"]].head(8).to_string())
PY
