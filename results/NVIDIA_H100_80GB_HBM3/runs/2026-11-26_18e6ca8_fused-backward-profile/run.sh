export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
timeout 260 python3 fused_bwd_probe.py > $OUT/probe.txt 2>&1
