# Issue 19, GPU call 3, only if call 2 left something: the sweep to the end, pack + card, the cost model, the
# comparison (each step skipped when its output exists). Extract call 2's results.tgz at the repository root first.
source .cache/exp/autotune/common.sh
say "0. the landscape so far"; counts
run 260 $SWEEP --time-budget 220; echo "rc=$?" >> $LOG
counts
run 60 $PY -m autotune.landscape --kernel gemm --pack --card
if [ ! -f $R/cost_model-gemm.csv ] || [ ! -f .cache/exp/autotune/gemm-model.pt ]; then
  run $(( $(left) - 120 )) $PY -m autotune.cost_model --kernel gemm --dtype ${DTYPE/bf16/bfloat16} --learners ridge,glonet,mlp \
      --budget 0.1 --folds 4 --save-model .cache/exp/autotune/gemm-model.pt; echo "rc=$?" >> $LOG
fi
if [ -f .cache/exp/autotune/gemm-model.pt ] && [ $(left) -gt 90 ]; then
  run $(( $(left) - 20 )) $PY -m autotune.cost_model --compare --model .cache/exp/autotune/gemm-model.pt \
      --shapes random:3:99 --sample 80 --top-k 0.1; echo "rc=$?" >> $LOG
fi
say "end"
pack_back
tail -c 11000 $LOG
