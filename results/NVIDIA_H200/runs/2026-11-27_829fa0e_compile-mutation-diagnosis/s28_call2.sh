#!/usr/bin/env bash
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 500 python3 s28_nan2.py 2>&1 | grep -vE "^W1|Warning|warn" | tail -40
