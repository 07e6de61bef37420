# GPU call: the fc1 backward chain A/B (ABAB, one tuning shared through the tuner's disk cache), then the
# studies' GEMM rows on the final code
export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
B=eager,triton,eager+graph,triton+graph
CASE=char_cnn_fc1_linear_relu_fwdbwd
echo "=== tune $(date +%T)"
timeout 150 python -m bench.ops --op $CASE --backends triton --repeat 1 --out /tmp/warm 2>&1 | grep -v Warn | tail -2
lowered() {
  python -c "
import runpy, sys
import triton_kernels.gemm_eager as ge
ge.CHAIN_MIN_FLOPS = 2**33
sys.argv = ['bench.ops', '--op', '$CASE', '--backends', '$B', '--out', sys.argv[1]]
runpy.run_module('bench.ops', run_name='__main__')" "$1"
}
for i in 1 2; do
  echo "=== default $i $(date +%T)"
  timeout 60 python -m bench.ops --op $CASE --backends $B --out $OUT/chain_default$i 2>&1 | grep -E "^char_cnn"
  echo "=== lowered $i $(date +%T)"
  timeout 60 bash -c "$(declare -f lowered); CASE=$CASE B=$B lowered $OUT/chain_lowered$i" 2>&1 | grep -E "^char_cnn"
done
echo "=== studies $(date +%T)"
timeout 330 python -m bench.ops --op char_cnn,sgemm,mnist_softmax_regression_linear --backends $B --out $OUT/studies 2>&1 | grep -v Warn | grep -E "^ *[a-z_]+ .*(eager|triton)" | cut -c1-200
echo "=== end $(date +%T)"
