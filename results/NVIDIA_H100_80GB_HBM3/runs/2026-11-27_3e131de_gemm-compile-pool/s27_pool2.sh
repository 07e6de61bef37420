#!/usr/bin/env bash
# session 27: the compile pool on the final code. GPU tests of compile_pool; then the GEMM tuning of
# `bench.gemm --quick --backends triton` (bf16 / fp16 / tf32 / fp32 acceptance shapes, the TMA kernels) from empty
# tuning and JIT caches, with the compile workers and with TRITON_PLAYGROUND_COMPILE_WORKERS=0.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
el tests
timeout 120 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_compile_pool.py 2>&1 | grep -vE "Warning|warn" | tail -5
run() { local t=$(date +%s.%N); TRITON_PLAYGROUND_CACHE=/tmp/tune_$1 TRITON_CACHE_DIR=/tmp/jit_$1 TRITON_PLAYGROUND_VERBOSE=1 timeout 240 python3 -m bench.gemm --quick --backends triton --repeat 1 --out /tmp/o_$1 > /tmp/gemm_$1.txt 2>&1; echo "rc $? $1: $(python3 -c "import time;print(round(time.time()-$t,1))") s"
  grep "autotune" /tmp/gemm_$1.txt | grep tuned | sed -E 's/^\[autotune ([a-z_0-9]+)\].* tuned ([0-9]+) configs in ([0-9.]+)s.*/\1 \2 \3/' \
  | awk '{n[$1]++; c[$1]+=$2; s[$1]+=$3} END {for (k in n) printf "%-24s keys %3d configs %4d seconds %7.1f\n", k, n[k], c[k], s[k]}'
  python3 - "$1" <<'PY'
import sys, pandas as pd, glob
f = glob.glob(f"/tmp/o_{sys.argv[1]}/*.csv")
df = pd.concat([pd.read_csv(x) for x in f])
t = df[df.metric == "time_ms"]
print(t[["case", "params", "dtype", "value", "error_vs_fp64", "status"]].to_string(index=False, max_colwidth=60))
PY
}
el "gemm cold, compile workers"; run pool
el "gemm cold, in-process"; TRITON_PLAYGROUND_COMPILE_WORKERS=0 run serial
cp /tmp/gemm_pool.txt /tmp/gemm_serial.txt $OUT/
el done
