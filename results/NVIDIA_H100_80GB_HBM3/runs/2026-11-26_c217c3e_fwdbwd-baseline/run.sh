export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
timeout 200 python3 fwdbwd_host_probe.py > $OUT/probe.txt 2>&1
timeout 330 python3 -m bench.ops --op linear_relu_fwdbwd,linear_gelu_fwdbwd,linear_fwdbwd --out $OUT/ops
