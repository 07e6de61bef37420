"""triton_kernels/graphs.py: the captures' own cuBLAS workspaces."""
import pytest
import torch

from triton_kernels import graphs


def test_cublas_workspaces_dropped_without_cuda_is_a_no_op():
    graphs.drop_cublas_workspaces()
    with graphs.own_cublas_workspaces():
        pass


@pytest.mark.gpu
def test_gpu_captured_gemm_owns_its_cublas_workspace():
    """A graph captured on the stream its warm-up ran on keeps replaying right after cuBLAS's workspaces are
    freed and their memory handed out again (what torch.compile's CUDA graphs do between replays)."""
    a = torch.randn(512, 512, device="cuda")
    b = torch.randn(512, 512, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(2):
            a @ b  # the warm-up makes this stream's cuBLAS workspace outside any graph's pool
    graph = torch.cuda.CUDAGraph()
    with graphs.own_cublas_workspaces(), torch.cuda.graph(graph, stream=stream):
        out = a @ b
    graphs.drop_cublas_workspaces()
    torch.cuda.empty_cache()
    poison = torch.full((1 << 26,), 7, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert bool((poison == 7).all())
    torch.testing.assert_close(out, a @ b)
