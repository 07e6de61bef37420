#!/usr/bin/env bash
# session 27: the transposed conv2d kernel for ResNet's 512-channel 4x4 layers. GPU tests (conv2d's ResNet
# shapes, tf32 / stats / compile, every-conv-on-Triton ResNet, the transposed cases; compile_pool); then the
# ResNet-18 training step (batch 512, bf16, synthetic, one CUDA graph per step): eager, compile and Triton
# in one process, then Triton before / after the change in alternating processes.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRITON_PLAYGROUND_COMMIT="$(cat .git_commit)+copy"
T0=$(date +%s); el() { echo "=== [$(( $(date +%s) - T0 )) s] $*"; }
el tests
timeout 240 python3 -m pytest -m gpu -q -rf --tb=short -p no:logging tests/test_conv2d.py -k "resnet or tf32 or transposed" 2>&1 | grep -vE "Warning|warn" | tail -6
S="--model resnet18 --synthetic --batch-size 512 --amp bf16 --bench-steps 50 --bench-rounds 3 --warmup-iters 100 --no-progress"
el "after: eager, compile, triton (one graph per step)"
timeout 200 python3 s27_ab.py after $S --backend eager,compile+stepgraph,triton+stepgraph --out-dir $OUT/ab_all 2>&1 | grep -E "ms  \(p20|speedup|Error" | head -8
for i in 1 2; do for v in before after; do
  el "$v $i"
  timeout 100 python3 s27_ab.py $v $S --backend triton+stepgraph --out-dir /tmp/ab_$v$i 2>&1 | grep -E "ms  \(p20|Error" | head -3
done; done
tar czf $OUT/ab.tgz -C /tmp $(cd /tmp && ls -d ab_*) 2>/dev/null
el done
