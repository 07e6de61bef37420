#!/usr/bin/env bash
# call 5 (issue 22): launch-path cost of Linear, the GEMM family's op-suite cases (eager call + graph)
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
echo "=== overhead $(date +%T)"
timeout 120 python3 -m bench.overhead --op linear --out $OUT 2>&1 | grep -v -i warn | tail -14
echo "=== ops linear $(date +%T)"
timeout 290 python3 -m bench.ops --op linear --backends eager,compile,triton,eager+graph,triton+graph --out $OUT 2>&1 \
  | grep -v "^\[" | grep -v -i warn | tail -60
echo "=== ops gemm fp32 $(date +%T)"
timeout 150 python3 -m bench.ops --op gemm --dtype float32 --backends eager,triton --out $OUT 2>&1 | grep -v "^\[" | grep -v -i warn | tail -20
