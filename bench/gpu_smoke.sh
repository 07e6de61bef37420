#!/usr/bin/env bash
# One GPU session's worth of checks for the foundation: environment, ceilings, GEMM tests and benchmark,
# and a second process over the same shapes to show the persistent autotune cache is hit.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-results/gpu-run}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'
python3 -m bench.roofline --measure --out "$OUT"
python3 -m pytest -m gpu -q tests/test_gemm.py 2>&1 | tail -15
python3 -m bench.gemm --quick --out "$OUT"
TRITON_PLAYGROUND_VERBOSE=1 python3 -m bench.gemm --quick --backends triton --out "$OUT/second" 2>&1 | grep -E "autotune|cache" | head -20
