#!/usr/bin/env bash
# Run named stages of the GPU measurements on a GPU box, from the repository root:
#
#   bash bench/gpu_run.sh STAGE [STAGE ...]      (results under $OUT, else results/<device>/)
#
# Stages (rough H100 wall time with a cold autotune cache):
#   roofline   ceilings: copy bandwidth + cuBLAS peak per dtype             (~20 s)
#   gemm       bench.gemm --quick, then a second process to show cache hits (~150 s)
#   ops        bench.ops --quick for the memory-bound families              (~200 s)
#   ops-full   bench.ops at every study shape                              (long: split with --op)
#   sweep      autotune.sweep of the linear+bias+ReLU shape, both layouts    (~60 s)
#   mnist      the MNIST ladder, 10 epochs, tf32x3 dots + uint8 X (needs .data/mnist)  (~60 s)
#   sgemm      SGEMM step times, depths 10..1000 (needs .data/sgemm)         (~300 s)
#   depth      the 200-epoch depth study, fused kernels, one process per model (DEPTH_MODELS="GloNet MLP",
#              DEPTH_DEPTHS="10 1000", DEPTH_TIMEOUT per model; H100: ~5 min per family, ResNet ~10)
#   resnet     fused ResNet-1000 diagnostics (needs .data/sgemm): forward / backward per tiling and dot
#              precision in one run, the exchange-free evaluation forward, and an Nsight Compute warp-stall
#              account of one step at depth 100 (resnet_tilings.json, resnet_stalls.json)     (~150 s)
#   reorder    loss after 100 steps: eager fp32 / fused fp32 vs float64, vs each other, and vs themselves on
#              the same batches with their rows shuffled (resnet_/glonet_reorder.json; needs .data/sgemm)  (~400 s)
#   overhead   bench.overhead: per-call host cost of every module vs torch.nn, and the launch floors (~150 s)
#   profile    bench.profile_call: cProfile of steady eager calls, inference and training (tiny cases, large Linear+ReLU) (~60 s)
#   charcnn    bench.char_cnn train (needs .data/ag_news), then the batch-512 rows (~500 s: a call of its own)
#   resnet-step  ResNet-18 training step, batch 512 bf16, synthetic data, eager / compile / triton, each also
#                replayed from CUDA graphs of the model (+graph) and of the whole forward + loss + backward
#                (+stepgraph) (~250 s from a cold tuning cache; MODEL=resnet34 for ResNet-34; the SGD step: default
#                fused, the Triton SGD on the triton backends and torch's fused=True on the others;
#                SGD=torch-fused|auto|... as bench.resnet --sgd;
#                AUTOGRAD_THREADS=off runs each eager backward on the calling thread, bench.resnet --autograd-threads;
#                HOST_CORES=one times the steps with every thread on one core, bench.resnet --host-cores)
#   resnet-roofline  one NVTX-marked eager ResNet-18 step (batch 512 bf16, synthetic) under Nsight Compute with
#              bench.ncu_roofline's counters plus every sm__ops_path_tensor_src_* counter ncu lists, then its
#              per-kernel roofline (ncu_roofline_resnet18_step.png and the ncu_roofline rows)            (~120 s)
#   multi-gpu  on a box of several GPUs (GPUS="1 2 4", KIND=the machine kind for the rows, CIFAR10=DIR else synthetic):
#              ResNet-18 DDP scaling (eager, triton+graph, triton+stepgraph; 32-8192 per GPU) and its report, then Char-CNN data-parallel
#              inference (triton, compile; 512-8192 per rank; needs .data/ag_news) (~15 min with a warm tuning cache:
#              split it with GPUS over several calls)
#   conv2d     the conv2d GPU tests (two shards in parallel), then bench.ops --op conv2d: the 11 ResNet-18 CIFAR
#              conv shapes at batch 512 bf16 and the fused conv+bias+residual+ReLU, vs cuDNN (eager, compile)
#              (tuning a cold cache compiles ~13 configs per shape; if the stage is cut short, rerun it: the
#              tuned configs and the finished rows are kept)
#   tests      every GPU test, one process per group shard, all in parallel (TEST_TIMEOUT per process); more than
#              one 600 s call holds: run TEST_GROUPS="2 3 4" (the view matrices) and TEST_GROUPS="1 5 6 7 8 9 10 11"
#              in two calls (~540 s each)
# Each stage has its own time limit, so one slow stage cannot eat the rest; the harness saves rows
# after every case, so a stage cut short keeps what it finished. Ship `.data` (and `.git_commit`, made
# with `git rev-parse --short HEAD > .git_commit`) with the tree.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
# provenance: the commit stamped before shipping (a copied tree's own .git can be stale)
if [ -f .git_commit ] && [ -z "${TRITON_PLAYGROUND_COMMIT:-}" ]; then export TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"; fi
OUT=${OUT:-}
out() { if [ -n "$OUT" ]; then echo "--out $OUT${1:+/$1}"; fi; }
# where a stage that writes its own JSON puts it: $OUT, else results/<device>/ (made if missing)
res_dir() {
  local d=${OUT:-results/$(python3 -c "from triton_kernels.runtime import device_slug; print(device_slug())")}
  mkdir -p "$d" && echo "$d"
}
for stage in "$@"; do
  echo "=== stage $stage ($(date +%T))"
  case "$stage" in
    roofline) timeout 120 python3 -m bench.roofline --measure $(out) ;;
    gemm)
      timeout 250 python3 -m bench.gemm --quick --backends "eager,compile,triton,triton#2" $(out)
      TRITON_PLAYGROUND_VERBOSE=1 timeout 60 python3 -m bench.gemm --quick --backends triton --repeat 1 \
        --out /tmp/second 2>&1 | grep -E "^autotune" ;;
    ops) timeout 300 python3 -m bench.ops --quick --op softmax,cross_entropy,layernorm,ln_relu $(out) 2>&1 | grep -v "^\[" ;;
    ops-full) timeout 590 python3 -m bench.ops $(out) 2>&1 | grep -v "^\[" ;;
    sweep) timeout 120 python3 -m autotune.sweep --shapes 4096x1024x8704 --layouts nn,nt --act relu --rep 10 $(out) 2>&1 | head -30 ;;
    mnist) timeout 240 python3 -m bench.mnist --epochs 10 --precision tf32x3 --x-dtype uint8 $(out) 2>&1 | tail -16 ;;
    sgemm) timeout 400 python3 -m bench.sgemm --suite steptime --models GloNet,ResNetMLP \
             --depths 10,24,50,100,200,600,1000 --backends eager,triton,triton+graph --no-progress $(out) 2>&1 | grep -v -i warn | tail -40 ;;
    resnet)
      dir=$(res_dir)
      timeout 300 python3 -m bench.resnet_numerics --only tilings --time-depths 1000 --precisions ieee,tf32x3 \
        --fwd 64/4,128/4,32/4,64/8,1024/16 --bwd 32/4,64/4,32/8,1024/16 --json "$dir/resnet_tilings.json" \
        2>&1 | grep -v -i warn
      timeout 200 ncu --clock-control none -k regex:_resnet_ --launch-skip 2 --launch-count 2 \
        --section WarpStateStats --section SourceCounters -f -o /tmp/resnet100 \
        python3 -m bench.resnet_numerics --only once --time-depths 100 2>&1 | grep "^==PROF==" | tail -3
      python3 -m bench.ncu_stalls /tmp/resnet100.ncu-rep --top 8 --json "$dir/resnet_stalls.json" ;;
    reorder)
      dir=$(res_dir)
      timeout 420 python3 -m bench.resnet_numerics --only trajectories --families ResNetMLP \
        --depths ${REORDER_DEPTHS:-10,24,50,100,200,1000} --json "$dir/resnet_reorder.json" 2>&1 | grep -v -i warn
      timeout 150 python3 -m bench.resnet_numerics --only trajectories --families GloNet \
        --depths 10,100 --json "$dir/glonet_reorder.json" 2>&1 | grep -v -i warn ;;
    depth)
      # the 200-epoch depth study with the fused kernels: one process per model, each with its own limit
      # (DEPTH_TIMEOUT s), so a model cut short costs only itself; then the tables from every finished
      # session (--suite report). Budget ~80 s for the first epoch of each new depth bucket (compile +
      # autotune). The sessions come back as one archive (few files return from the box).
      for fam in ${DEPTH_MODELS:-GloNet MLP ResNetMLP}; do
        for d in ${DEPTH_DEPTHS:-10 24 50 100 200 600 1000}; do
          echo "--- $fam$d ($(date +%T))"
          timeout ${DEPTH_TIMEOUT:-580} python3 -m bench.sgemm --model "$fam$d" --backend triton --graph --epochs 200 \
            --results-dir /tmp/training_results --no-progress --no-write 2>&1 | grep -E "\"(test_mse|train_time_s)\"|Error"
        done
      done
      python3 -m bench.sgemm --suite report --results-dir /tmp/training_results $(out) 2>&1 | tail -30
      tar czf "${OUT:-/tmp}/training_results.tgz" --exclude checkpoint.pt -C /tmp training_results ;;
    overhead) timeout 300 python3 -m bench.overhead $(out) 2>&1 | grep -v -i warn | tail -30 ;;
    profile) timeout 150 python3 -m bench.profile_call --mode inference,training --calls 200 --top 20 \
               --case softmax_128x10,layernorm_64x1024,cross_entropy_128x10,linear_128x784x10,batchnorm_relu_32x64x8x8,linear_relu_4096x8704x1024 \
               > "$(res_dir)/profile_call.txt" 2>&1; grep -A12 "by own time" "$(res_dir)/profile_call.txt" | head -60 ;;
    charcnn)
      # the trained weights (.data/char_cnn/weights.pt), then throughput / ladder / per-layer rows at batch 512
      timeout 300 python3 -m bench.char_cnn train --no-progress $(out) 2>&1 | grep -v -i warn | tail -12
      timeout 280 python3 -m bench.char_cnn --batches 512 $(out) 2>&1 | grep -v -i warn | tail -40 ;;
    multi-gpu)
      # NVLink multicast stays off (the machine's notes say why); CIFAR10=DIR for real data, else synthetic.
      # The triton backend tunes each per-GPU batch on its first step (minutes on a cold cache).
      export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
      ddp=${OUT:-$(res_dir)}
      data=${CIFAR10:+--data $CIFAR10}
      # triton+stepgraph: forward, loss, backward and one all-reduce (a bucket holding every gradient) in one graph
      for backend in eager triton+graph "triton+stepgraph --ddp-bucket-mb 1000"; do
        for g in ${GPUS:-1 2 4}; do
          timeout 400 torchrun --nproc-per-node "$g" -m bench.resnet --model resnet18 ${data:---synthetic} --amp bf16 \
            --backend $backend --scaling 32,128,512,2048,8192 --warmup-iters 200 --bench-steps 30 --out-dir "$ddp" \
            --no-progress ${KIND:+--machine $KIND} 2>&1 | grep -E "^\[scaling\]|rows ->|Error"
        done
      done
      python3 -m bench.resnet --scaling-report "$ddp" --out-dir "$ddp" 2>&1 | grep -v -i warn | tail -40
      for backend in triton compile; do
        for g in ${GPUS:-1 2 4}; do
          timeout 300 torchrun --nproc-per-node "$g" -m bench.char_cnn_dp --batch 512,2048,8192 --backend $backend \
            ${KIND:+--machine $KIND} $(out) 2>&1 | grep -E "inputs_per_s|speedup|predictions_match|Error"
        done
      done ;;
    conv2d)
      TEST_GROUPS=11 TEST_TIMEOUT=${TEST_TIMEOUT:-280} bash "$0" tests  # test_conv2d.py's group, two shards
      timeout 560 python3 -m bench.ops --op conv2d $(out) 2>&1 | grep -v "^\[" ;;
    resnet-step)
      timeout 590 python3 -m bench.resnet --model "${MODEL:-resnet18}" --synthetic --batch-size 512 --amp bf16 --sgd "${SGD:-fused}" \
        --backend eager,eager+graph,eager+stepgraph,compile,compile+graph,compile+stepgraph,triton,triton+graph,triton+stepgraph \
        --bench-steps 50 --bench-rounds 5 --warmup-iters 150 \
        --autograd-threads "${AUTOGRAD_THREADS:-on}" --host-cores "${HOST_CORES:-all}" \
        --out-dir "${OUT:-/tmp/resnet_step}" 2>&1 | grep -v -i warn | tail -30 ;;
    resnet-roofline)
      dir=$(res_dir)
      tensor=$(ncu --query-metrics --chip gh100 2>/dev/null | grep -oE '^sm__ops_path_tensor_src_[a-z0-9_]+' \
               | grep -v sparsity | sed 's/$/.sum/' | paste -sd, -)
      metrics=$(python3 -m bench.ncu_roofline --list-metrics)
      timeout 300 ncu --profile-from-start off --metrics "$metrics${tensor:+,$tensor}" --csv --page raw \
        python3 -m bench.resnet --model resnet18 --synthetic --batch-size 512 --amp bf16 --backend eager \
        --profile-one-step --warmup-iters 20 --no-progress > /tmp/ncu_step_resnet18_eager.csv
      gzip -c /tmp/ncu_step_resnet18_eager.csv > "$dir/ncu_step_resnet18_eager.csv.gz"
      python3 -m bench.ncu_roofline /tmp/ncu_step_resnet18_eager.csv --calibrate @last:137438953472 \
        --label resnet18-step-eager --png "$dir/ncu_roofline_resnet18_step.png" --out "$dir" | head -30 ;;
    tests)
      # one process per group shard, in parallel (compiling the kernels' many specialisations is what takes
      # the time; each of the two calls in the header runs 14 on the 16 cores); TEST_GROUPS="1 3" runs a subset;
      # "files|N" splits a group into N shards (pytest --shard K/N). Every log goes to one file ($OUT/pytest.txt,
      # or /tmp/pytest.txt): few files come back from the box
      groups=("tests/test_gemm.py tests/test_gemm_eager.py tests/test_gemm_backward.py tests/test_gemm_gluon.py tests/test_launcher.py tests/test_overhead.py|4" "tests/test_gemm_views.py|6"
              "tests/test_softmax.py tests/test_cross_entropy.py|5" "tests/test_layernorm.py|3"
              "tests/test_fused_mlp.py|3" "tests/test_adam.py tests/test_deep_mlp.py tests/test_sgemm_data.py|2"
              "tests/test_softmax_regression.py tests/test_mnist_data.py|1" "tests/test_conv1d.py tests/test_char_cnn.py|2"
              "tests/test_batchnorm.py tests/test_pool_head.py tests/test_resnet.py tests/test_foreach_cast.py tests/test_sgd.py|1" "tests/test_runtime.py tests/test_graphs.py tests/test_compile_pool.py tests/test_harness.py tests/test_autotune_sweep.py tests/test_cost_model.py|1"
              "tests/test_conv2d.py|2")
      sel=${TEST_GROUPS:-$(seq -s " " 1 ${#groups[@]})}
      logs=()
      for i in $sel; do
        files=${groups[$((i-1))]%|*}; n=${groups[$((i-1))]#*|}
        for k in $(seq 1 "$n"); do
          timeout ${TEST_TIMEOUT:-400} python3 -m pytest -m gpu -q -rf --tb=line -p no:logging --shard "$k/$n" $files \
            > "/tmp/pytest-$i-$k.txt" 2>&1 &
          logs+=("$i-$k")
        done
      done
      wait
      log=${OUT:-/tmp}/pytest.txt
      for l in "${logs[@]}"; do echo "--- group ${l%-*} shard ${l#*-}: ${groups[$((${l%-*}-1))]}"; grep -vE "Warning|warn|^DEBUG|^$" "/tmp/pytest-$l.txt"; done > "$log"
      for l in "${logs[@]}"; do echo "--- group $l"; grep -E "^(FAILED|ERROR)|passed|failed|Error" "/tmp/pytest-$l.txt" | tail -14; done ;;
    *) echo "unknown stage $stage" ;;
  esac
done
