#!/usr/bin/env bash
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
echo "=== diag"; timeout 330 python3 s28_nan.py 2>&1 | grep -vE "^W1|Warning|warn" | tail -40
echo "=== group 11"; TEST_GROUPS=11 timeout 230 bash bench/gpu_run.sh tests 2>&1 | tail -25
