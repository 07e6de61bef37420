#!/usr/bin/env bash
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_batchnorm.py tests/test_resnet.py tests/test_launcher.py -k "compile or traced_launch" > /tmp/pA.txt 2>&1 &
timeout 200 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_conv2d.py -k "resnet18_triton_convs or compile" > /tmp/pB.txt 2>&1 &
timeout 200 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_cross_entropy.py tests/test_gemm.py -k "compile" > /tmp/pC.txt 2>&1 &
wait
for f in A B C; do echo "--- $f"; grep -vE "^W1|Warning|warn" /tmp/p$f.txt | grep -E "^(FAILED|ERROR)|passed|failed|^E " | head -8; done
