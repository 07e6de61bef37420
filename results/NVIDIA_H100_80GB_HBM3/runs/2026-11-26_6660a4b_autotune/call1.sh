# Issue 19, GPU call 1 (~9.5 min): the landscape sweep killed once and resumed, and parallel vs serial
# compilation on one fixed set of trials. Run from the repository root: bash .cache/exp/autotune/call1.sh
source .cache/exp/autotune/common.sh
{ nvidia-smi --query-gpu=name,memory.used --format=csv,noheader; nproc; $PY -c "import os; print('affinity', len(os.sched_getaffinity(0)))"; } >> $LOG 2>&1
mkdir -p $R/sweeps

say "1. the landscape sweep, killed after 90 s (timeout -s KILL 90)"
run ${KILL_AFTER:-90} $SWEEP; echo "rc=$? (137: killed as intended)" >> $LOG
say "after the kill"; counts

say "2. parallel compilation (16 processes), fresh Triton cache: 4096^3, 48 configs"
CMP="$PY -m autotune.sweep --kernel gemm --dtype $DTYPE --shapes ${CMP_SHAPE:-4096x4096x4096} --space full --sample 92 --no-tuner-configs --fresh-triton-cache --no-cache --no-progress"
run 120 $CMP --workers 16 --trials $R/sweeps/compile/parallel.csv; echo "rc=$?" >> $LOG
say "3. the same trials compiled one at a time (--serial), fresh Triton cache"
run 240 $CMP --serial --trials $R/sweeps/compile/serial.csv; echo "rc=$?" >> $LOG
$PY - $R ${CMP_SHAPE:-4096x4096x4096} <<'PY' 2>&1 | tee -a $LOG
import sys, pandas as pd
t = pd.read_csv(f"{sys.argv[1]}/autotune_sweep.csv")
t = t[(t["metric"] == "wall_s") & t["params"].str.contains(f'"shapes": "{sys.argv[2]}"')]
print(t[["backend", "value", "params"]].to_string(index=False))
w = t.groupby("backend")["value"].last()
if "serial" in w and len(w) > 1:
    print("SPEEDUP serial / parallel =", round(w["serial"] / w.drop("serial").iloc[0], 2))
PY

say "4. the landscape sweep resumed (--time-budget; again after a device fault)"
while [ $(left) -gt 75 ]; do
  B=$(( $(left) - 45 ))
  run $((B + 40)) $SWEEP --time-budget $B; rc=$?
  echo "rc=$rc" >> $LOG
  [ $rc -eq 0 ] && break
done
counts
$PY -m autotune.landscape --kernel gemm 2>&1 | tee -a $LOG
say "end"
pack_back
tail -c 11000 $LOG
