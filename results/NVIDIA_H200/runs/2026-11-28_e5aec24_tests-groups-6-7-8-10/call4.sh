# session 56, call 4: the GPU test groups that use the GEMM family or the tuner besides group 1 (6: Adam, deep MLP,
# SGEMM data; 7: softmax regression, MNIST; 8: conv1d, Char-CNN; 10: runtime, graphs, harness, sweeps, cost model)
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $OUT/gpu.txt
date +%T; TEST_GROUPS="6 7 8 10" TEST_TIMEOUT=450 OUT=$OUT bash bench/gpu_run.sh tests > $OUT/tests.txt 2>&1; date +%T
tail -20 $OUT/tests.txt
