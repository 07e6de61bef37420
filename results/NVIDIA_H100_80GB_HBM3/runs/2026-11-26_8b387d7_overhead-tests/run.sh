export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
timeout 220 python3 -m bench.overhead --out $OUT
OUT=$OUT TEST_GROUPS="1 3 4 8 9" TEST_TIMEOUT=330 bash bench/gpu_run.sh tests
