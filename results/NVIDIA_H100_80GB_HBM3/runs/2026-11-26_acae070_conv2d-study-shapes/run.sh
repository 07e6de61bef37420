#!/usr/bin/env bash
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
echo "=== conv2d tests $(date +%T)"
for k in 1 2; do timeout 200 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging --shard "$k/2" tests/test_conv2d.py > /tmp/pc-$k.txt 2>&1 & done; wait
for k in 1 2; do grep -E "^(FAILED|ERROR)|passed|failed" /tmp/pc-$k.txt | tail -5; done; cat /tmp/pc-*.txt | grep -v "^W1126" > $OUT/pytest.txt
echo "=== conv2d bench $(date +%T)"
timeout 150 python3 -m bench.ops --op conv2d_fwd --backends eager,triton --out $OUT 2>&1 | grep -v "^\[" | grep -E "conv2d_fwd|wrote" | cut -c1-10,40-200
echo "=== overhead linear $(date +%T)"
timeout 90 python3 -m bench.overhead --op linear --out $OUT 2>&1 | grep -v -i warn | tail -6
echo "=== study shapes $(date +%T)"
timeout 200 python3 -m bench.ops --op mnist_,sgemm_,char_cnn_,resnet18_head --backends eager,compile,triton,eager+graph,triton+graph --out $OUT 2>&1 \
  | grep -v "^\[" | grep -v -i warn | tail -3
