# Per-parameter gradient errors of one Char-CNN training step: ours (triton backend, fp32) and eager fp32
# (cuDNN tf32 convs, the test's reference) against a float64 eager step on the same batch.
import torch
from torch.nn import functional
from models.char_cnn import CharCNN
from tests.test_char_cnn import _random_indices, LENGTH
torch.manual_seed(0)
m = CharCNN(dropout=0.0, backend="triton").cuda()
ref = CharCNN(dropout=0.0).cuda(); ref.load_state_dict(m.state_dict())
r64 = CharCNN(dropout=0.0).cuda().double(); r64.load_state_dict(m.state_dict())
x = _random_indices(16, LENGTH, device="cuda"); y = torch.randint(0, 4, (16,), device="cuda")
functional.cross_entropy(m(x), y).backward()
functional.cross_entropy(ref(x), y).backward()
torch.backends.cudnn.allow_tf32 = False
functional.cross_entropy(r64(x), y).backward()
def rel(a, b): return float((a.double() - b).norm() / b.norm())
print(f"{'param':28s} {'ours vs fp64':>14s} {'eager vs fp64':>14s} {'ours vs eager':>14s}")
for (n, p), q, r in zip(m.named_parameters(), ref.parameters(), r64.parameters()):
    print(f"{n:28s} {rel(p.grad, r.grad):14.3e} {rel(q.grad, r.grad):14.3e} {rel(p.grad, q.grad.double()):14.3e}")
with torch.no_grad():
    print("logits ours vs fp64", rel(m(x), r64(x)), " eager vs fp64", rel(ref(x), r64(x)))
