# session 56, call 8: the ceilings measured anew, with the fp64 units on fp32 data (fp32_on_fp64)
export TRITON_PLAYGROUND_COMMIT=$(cat .git_commit)+copy PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $OUT/gpu.txt
date +%T; timeout 200 python -m bench.roofline --measure --out $OUT/roof > $OUT/roofline_log.txt 2>&1; echo "rc=$?"; date +%T
tail -3 $OUT/roofline_log.txt; cat $OUT/roof/ceilings.json
