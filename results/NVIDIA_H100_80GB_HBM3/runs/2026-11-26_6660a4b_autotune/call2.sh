# Issue 19, GPU call 2 (~9.5 min): finish the landscape, pack it with its data card, evaluate the cost model on
# held-out shapes (ridge, GloNet, MLP vs random and the tuner's list), then the pruned tuner vs cuBLAS and
# torch.compile(max-autotune) on 3 shapes in no sweep, and 2 workers sharing one GPU.
# Before it: extract call 1's results.tgz at the repository root (the trial table travels as an untracked file).
source .cache/exp/autotune/common.sh
nvidia-smi --query-gpu=name --format=csv,noheader >> $LOG 2>&1
say "0. the landscape so far"; counts

say "1. the landscape sweep resumed until done (at most ~200 s here)"
B=200
run $((B + 40)) $SWEEP --time-budget $B; echo "rc=$?" >> $LOG
counts

say "2. pack + data card"
run 60 $PY -m autotune.landscape --kernel gemm --pack --card; echo "rc=$?" >> $LOG

say "3. cost model on held-out shapes (4 folds over shapes, budget 10 %)"
run $(( $(left) > 380 ? 200 : $(left) - 180 )) $PY -m autotune.cost_model --kernel gemm --dtype ${DTYPE/bf16/bfloat16} \
    --learners ridge,glonet,mlp --budget 0.1 --folds 4 --save-model .cache/exp/autotune/gemm-model.pt
echo "rc=$?" >> $LOG

say "4. the pruned tuner vs the tuner's list, cuBLAS and max-autotune on held-out shapes (random:3:99)"
if [ -f .cache/exp/autotune/gemm-model.pt ]; then
  run $(( $(left) - 60 )) $PY -m autotune.cost_model --compare --model .cache/exp/autotune/gemm-model.pt \
      --shapes random:3:99 --sample 80 --top-k 0.1
  echo "rc=$?" >> $LOG
fi

if [ $(left) -gt 70 ]; then
  say "5. two workers share one GPU (--gpus 2), a separate small table"
  run $(( $(left) - 15 )) $PY -m autotune.sweep --kernel gemm --dtype $DTYPE --shapes ${GPUS2_SHAPES:-1024x1024x1024,512x2048x768} \
      --space full --sample 12 --no-tuner-configs --gpus 2 --workers 8 --no-cache --no-progress \
      --trials $R/sweeps/gpus2/gemm.csv
  echo "rc=$?" >> $LOG
fi
say "end"
pack_back
tail -c 11000 $LOG
