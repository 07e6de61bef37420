#!/usr/bin/env bash
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
nvidia-smi --query-gpu=name --format=csv,noheader
echo "=== tests $(date +%T)"
OUT=$OUT TEST_GROUPS="1 2" TEST_TIMEOUT=420 bash bench/gpu_run.sh tests 2>&1 | grep -v -i warn | tail -40
echo "=== done $(date +%T)"
