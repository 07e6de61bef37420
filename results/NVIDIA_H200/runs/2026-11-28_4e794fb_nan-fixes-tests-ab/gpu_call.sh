# one H200 call: old/new timing A/B (3 rounds, alternating), then the GPU tests of the changed files
set -u
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/tests
for r in 1 2 3; do
  for tree in old new; do
    d=$PWD; [ $tree = old ] && d=$PWD/.runs52/old
    TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+$tree timeout 150 python .runs52/ab_probe.py $d $tree-r$r 2>&1 | grep -v Warn
  done
done 2>&1 | tee $OUT/ab.txt
(timeout 300 python -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_cross_entropy.py --shard 1/2 > $OUT/tests/ce1.txt 2>&1 &
 timeout 300 python -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_cross_entropy.py --shard 2/2 > $OUT/tests/ce2.txt 2>&1 &
 for k in 1 2 3; do timeout 300 python -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_fused_mlp.py --shard $k/3 > $OUT/tests/mlp$k.txt 2>&1 & done
 timeout 300 python -m pytest -q -rf --tb=short -p no:logging tests/test_batchnorm.py tests/test_cross_entropy.py tests/test_fused_mlp.py -k "mixed_dtypes or nonfinite or nan_input" > $OUT/tests/new_on_cuda.txt 2>&1 &
 wait)
for f in $OUT/tests/*.txt; do echo "--- $f"; tail -4 $f; done
