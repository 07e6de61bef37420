#!/usr/bin/env bash
# session 53, call 3: the GPU groups whose code the second audit and its review changed after they last ran
# (3: cross-entropy's target check; 6: Adam's checks; 7: softmax regression's perm check; 9: pool head, batch norm)
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
date +%T > $OUT/times.txt
G9="tests/test_batchnorm.py tests/test_pool_head.py tests/test_resnet.py tests/test_foreach_cast.py tests/test_sgd.py"
for k in 1 2 3; do
  timeout 480 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging --shard "$k/3" $G9 > /tmp/g9-$k.txt 2>&1 &
done
TEST_GROUPS="3 6 7" TEST_TIMEOUT=480 OUT=/tmp bash bench/gpu_run.sh tests > /tmp/g367.txt 2>&1
wait
date +%T >> $OUT/times.txt
{ cat /tmp/pytest.txt; for k in 1 2 3; do echo "--- group 9 shard $k/3: $G9"; grep -vE "Warning|warn|^$" /tmp/g9-$k.txt; done; } > $OUT/pytest.txt
cat /tmp/g367.txt; for k in 1 2 3; do echo "--- group 9-$k"; tail -3 /tmp/g9-$k.txt; done
