#!/usr/bin/env bash
# Char-CNN training recipes on the 6,600-row split, four at a time on the one GPU, then the bf16/fp16 agreement of each
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
mkdir -p .data/char_cnn $OUT/logs
train() {  # name, flags...
  local n=$1; shift
  timeout 200 python3 -m bench.char_cnn train --weights .data/char_cnn/w_$n.pt --checkpoint /tmp/ck_$n.pt --restart \
    --no-write --no-progress "$@" > $OUT/logs/$n.txt 2>&1
}
echo "=== recipes $(date +%T)"
train base &
train g-3e5-cos40 --lr 3e-5 --schedule cosine --epochs 40 &
train he-1e4-cos40 --init he --lr 1e-4 --schedule cosine --epochs 40 &
train he-3e5-cos40 --init he --lr 3e-5 --schedule cosine --epochs 40 &
wait
echo "=== recipes 2 $(date +%T)"
train base-shift100 --shift 100 &
train he-3e4-cos40 --init he --lr 3e-4 --schedule cosine --epochs 40 &
train g-3e5-cos60-s100 --lr 3e-5 --schedule cosine --epochs 60 --shift 100 &
train he-1e4-cos60-s100-wd --init he --lr 1e-4 --schedule cosine --epochs 60 --shift 100 --weight-decay 0.1 &
train he-3e5-cos60-s100-wd --init he --lr 3e-5 --schedule cosine --epochs 60 --shift 100 --weight-decay 0.1 &
wait
echo "=== eval $(date +%T)"
for f in $OUT/logs/*.txt; do echo "$(basename $f .txt): $(grep -c '^epoch' $f) epochs; best $(grep -o 'accuracy [0-9.]*' $f | sort -k2 -n | tail -1); $(tail -1 $f | cut -c1-60)"; done
timeout 240 python3 cc_eval.py .data/char_cnn/w_*.pt 2>&1 | grep -v -i warn
cp /tmp/cc_eval.json $OUT/
cd $OUT && tar czf logs.tgz logs && rm -rf logs
echo "=== done $(date +%T)"
