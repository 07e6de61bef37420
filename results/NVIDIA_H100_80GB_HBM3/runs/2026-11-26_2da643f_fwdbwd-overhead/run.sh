#!/usr/bin/env bash
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
echo "=== probe $(date +%T)"
timeout 150 python3 fwdbwd_probe.py 2>&1 | grep -v -i warn
OUT=$OUT bash bench/gpu_run.sh overhead 2>&1 | grep -v -i warn | tail -32
