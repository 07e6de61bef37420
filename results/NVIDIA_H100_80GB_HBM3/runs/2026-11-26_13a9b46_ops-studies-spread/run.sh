#!/usr/bin/env bash
# the studies' GEMM cases and the 4096 fwd+bwd twice, in two processes (the second reads the tuner's cache)
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
for r in 1 2; do
  echo "=== run $r $(date +%T)"
  timeout 250 python3 -m bench.ops --op char_cnn_fc,mnist_softmax,sgemm_width,resnet18_head,linear_relu_fwdbwd \
    --backends eager,triton,eager+graph,triton+graph --out $OUT/r$r 2>&1 | grep -v -i warn | grep -E "rows to|Error"
done
echo "=== done $(date +%T)"
