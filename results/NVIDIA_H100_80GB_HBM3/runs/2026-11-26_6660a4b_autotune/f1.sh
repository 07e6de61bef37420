# Final hold, call 1: the landscape grown to --sample 160 and killed by a watcher once 400 new trials are
# recorded (a kill mid-timing), then resumed; parallel vs serial compilation on 8 shapes; pack + card;
# and the launch floors (Triton's launcher vs torch's C++ static launcher).
source .cache/exp/autotune/common.sh
export SAMPLE=160
SWEEP="$PY -m autotune.sweep --kernel gemm --dtype bf16 --shapes square,skinny,studies,random:16 --space full --sample 160 --workers 16"
say "0. the landscape so far"; counts
N0=$(( $(wc -l < $R/sweeps/gemm.csv) ))
say "1a. --sample 160, killed (SIGKILL) by a watcher once the table has 400 more lines"
( $SWEEP --no-progress >> $LOG 2>&1 ) & SP=$!
while kill -0 $SP 2>/dev/null && [ $(wc -l < $R/sweeps/gemm.csv) -lt $((N0 + 400)) ]; do sleep 0.05; done
pkill -9 -f "autotune.sweep" ; wait $SP 2>/dev/null; echo "killed at $(( $(wc -l < $R/sweeps/gemm.csv) - N0 )) new lines" | tee -a $LOG
say "after the kill"; counts
say "1b. resumed until done"
run 200 $SWEEP --time-budget 160; echo "rc=$?" >> $LOG
counts
say "2. parallel (16) vs serial compilation, fresh Triton cache: 8 random shapes, --sample 160"
CMPS=1200x2800x1500,2000x1000x700,3000x600x2200,700x3300x900,1500x1500x3000,900x2600x1300,2600x800x1900,1100x1900x2500
CMP="$PY -m autotune.sweep --kernel gemm --dtype bf16 --shapes $CMPS --space full --sample 160 --no-tuner-configs --fresh-triton-cache --no-cache --no-progress"
run 120 $CMP --workers 16 --trials $R/sweeps/compile8/parallel.csv; echo "rc=$?" >> $LOG
run 260 $CMP --serial --trials $R/sweeps/compile8/serial.csv; echo "rc=$?" >> $LOG
$PY - $R $CMPS <<'PY' 2>&1 | tee -a $LOG
import sys, pandas as pd
t = pd.read_csv(f"{sys.argv[1]}/autotune_sweep.csv")
t = t[(t["metric"] == "wall_s") & t["params"].str.contains(f'"shapes": "{sys.argv[2]}"')]
print(t[["backend", "value"]].to_string(index=False))
w = t.groupby("backend")["value"].last()
if "serial" in w and len(w) > 1:
    print("SPEEDUP serial / parallel =", round(w["serial"] / w.drop("serial").iloc[0], 2))
PY
say "3. pack + card"
run 60 $PY -m autotune.landscape --kernel gemm --pack --card; echo "rc=$?" >> $LOG
say "4. launch floors"
timeout 90 $PY .cache/exp/host/floors_static.py 2>&1 | grep -v -i warn | tee -a $LOG
say "end"
pack_back
grep -a -E "^--- |^TRIALS|^killed|^- run|SPEEDUP|parallel-16 |serial |n_args|^rc=" $LOG | tail -60
