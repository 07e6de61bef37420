# session 56, call 2: the GEMM GPU tests (group 1, and the fp64-accumulating kernel's views), then issue 22's fp32 cases
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $OUT/gpu.txt
(timeout 280 python -m pytest -q -m gpu tests/test_gemm_views.py -k f64 -p no:cacheprovider > $OUT/pytest-views-f64.txt 2>&1; echo "rc=$?" >> $OUT/pytest-views-f64.txt) &
TEST_GROUPS="1" TEST_TIMEOUT=280 OUT=$OUT bash bench/gpu_run.sh tests > $OUT/tests.txt 2>&1
wait
tail -3 $OUT/pytest-views-f64.txt; tail -12 $OUT/tests.txt
date +%T; timeout 200 python -m bench.ops --op gemm --shapes 4096,8192 --dtype float32 --backends eager,triton --out $OUT/fp32 > $OUT/fp32_log.txt 2>&1; echo "rc=$?"
date +%T; grep -v "^ " $OUT/fp32_log.txt | tail -25
