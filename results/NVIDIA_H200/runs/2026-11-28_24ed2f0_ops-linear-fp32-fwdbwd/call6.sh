# session 56, call 6: the new fp32 (ieee) Linear 4096^3 forward + backward case beside the tf32 one, eager calls and
# graph replays, cold tuning cache
export TRITON_PLAYGROUND_CACHE=/tmp/tpcache TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $OUT/gpu.txt
date +%T; timeout 400 python -m bench.ops --op linear_none_fwdbwd --dtype float32 --backends eager,triton,eager+graph,triton+graph --out $OUT/ops > $OUT/ops_log.txt 2>&1; echo "rc=$?"; date +%T
grep -v "^ " $OUT/ops_log.txt | tail -14
