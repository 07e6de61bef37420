#!/usr/bin/env bash
# session 27: where a cold start of the Triton ResNet-18 backend goes. One-epoch synthetic training runs
# (20 steps of 512 + an evaluation of 2000): (1) cold tuning cache and cold Triton JIT cache, verbose tuner;
# (2) tuned configs on disk, cold JIT cache; (3) both warm. The tuning cache comes back as tune_cache.tgz.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
A="--model resnet18 --synthetic --train-limit 10240 --test-limit 2000 --epochs 1 --batch-size 512 --amp bf16 --backend ${BACKEND:-triton+stepgraph} --no-progress"
export TRITON_PLAYGROUND_CACHE=/tmp/tune
run() { local t=$(date +%s.%N); timeout ${2:-400} python3 -m bench.resnet $A --out-dir /tmp/o_$1 > /tmp/log_$1.txt 2>&1; echo "rc $? $1: $(python3 -c "import time;print(round(time.time()-$t,1))") s"; grep '^{"epoch' /tmp/log_$1.txt | cut -c1-200; }
el "cold"; TRITON_CACHE_DIR=/tmp/jit1 TRITON_PLAYGROUND_VERBOSE=1 run cold 420
grep "autotune" /tmp/log_cold.txt | grep -c tuned
grep "autotune" /tmp/log_cold.txt | grep tuned | sed -E 's/^\[autotune ([a-z_0-9]+)\].* tuned ([0-9]+) configs in ([0-9.]+)s.*/\1 \2 \3/' \
  | awk '{n[$1]++; c[$1]+=$2; s[$1]+=$3} END {for (k in n) printf "%-24s keys %3d configs %4d seconds %7.1f\n", k, n[k], c[k], s[k]}' | sort -k7 -n -r
el "tuned, cold JIT"; TRITON_CACHE_DIR=/tmp/jit2 run jit 300
el "warm"; TRITON_CACHE_DIR=/tmp/jit2 run warm 200
cp /tmp/log_cold.txt $OUT/; tar czf $OUT/tune_cache.tgz -C /tmp tune
el done
