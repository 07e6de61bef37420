export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
timeout 240 python3 fused_bwd_probe.py > $OUT/probe.txt 2>&1   # 2026-11-26_18e6ca8_fused-backward-profile's script without its profiler section
timeout 300 python3 -m bench.ops --op linear_relu_fwdbwd,linear_gelu_fwdbwd,linear_fwdbwd --backends eager,triton,eager+graph,triton+graph --out $OUT/ops
