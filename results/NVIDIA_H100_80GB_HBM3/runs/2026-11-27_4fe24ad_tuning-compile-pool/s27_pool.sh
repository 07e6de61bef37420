#!/usr/bin/env bash
# session 27: the tuner's parallel compiles. GPU tests of compile_pool, runtime and the sweep; then a cold start
# of the Triton ResNet-18 backend (one synthetic epoch: 20 steps of 512 + an evaluation of 2000, fresh tuning
# and JIT caches) with the compile workers, and the same without them (TRITON_PLAYGROUND_COMPILE_WORKERS=0).
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
el tests
timeout 200 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_compile_pool.py tests/test_runtime.py tests/test_autotune_sweep.py 2>&1 | grep -vE "Warning|warn" | tail -8
A="--model resnet18 --synthetic --train-limit 10240 --test-limit 2000 --epochs 1 --batch-size 512 --amp bf16 --backend triton+stepgraph --no-progress"
run() { local t=$(date +%s.%N); TRITON_PLAYGROUND_CACHE=/tmp/tune_$1 TRITON_CACHE_DIR=/tmp/jit_$1 TRITON_PLAYGROUND_VERBOSE=1 timeout ${2:-400} python3 -m bench.resnet $A --out-dir /tmp/o_$1 > /tmp/log_$1.txt 2>&1; echo "rc $? $1: $(python3 -c "import time;print(round(time.time()-$t,1))") s"; grep '^{"epoch' /tmp/log_$1.txt | cut -c1-200
  grep "autotune" /tmp/log_$1.txt | grep tuned | sed -E 's/^\[autotune ([a-z_0-9]+)\].* tuned ([0-9]+) configs in ([0-9.]+)s.*/\1 \2 \3/' \
  | awk '{n[$1]++; c[$1]+=$2; s[$1]+=$3} END {for (k in n) printf "%-24s keys %3d configs %4d seconds %7.1f\n", k, n[k], c[k], s[k]}' | sort -k7 -n -r; }
el "cold, compile workers"; run pool 300
el "cold, in-process compiles"; TRITON_PLAYGROUND_COMPILE_WORKERS=0 run serial 330
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob("/tmp/tune_pool/*.json")):
    g = "/tmp/tune_serial/" + os.path.basename(f)
    a, b = json.load(open(f)), (json.load(open(g)) if os.path.exists(g) else {})
    same = sum(a[k]["best"] == b.get(k, {}).get("best") for k in a)
    print(f"{os.path.basename(f)[:24]:24s} keys {len(a)} same pick {same}")
PY
cp /tmp/log_pool.txt /tmp/log_serial.txt $OUT/
el done
