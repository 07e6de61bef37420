#!/usr/bin/env bash
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_launcher.py -k "traced_launch" 2>&1 | grep -E "passed|failed|Error|assert" | head
echo "=== pieces: eager against torch.compile after the fix"
timeout 300 python3 s28_pieces.py 2>&1 | grep -vE "^W1|Warning|warn" | tail -20
