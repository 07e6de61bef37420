#!/usr/bin/env bash
# the every-conv-on-Triton ResNet GPU test, with its whole traceback, on this tree and on the commit before the
# transposed conv (../clean_prev)
export PYTHONPATH=. PYTHONUNBUFFERED=1
for d in . ../clean_prev; do
  echo "=== $d $(cat $d/.git_commit)"
  (cd $d && PYTHONPATH=. timeout 200 python3 -m pytest -m gpu -q -x --tb=long -p no:logging tests/test_conv2d.py -k "resnet18_triton_convs" 2>&1 \
    | grep -vE "^W1127|Warning" | grep -E "Error|error|assert|Failed|passed|failed|line [0-9]+, in|^E " | head -40)
done
