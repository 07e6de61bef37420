set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
(timeout 200 python3 .cache/exp/charcnn_grads2.py > $OUT/charcnn_grads.txt 2>&1; echo "diag rc $?" >> $OUT/charcnn_grads.txt) &
TEST_GROUPS="2 3 4" TEST_TIMEOUT=${TT:-500} bash bench/gpu_run.sh tests > $OUT/tests_summary.txt 2>&1
wait
cat $OUT/charcnn_grads.txt; cat $OUT/tests_summary.txt | tail -60
