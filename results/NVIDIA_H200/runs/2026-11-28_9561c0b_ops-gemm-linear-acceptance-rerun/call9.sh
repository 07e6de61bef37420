# session 56, call 9: issue 22's acceptance cases once more at the session's last code, on a fresh box (cold tuning
# cache); the tf32 Linear cases (not acceptance items) left out for device time
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $OUT/gpu.txt
date +%T; timeout 265 python -m bench.ops --op gemm,linear_relu,linear_gelu,char_cnn,mnist,sgemm,resnet18 --backends eager,triton,eager+graph,triton+graph --out $OUT/ops > $OUT/ops_log.txt 2>&1; echo "rc=$?"; date +%T
grep -E "autotune|wrote" $OUT/ops_log.txt
