set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_CACHE=$PWD/.cache/autotune
export TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s)
{
for r in 1 2; do
  echo "--- host path, today's tree (round $r)"; timeout 60 python3 .cache/exp/prof_charcnn.py 2>&1 | head -2
  echo "--- host path, a7acc8f (round $r)"; (cd .cache/exp/oldcc && PYTHONPATH=. timeout 60 python3 prof_charcnn.py 2>&1 | head -2)
done
echo "--- train ($(( $(date +%s) - T0 )) s)"
timeout 100 python3 -m bench.char_cnn train --no-progress --out $OUT 2>&1 | grep -v -i warn | tail -1
echo "--- bench ($(( $(date +%s) - T0 )) s)"
timeout 200 python3 -m bench.char_cnn --batches 128,512,2048 --repeat 7 --out $OUT 2>&1 | grep -v -i warn | tail -48
echo "--- tests ($(( $(date +%s) - T0 )) s)"
TRITON_PLAYGROUND_CACHE=/tmp/tc timeout 170 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_conv1d.py tests/test_char_cnn.py -x 2>&1 | tail -4
echo "--- end ($(( $(date +%s) - T0 )) s)"
} > $OUT/log.txt 2>&1
cd $OUT && tar czf extras.tgz *.json 2>/dev/null && rm -f *.json; cd - >/dev/null
cat $OUT/log.txt | grep -v "^\[char_cnn\]" | tail -70
