export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
timeout 570 python3 -m bench.ops --op gemm,linear --backends eager,triton,eager+graph,triton+graph --out $OUT
