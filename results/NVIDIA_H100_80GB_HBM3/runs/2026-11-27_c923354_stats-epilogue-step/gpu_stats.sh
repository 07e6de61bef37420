# one call: the GPU tests that run the statistics-epilogue path, then the ResNet step
export PYTHONPATH=.
timeout 330 python -m pytest -m gpu -q -x -p no:cacheprovider tests/test_resnet.py tests/test_conv2d.py \
  -k "resnet18_triton_matches or model_compiles or step_graph_equals or gpu_resnet18_triton_convs or tf32_stats" 2>&1 \
  | grep -vE "warn|Warn|^$" | tail -15 | tee $OUT/pytest.txt
bash bench/gpu_run.sh resnet-step 2>&1 | tail -30 | tee $OUT/step.txt
