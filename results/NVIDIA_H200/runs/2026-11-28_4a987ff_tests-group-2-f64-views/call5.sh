# session 56, call 5: the GEMM view/stride matrix on the GPU (group 2), with its new runs whose forward is forced onto
# the fp64-accumulating kernel, and the tuned fp32 "ieee" cases (which may now pick it)
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $OUT/gpu.txt
date +%T; TEST_GROUPS="2" TEST_TIMEOUT=510 OUT=$OUT bash bench/gpu_run.sh tests > $OUT/tests.txt 2>&1; date +%T
tail -20 $OUT/tests.txt
