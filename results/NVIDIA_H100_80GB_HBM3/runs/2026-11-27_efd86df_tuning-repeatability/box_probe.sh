set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
common="--model resnet18 --synthetic --batch-size 512 --amp bf16 --sgd fused --bench-steps 50 --bench-rounds 3 --warmup-iters 60 --no-progress"
echo "=== second process, the box's tuning cache"
python3 -m bench.resnet $common --backend compile+stepgraph,triton+stepgraph --out-dir /tmp/p2 2>&1 | grep -E "stepgraph +[0-9]"
echo "=== a fresh tuning cache"
TRITON_PLAYGROUND_CACHE=/tmp/cache2 python3 -m bench.resnet $common --backend triton+stepgraph --out-dir /tmp/p3 2>&1 | grep -E "stepgraph +[0-9]"
echo "=== the box's cache again"
python3 -m bench.resnet $common --backend triton+stepgraph --out-dir /tmp/p4 2>&1 | grep -E "stepgraph +[0-9]"
mkdir -p /tmp/caches/box /tmp/caches/fresh
cp ~/.cache/triton_playground/autotune/batchnorm_* /tmp/caches/box/ 2>/dev/null; cp /tmp/cache2/batchnorm_* /tmp/caches/fresh/ 2>/dev/null
tar czf $OUT/caches.tgz -C /tmp caches p2 p3 p4
