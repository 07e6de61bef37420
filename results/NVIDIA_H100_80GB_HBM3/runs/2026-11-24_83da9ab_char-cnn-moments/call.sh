set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_CACHE=$PWD/.cache/autotune
export TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s)
for k in 1 2; do
  TRITON_PLAYGROUND_CACHE=/tmp/testcache timeout 330 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging --shard $k/2 tests/test_conv1d.py tests/test_char_cnn.py > $OUT/pytest-$k.txt 2>&1 &
done
{
best=""; bestacc=-1
for r in "adam 0.0001 0.05" "adam 0.0003 0.02" "sgd 0.01 0.02" "adam 0.0001 0.02"; do
  set -- $r
  acc=$(timeout 80 python3 -m bench.char_cnn train --no-progress --no-write --epochs 12 --optimizer $1 --lr $2 --init-std $3 \
        --weights /tmp/w.pt --checkpoint /tmp/c-$1-$2-$3.pt 2>&1 | tee -a $OUT/recipes.txt | grep -oE "held-out accuracy [0-9.]+" | grep -oE "[0-9.]+$")
  echo "recipe $r: 12-epoch held-out accuracy ${acc:-none} ($(( $(date +%s) - T0 )) s)"
  if [ -n "$acc" ] && python3 -c "import sys; sys.exit(0 if $acc > $bestacc else 1)"; then best="$r"; bestacc=$acc; fi
done
wait
echo "best: $best ($bestacc)"
set -- $best
timeout 120 python3 -m bench.char_cnn train --no-progress --optimizer $1 --lr $2 --init-std $3 --out $OUT 2>&1 | grep -v -i warn | tail -8
echo "--- bench ($(( $(date +%s) - T0 )) s)"
timeout $(( 560 - ($(date +%s) - T0) )) python3 -m bench.char_cnn --batches 128,512,2048 --out $OUT 2>&1 | grep -v -i warn | tail -50
echo "--- end ($(( $(date +%s) - T0 )) s)"
} > $OUT/log.txt 2>&1
tar czf $OUT/autotune_cache.tgz .cache/autotune
cd $OUT && cat pytest-1.txt pytest-2.txt > pytest.txt && rm pytest-1.txt pytest-2.txt && tar czf extras.tgz *.json recipes.txt 2>/dev/null && rm -f *.json recipes.txt; cd - >/dev/null
grep -E "passed|failed|FAILED|Error" $OUT/pytest.txt | tail -8
cat $OUT/log.txt | tail -75
