#!/usr/bin/env bash
# 4-GPU call 2: the +stepgraph DDP ranks-agree tests; ResNet-18 DDP (synthetic, bf16), one box: triton+stepgraph
# with one bucket (all-reduce after the backward, inside the graph) and with DDP's default buckets, triton+graph.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
KIND=nvidia-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)-x$(nvidia-smi -L | wc -l)
echo "KIND $KIND"
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
lim() { local left=$(( ${BUDGET:-575} - ($(date +%s) - T0) )); [ $left -lt $1 ] && echo $(( left > 5 ? left : 5 )) || echo $1; }
mkdir -p ~/.cache/triton_playground && cp -r ../../.data/autotune_cache/autotune ~/.cache/triton_playground/
el tests
timeout $(lim 200) python -m pytest -q -m gpu tests/test_resnet.py -k "ddp_graphed and stepgraph" -p no:cacheprovider -rA 2>&1 | grep -E "PASS|FAIL|Error|passed|failed" | tail -8 | tee $OUT/pytest.txt
mkdir -p $OUT/ddp
S="--model resnet18 --synthetic --amp bf16 --warmup-iters 200 --bench-steps 30 --machine $KIND --out-dir $OUT/ddp --no-progress --scaling 128,512"
run() { local g=$1 t=$2; shift 2; el "$g GPU $*"
  timeout $(lim $t) torchrun --nproc-per-node $g --master-port 2950$g -m bench.resnet $S "$@" 2>&1 \
    | grep -E "^\[scaling\]|Error|error" | head -6; }
run 1 90 --backend triton+stepgraph
run 4 70 --backend triton+stepgraph --ddp-bucket-mb 1000
run 1 50 --backend triton+graph
run 4 60 --backend triton+graph
run 2 60 --backend triton+stepgraph --ddp-bucket-mb 1000
run 4 60 --backend triton+stepgraph
python -m bench.resnet --scaling-report $OUT/ddp --out-dir $OUT/ddp 2>&1 | grep -v -i warn | grep -v loss_ | tail -30
tar czf $OUT/ddp.tgz -C $OUT ddp && rm -rf $OUT/ddp
el done
