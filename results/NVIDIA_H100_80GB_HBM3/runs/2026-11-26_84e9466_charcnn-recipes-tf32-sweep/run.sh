#!/usr/bin/env bash
# call 1: Char-CNN training recipes + agreement (issue 17); tf32 GEMM config sweep at 4096^3 (issue 22)
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .data/char_cnn $OUT/cc
echo "=== tf32 sweep $(date +%T)"
timeout 200 python3 -m autotune.sweep --kernel gemm --shapes 4096x4096x4096 --dtype float32 --precision tf32 \
  --layouts nn,nt --act none --no-bias --space full --sample 120 --time-budget 150 --out /tmp/sw --no-cache \
  --no-progress 2>&1 | grep -v -i warn | tail -25
python3 - <<'PY'
import torch, glob, pandas as pd
from bench.harness import time_call
torch.backends.cuda.matmul.allow_tf32 = True
a = torch.randn(4096, 4096, device="cuda"); b = torch.randn(4096, 4096, device="cuda")
for lay, bb in (("nn", b), ("nt", b.t().contiguous().t())):
    ts = time_call(lambda: a @ bb, 50, device=a.device)
    print("cuBLAS tf32", lay, sorted(ts)[len(ts)//2])
f = glob.glob("/tmp/sw/sweeps/*.csv")
print(f)
if f:
    df = pd.read_csv(f[0]); print(df.columns.tolist())
    ok = df[df.status == "ok"] if "status" in df else df
    col = [c for c in df.columns if "ms" in c][0]
    for lay, g in ok.groupby([c for c in df.columns if c in ("layout", "layouts", "variant")][:1] or (lambda i: 0)):
        print(lay); print(g.sort_values(col).head(8).to_string())
PY
cp /tmp/sw/sweeps/*.csv $OUT/cc/ 2>/dev/null
echo "=== char-cnn recipes $(date +%T)"
for r in "base 30 0.0001 5" "lr3e4 60 0.0003 10" "lr1e3 60 0.001 10" "long 100 0.0001 25"; do
  set -- $r
  timeout 100 python3 -m bench.char_cnn train --epochs $2 --lr $3 --halve-every $4 --weights .data/char_cnn/w_$1.pt \
    --checkpoint /tmp/ck_$1.pt --restart --no-write --no-progress 2>&1 | grep -v -i warn | tail -1
done
for w in base lr3e4 lr1e3 long; do
  echo "--- precision $w $(date +%T)"
  timeout 120 python3 diag/charcnn_precision.py --weights .data/char_cnn/w_$w.pt --out $OUT/cc/$w \
    --only ref,a,e,g,triton 2>&1 | grep -v -i warn | tail -14
done
cd $OUT && tar czf cc.tgz cc && rm -rf cc
