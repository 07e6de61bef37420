#!/usr/bin/env bash
# session 53, call 1: GPU group 8 and the audit's new CPU tests on cuda, then the Char-CNN batch-512 rows and the
# SGEMM-1000 step times (nothing else running while they time)
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
mkdir -p .data && cp -r .runs53/data/sgemm .runs53/data/ag_news .data/
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
date +%T > $OUT/times.txt
TEST_GROUPS="8" TEST_TIMEOUT=220 OUT=$OUT bash bench/gpu_run.sh tests > $OUT/tests-group-8.txt 2>&1 &
( timeout 220 python3 -m pytest -q -rf --tb=short -p no:logging tests/test_conv1d.py -k "gather and not gpu"
  timeout 100 python3 -m pytest -q -rf --tb=short -p no:logging tests/test_pool_head.py -k "no_channels"
  timeout 100 python3 -m pytest -q -rf --tb=short -p no:logging tests/test_softmax_regression.py -k "perm"
  timeout 150 python3 -m pytest -q -rf --tb=short -p no:logging tests/test_adam.py -m "not gpu"
) > $OUT/tests-cpu-on-cuda.txt 2>&1 &
wait
date +%T >> $OUT/times.txt
timeout 200 python3 -m bench.char_cnn --batches 512 --out $OUT/charcnn > $OUT/charcnn.txt 2>&1
date +%T >> $OUT/times.txt
timeout 200 python3 -m bench.sgemm --suite steptime --models GloNet,ResNetMLP --depths 1000 \
  --backends eager,triton,triton+graph --no-progress --out $OUT/sgemm > $OUT/sgemm.txt 2>&1
date +%T >> $OUT/times.txt
tail -5 $OUT/tests-group-8.txt $OUT/tests-cpu-on-cuda.txt; tail -30 $OUT/charcnn.txt; tail -12 $OUT/sgemm.txt
