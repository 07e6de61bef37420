export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
python3 -c "import inspect, triton.backends.nvidia.driver as d; print(inspect.getsource(d.CudaLauncher))" > $OUT/triton_launcher_src.txt   # and the C launch source
timeout 200 python3 -m bench.ops --op char_cnn_fc1_linear_relu_fwdbwd,char_cnn_fc2_linear_relu_fwdbwd --backends eager,triton,eager+graph,triton+graph --out /tmp/ops5 | tee log.txt
