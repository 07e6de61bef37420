set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_CACHE=$PWD/.cache/autotune
export TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
ROOT=$PWD
ln -sfn $ROOT/.data .cache/exp/old/.data
{
for round in 1 2 3; do
  echo "--- mnist HEAD round $round ($(date +%T))"
  timeout 90 python3 -m bench.mnist --epochs 10 --precision tf32x3 --x-dtype uint8 --variants triton+persistent,triton+epoch-graph --out $OUT/head$round 2>&1 | grep -E "^triton|Error"
  echo "--- mnist aa08153 round $round ($(date +%T))"
  (cd .cache/exp/old && TRITON_PLAYGROUND_COMMIT=aa08153+copy timeout 90 python3 -m bench.mnist --epochs 10 --precision tf32x3 --x-dtype uint8 --variants triton+persistent,triton+epoch-graph --out $OUT/old$round 2>&1 | grep -E "^triton|Error")
done
echo "--- sgemm ResNetMLP1000 ($(date +%T))"
timeout 300 python3 -m bench.sgemm --suite steptime --models ResNetMLP,GloNet --depths 1000 --backends eager,triton,triton+graph --no-progress --out $OUT 2>&1 | grep -v -i warn | tail -12
echo "--- end ($(date +%T))"
} > $OUT/log.txt 2>&1
cd $OUT && tar czf extras.tgz head* old* *.json 2>/dev/null && rm -rf head* old* *.json; cd $ROOT
cat $OUT/log.txt
