set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
MODEL=resnet34 OUT=$OUT/step bash bench/gpu_run.sh resnet-step > /tmp/step_log.txt 2>&1
cp /tmp/step_log.txt $OUT/step/step_log.txt
grep -E "^  [a-z+]+ +[0-9]" /tmp/step_log.txt
