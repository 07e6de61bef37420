"""Probe: the bug own_cublas_workspaces prevents. A GEMM captured on the stream its warm-up ran on, without
dropping cuBLAS's workspaces around the capture; then the workspaces are freed (as torch.compile's graphs do),
the cache emptied and the memory handed out again; replays. Exit 0 if the replays left the new tensor alone."""
import sys
import torch

fix = sys.argv[1] == "fix"
from triton_kernels import runtime
a = torch.randn(512, 512, device="cuda")
b = torch.randn(512, 512, device="cuda")
stream = torch.cuda.Stream()
with torch.cuda.stream(stream):
    for _ in range(2):
        a @ b
graph = torch.cuda.CUDAGraph()
if fix:
    with runtime.own_cublas_workspaces(), torch.cuda.graph(graph, stream=stream):
        out = a @ b
else:
    with torch.cuda.graph(graph, stream=stream):
        out = a @ b
torch._C._cuda_clearCublasWorkspaces()
torch.cuda.empty_cache()
poison = torch.full((1 << 26,), 7, dtype=torch.uint8, device="cuda")
for _ in range(3):
    graph.replay()
torch.cuda.synchronize()
ok = bool((poison == 7).all())
print(f"{sys.argv[1]}: poison intact {ok}, changed bytes {int((poison != 7).sum())}")
sys.exit(0 if ok else 1)
