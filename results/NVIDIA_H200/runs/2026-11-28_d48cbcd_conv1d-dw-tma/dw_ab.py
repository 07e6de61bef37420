"""conv1d's weight gradient through the TMA kernel ("auto" on Hopper for 16-bit) against the pointer kernel, tuned
(kernel time, lead spin 0.3 ms; the partials' sum included), then the whole fwd+bwd call against eager (cuDNN) in
interleaved rounds (eager calls, lead 0), at the Char-CNN training shapes (bf16, batch 128); L2 flushed."""
import statistics

import torch
from torch.nn import functional

from triton_kernels import conv1d
from triton_kernels.runtime import cuda_time_ms


def med(fn, lead, rep=40):
    return statistics.median(cuda_time_ms(fn, warmup=5, rep=rep, lead_ms=lead))


for B, L, C, N, k in ((128, 336, 256, 256, 7), (128, 110, 256, 256, 3)):
    L_out = L - k + 1
    tag = f"B{B} L{L} k{k}"
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, C, L, device="cuda", generator=g).bfloat16().requires_grad_()
    w = (torch.randn(N, C, k, device="cuda", generator=g) / (C * k) ** 0.5).bfloat16().requires_grad_()
    b = torch.randn(N, device="cuda", generator=g).bfloat16().requires_grad_()
    dy = torch.randn(B, N, L_out, device="cuda", generator=g).bfloat16()
    x_cl = x.detach().transpose(1, 2).contiguous().requires_grad_()
    w_p = conv1d.pack_weight(w.detach(), "ieee").detach().requires_grad_()
    dy_cl = dy.transpose(1, 2).contiguous()
    xd = x_cl.detach()
    for path in ("tma", "pointer"):
        fn = lambda: conv1d.conv1d_weight_grad(xd, dy_cl, k, C, "ieee", path=path)
        print(f"{tag} dw {path:8s} kernel+sum {med(fn, 0.3):.4f} ms, call {med(fn, 0.0):.4f} ms", flush=True)

    def eager():
        y = functional.relu(functional.conv1d(x, w, b))
        return torch.autograd.grad(y, (x, w, b), dy)

    def ours():
        y = conv1d.conv1d(x_cl, w_p, b, "relu", precision="ieee")
        return torch.autograd.grad(y, (x_cl, w_p, b), dy_cl)

    got, want = ours(), eager()
    for name, a, r in zip(("dx", "dw", "db"), got, want):
        a = a.transpose(1, 2) if name == "dx" else a
        print(f"{tag} {name} ours vs cuDNN max rel diff {((a.float() - r.float()).abs().max() / r.float().abs().max()).item():.2e}")
    rounds = {"eager": ([], []), "ours": ([], [])}
    for _ in range(5):
        for name, fn in (("eager", eager), ("ours", ours)):
            rounds[name][0].append(med(fn, 0.0))
            rounds[name][1].append(med(fn, 0.3))
    for name, (call, kern) in rounds.items():
        print(f"{tag} fwd+bwd {name:6s} call {' '.join(f'{v:.4f}' for v in call)} ms; kernel "
              f"{' '.join(f'{v:.4f}' for v in kern)} ms", flush=True)
    e_call, o_call = (statistics.median(rounds[n][0]) for n in ("eager", "ours"))
    e_k, o_k = (statistics.median(rounds[n][1]) for n in ("eager", "ours"))
    print(f"{tag} fwd+bwd eager/ours: call {e_call / o_call:.3f}x, kernel {e_k / o_k:.3f}x", flush=True)
