export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
timeout 200 python3 fused_bwd_probe.py > $OUT/probe.txt 2>&1   # 2026-11-26_18e6ca8_fused-backward-profile's script, before its two fixes
OUT=$OUT TEST_GROUPS=1 TEST_TIMEOUT=330 bash bench/gpu_run.sh tests
