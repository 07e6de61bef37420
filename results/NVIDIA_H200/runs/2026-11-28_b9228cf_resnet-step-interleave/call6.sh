#!/usr/bin/env bash
# session 55, call 6: does a finer interleave pair the backends' eager-call steps better while the cores' speed
# moves? bench.resnet's eager-call backends with the same 250 timed steps as 5 rounds of 50 (gpu_run.sh's
# resnet-step today) and as 25 rounds of 10, alternating, two processes each; the speedup rows' CIs compared.
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
limit=230
for spec in 50x5 10x25 50x5 10x25; do
  steps=${spec%x*}; rounds=${spec#*x}; n=$((n + 1))
  echo "=== $n: --bench-steps $steps --bench-rounds $rounds ($(date +%T))"
  timeout $limit python3 -m bench.resnet --model resnet18 --synthetic --batch-size 512 --amp bf16 --sgd fused \
    --backend eager,compile,triton --bench-steps $steps --bench-rounds $rounds --warmup-iters 150 \
    --out-dir $OUT/r$n 2>&1 | grep -v -i warn | grep -E "ms  \("
  python3 - $OUT/r$n <<'PY'
import glob, json, sys
for path in glob.glob(sys.argv[1] + "/resnet-steps-*.json"):
    if path.endswith("curves.json"):
        continue
    for r in json.load(open(path)):
        if r["metric"].startswith("speedup"):
            print(f"  {r['backend']:8s} {r['metric']:18s} {r['value']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]")
PY
  limit=110
done > $OUT/interleave.txt 2>&1
cat $OUT/interleave.txt
cd $OUT && tar -czf rows.tgz r1 r2 r3 r4 && rm -rf r1 r2 r3 r4
