set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
for i in 1 2; do
  echo "=== official command, a fresh tuning cache ($i)"
  TRITON_PLAYGROUND_CACHE=/tmp/fresh$i OUT=/tmp/fresh_out$i bash bench/gpu_run.sh resnet-step > /tmp/fresh_log$i.txt 2>&1
  grep -E "^  (compile|triton)[a-z+]* +[0-9]" /tmp/fresh_log$i.txt
done
tar czf $OUT/fresh.tgz -C /tmp fresh_out1 fresh_out2 fresh_log1.txt fresh_log2.txt
