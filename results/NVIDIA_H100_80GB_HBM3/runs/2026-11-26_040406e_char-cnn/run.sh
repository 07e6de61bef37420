#!/usr/bin/env bash
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
echo "=== train $(date +%T)"
timeout 120 python3 -m bench.char_cnn train --no-progress --out $OUT 2>&1 | grep -v -i warn | tail -3
echo "=== bench $(date +%T)"
timeout 430 python3 -m bench.char_cnn --batches 512 --dtype bfloat16,float16 --repeat 7 --out $OUT 2>&1 | grep -v -i warn | tail -45
echo "=== done $(date +%T)"
