# GPU call: the swapped-product sweep, its GPU tests, the tf32 op rows, the fc1 chain A/B
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
echo "=== sweep $(date +%T)"
timeout 210 python s23_swap_sweep.py 2>&1 | grep -v Warn | cut -c1-260
echo "=== tests $(date +%T)"
timeout 120 python -m pytest -q tests/test_gemm.py -k "swapped or tf32" -p no:cacheprovider 2>&1 | grep -E "passed|failed|FAILED|Error" | tail -6
echo "=== ops tf32 $(date +%T)"
timeout 150 python -m bench.ops --op gemm --dtype float32 --backends eager,triton,eager+graph,triton+graph --out $OUT/ops_fp32 2>&1 | grep -v Warn | tail -30
echo "=== chain default $(date +%T)"
timeout 50 python -m bench.ops --op char_cnn_fc1_linear_relu_fwdbwd --backends eager,triton,eager+graph,triton+graph --out $OUT/chain_default 2>&1 | grep -v Warn | tail -8
echo "=== chain lowered $(date +%T)"
timeout 50 python -c "
import runpy, sys
import triton_kernels.gemm_eager as ge
ge.CHAIN_MIN_FLOPS = 2**33
sys.argv = ['bench.ops', '--op', 'char_cnn_fc1_linear_relu_fwdbwd', '--backends', 'eager,triton,eager+graph,triton+graph', '--out', sys.argv[1]]
runpy.run_module('bench.ops', run_name='__main__')" $OUT/chain_lowered 2>&1 | grep -v Warn | tail -8
echo "=== end $(date +%T)"
