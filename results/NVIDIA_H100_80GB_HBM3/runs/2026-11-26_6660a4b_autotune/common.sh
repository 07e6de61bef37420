# sourced by callN.sh (run from the repository root): environment, the landscape's arguments, helpers
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TQDM_MININTERVAL=15
export TRITON_PLAYGROUND_CACHE=$PWD/.cache/autotune-sweep   # the runtime cache the sweep writes its best configs to
[ -f .git_commit ] && export TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s)
DEADLINE=$((T0 + 560))                      # every step ends before this (the call's limit is 600 s)
LOG=$OUT/log.txt
PY=${PY:-python3}
R=${R:-results/$($PY -c "from bench.results import device_slug; print(device_slug())" 2>/dev/null || echo NVIDIA_H100_80GB_HBM3)}
# the landscape: 38 shapes (square 6, skinny 8, studies 8, random 16), 80 configs of the full space + the tuner's list
# per shape (the shape rules leave 20..151 per shape): 3050 trials planned
# (DTYPE / SHAPES / SAMPLE / CMP_SHAPE / KILL_AFTER / PY overridable for a CPU dry run of the scripts)
DTYPE=${DTYPE:-bf16}
SWEEP="$PY -m autotune.sweep --kernel gemm --dtype $DTYPE --shapes ${SHAPES:-square,skinny,studies,random:16} --space full --sample ${SAMPLE:-80} --workers 16"
now() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE - $(date +%s) )); }
say() { echo "--- $* ($(now) s)" | tee -a $LOG; }
run() {  # run <timeout s> <command...>: output appended to the log (tqdm's \r turned into lines)
  local t=$1; shift
  [ $t -lt 5 ] && t=5   # (timeout 0 would mean no limit)
  timeout -s KILL $t "$@" 2>&1 | tr '\r' '\n' | grep --line-buffered -v -i "warn" | awk '!/trial\/s|s\/trial/ || (++n % 20 == 0) {print; fflush()}' >> $LOG
  return ${PIPESTATUS[0]}
}
counts() {  # rows, distinct ids, duplicates, statuses of the landscape table
  $PY - "$R/sweeps/gemm.csv" <<'PY' 2>&1 | tee -a $LOG
import sys
from autotune import store
df = store.read_trials(sys.argv[1])
print(f"TRIALS rows={len(df)} distinct={df['trial_id'].nunique()} duplicates={int(df['trial_id'].duplicated().sum())} "
      f"shapes={df['shape'].nunique()} statuses={df['status'].value_counts().to_dict()}" if len(df) else "TRIALS rows=0")
PY
}
pack_back() {  # everything the next call and the commit need, as paths from the repository root
  tar czf $OUT/results.tgz $R/sweeps $R/autotune_sweep.* $R/cost_model* .cache/autotune-sweep .cache/exp/autotune/*.pt 2>/dev/null
  ls -la $OUT >> $LOG
}
