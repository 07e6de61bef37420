#!/usr/bin/env bash
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
timeout 100 python3 fwdbwd_probe.py 2>&1 | grep -v -i warn
TEST_GROUPS="1 2" TEST_TIMEOUT=300 OUT=$OUT bash bench/gpu_run.sh tests 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -12
grep -E "^(FAILED|ERROR)" $OUT/pytest.txt | head
