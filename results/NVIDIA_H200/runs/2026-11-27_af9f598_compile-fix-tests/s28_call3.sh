#!/usr/bin/env bash
# the torch.compile GPU tests after the mutation-analysis fix, every file, in parallel shards
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
run() { timeout 330 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging "$@" > /tmp/p-$RANDOM.txt 2>&1; }
timeout 330 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_batchnorm.py tests/test_resnet.py -k "compile" > /tmp/pA.txt 2>&1 &
timeout 330 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_conv2d.py -k "resnet18_triton_convs or compile" > /tmp/pB.txt 2>&1 &
timeout 330 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_gemm.py tests/test_gemm_eager.py tests/test_fused_mlp.py -k "compile" > /tmp/pC.txt 2>&1 &
timeout 330 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_layernorm.py tests/test_softmax.py tests/test_cross_entropy.py tests/test_conv1d.py tests/test_char_cnn.py -k "compile" > /tmp/pD.txt 2>&1 &
timeout 330 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_softmax_regression.py tests/test_graphs.py tests/test_adam.py tests/test_foreach_cast.py tests/test_pool_head.py tests/test_gemm_backward.py -k "compile" > /tmp/pE.txt 2>&1 &
wait
for f in A B C D E; do echo "--- $f"; grep -vE "^W1|Warning|warn" /tmp/p$f.txt | grep -E "^(FAILED|ERROR)|passed|failed|error|Error|assert" | head -12; done
mkdir -p $OUT; cat /tmp/p?.txt | grep -vE "^W1" > $OUT/pytest.txt
