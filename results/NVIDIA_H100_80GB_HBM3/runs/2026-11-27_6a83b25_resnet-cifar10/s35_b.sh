#!/usr/bin/env bash
# session 35 call B (same warm box): CIFAR-10 part B, every sha256 checked; ResNet-18 with the README's command
# (60 epochs, sgd-nesterov lr 0.4, 388 warm-up steps, label smoothing 0.1, bf16, batch 512, torch SGD), seed 0,
# one process per backend: triton+stepgraph, compile+stepgraph.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
cp .data/cifar10_b/{train_3.webp,train_4.webp,test.webp,labels.npz} ~/cifar10/ \
  && (cd ~/cifar10 && sha256sum -c -) < .data/cifar10_b/SHA256SUMS || { echo "CIFAR-10 incomplete"; exit 1; }
ls ~/.cache/triton_playground/autotune | wc -l
R="--model resnet18 --data $HOME/cifar10 --batch-size 512 --amp bf16 --label-smoothing 0.1 --epochs 60 --optimizer sgd-nesterov --lr 0.4 --warmup 388 --seed 0 --sgd torch --no-progress"
for b in ${BACKENDS:-triton+stepgraph compile+stepgraph}; do
  el "train $b"
  d=$OUT/r18_${b//+/_}; mkdir -p $d
  timeout ${RUN_TIMEOUT:-200} python3 -m bench.resnet $R --backend $b --out-dir $d > $d/log.txt 2>&1
  echo "rc $?"; grep -v -i warn $d/log.txt | grep -E "test_acc|rows|Error" | awk 'NR<=2 || /wall_to_target/ || /Error/' ; tail -2 $d/log.txt
  rm -f $d/*.pt
done
cd $OUT && tar czf cifar_runs.tgz r18_* && rm -rf r18_*
el done
