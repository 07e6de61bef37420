# Per-parameter gradient errors of one Char-CNN training step (the GPU test's case): ours (triton backend,
# fp32, first candidate configs as in tests), eager fp32 with cuDNN tf32 (the test's reference) and eager
# fp32 without tf32, each against a float64 eager step on the same batch.
import os
os.environ.setdefault("TRITON_PLAYGROUND_AUTOTUNE", "0")
import torch
from torch.nn import functional
from models.char_cnn import CharCNN
from tests.test_char_cnn import _random_indices, LENGTH
torch.manual_seed(0)
m = CharCNN(dropout=0.0, backend="triton").cuda()
ref = CharCNN(dropout=0.0).cuda(); ref.load_state_dict(m.state_dict())
ref32 = CharCNN(dropout=0.0).cuda(); ref32.load_state_dict(m.state_dict())
r64 = CharCNN(dropout=0.0).cuda().double(); r64.load_state_dict(m.state_dict())
x = _random_indices(16, LENGTH, device="cuda"); y = torch.randint(0, 4, (16,), device="cuda")
print("cudnn.allow_tf32", torch.backends.cudnn.allow_tf32, "matmul.allow_tf32", torch.backends.cuda.matmul.allow_tf32)
functional.cross_entropy(m(x), y).backward()
functional.cross_entropy(ref(x), y).backward()
torch.backends.cudnn.allow_tf32 = False
functional.cross_entropy(ref32(x), y).backward()
functional.cross_entropy(r64(x), y).backward()
def rel(a, b): return float((a.double() - b).norm() / b.norm())
def mx(a, b): return float((a.double() - b).abs().max() / b.abs().max())
print(f"{'param':24s} {'ours/64':>10s} {'eagtf32/64':>10s} {'eag32/64':>10s} {'ours/eagtf32':>12s} {'max ours/64':>11s} {'max eag/64':>10s}")
for (n, p), q, q32, r in zip(m.named_parameters(), ref.parameters(), ref32.parameters(), r64.parameters()):
    print(f"{n:24s} {rel(p.grad, r.grad):10.2e} {rel(q.grad, r.grad):10.2e} {rel(q32.grad, r.grad):10.2e} "
          f"{rel(p.grad, q.grad.double()):12.2e} {mx(p.grad, r.grad):11.2e} {mx(q.grad, r.grad):10.2e}")
with torch.no_grad():
    print("logits ours vs fp64", rel(m(x), r64(x)), " eager-tf32 vs fp64", rel(ref(x), r64(x)))
