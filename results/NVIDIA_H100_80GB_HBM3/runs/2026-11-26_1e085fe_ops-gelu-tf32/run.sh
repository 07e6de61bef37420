export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
timeout 200 python3 -m bench.ops --op linear_gelu,linear_relu,linear_none --backends eager,triton,eager+graph,triton+graph --out $OUT
timeout 220 python3 -m bench.ops --op gemm --dtype float32 --backends eager,triton --out $OUT
