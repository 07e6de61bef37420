"""The Gluon tf32 kernel for a row-major A and an N-major B (triton_kernels/gemm_gluon.py), forced through gemm's
``config`` on a Hopper GPU: every epilogue, ragged edges, K rounded up to an even number of steps, several tiles
per program, the gradients of a call that saves Z, the eager fast path's fixed launch, and the kernel on a
row-major copy of an M-major A; against float64. On any machine: a config the kernel cannot run is a ValueError
before any launch."""
import pytest
import torch

from autotune import spaces
from triton_kernels import gemm
from triton_kernels.testing import assert_close

from .conftest import DEVICE, GPU
from .test_gemm import REF_ACT

NMAJOR = spaces.GEMM_TF32_NMAJOR_CONFIGS
COPY_A = spaces.GEMM_TF32_NMAJOR_COPY_A_CONFIGS
HOPPER = GPU and torch.cuda.get_device_capability()[0] == 9


def test_a_config_it_cannot_run_is_a_value_error():
    a, b = torch.randn(64, 32, device=DEVICE), torch.randn(32, 64, device=DEVICE)
    for precision, operand in (("ieee", b), ("tf32x3", b), ("tf32", b.t().contiguous().t())):  # K-major B last
        for config in (NMAJOR[0], COPY_A[0]):
            with pytest.raises(ValueError, match="Gluon tf32 kernel"):
                gemm.gemm(a, operand, precision=precision, config=config)
    with pytest.raises(ValueError, match="Gluon tf32 kernel"):  # A's copy would have 36-byte rows
        gemm.gemm(torch.randn(9, 64, device=DEVICE).t(), torch.randn(9, 64, device=DEVICE), precision="tf32",
                  config=COPY_A[0])
    if not HOPPER:  # the interpreter, or a GPU other than Hopper
        with pytest.raises(ValueError, match="compute capability 9"):
            gemm.gemm(a, b, precision="tf32", config=NMAJOR[0])


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the Gluon kernel runs on Hopper (compute capability 9.x)")
@pytest.mark.parametrize("config", NMAJOR, ids=[f"{c.kwargs['BLOCK_M']}x128-{c.num_stages}stages" for c in NMAJOR])
@pytest.mark.parametrize("M,N,K,act,has_bias,has_res,grad", [
    (256, 128, 64, "none", False, False, False),        # one tile, two k steps
    (300, 200, 100, "relu", True, False, False),        # every edge partly out of range; K: 4 steps, one past K
    (1000, 516, 96, "gelu", True, True, True),          # 3 k steps rounded up to 4; Z saved for the backward
    (2048, 1024, 4096, "gelu_tanh", False, True, False),  # several tiles per program
])
def test_gpu_forced_config(config, M, N, K, act, has_bias, has_res, grad):
    mk = lambda *s: torch.randn(*s, device="cuda", requires_grad=grad)  # noqa: E731
    a, b = mk(M, K), mk(K, N)
    bias = mk(N) if has_bias else None
    res = mk(M, N) if has_res else None
    y = gemm.gemm(a, b, bias, res, act, "tf32", config=config)
    leaves = [t.detach().double().requires_grad_() if t is not None else None for t in (a, b, bias, res)]
    z = leaves[0] @ leaves[1] + (leaves[2] if has_bias else 0)
    ref = REF_ACT[act](z) + (leaves[3] if has_res else 0)
    # the tf32 allowance of test_gemm (Triton truncates the operands to tf32, cuBLAS rounds)
    assert_close(y, ref, torch.float32, tf32=True, name="C", scale=3.0)
    again = gemm.gemm(a, b, bias, res, act, "tf32", config=config)  # the signature's fixed launch
    assert torch.equal(y, again)
    if grad:
        g = torch.randn_like(y)
        y.backward(g)
        ref.backward(g.double())
        for name, t, r in zip(("dA", "dB", "dbias", "dresidual"), (a, b, bias, res), leaves):
            if t is not None:
                assert_close(t.grad, r.grad, torch.float32, tf32=True, name=name, scale=3.0)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="the Gluon kernel runs on Hopper (compute capability 9.x)")
@pytest.mark.parametrize("config", COPY_A, ids=[f"{c.kwargs['BLOCK_M']}x128-{c.num_stages}stages" for c in COPY_A])
@pytest.mark.parametrize("M,N,K", [(300, 200, 100), (1024, 512, 2048)])
def test_gpu_forced_config_on_a_copy_of_a(config, M, N, K):
    """A M-major (a transposed view, as dY^T in a Linear's weight gradient), B N-major: the kernel reads a
    row-major copy of A; the copy is made on every call (the fixed launch's too), so a changed A is seen."""
    a = torch.randn(K, M, device="cuda").t()
    b = torch.randn(K, N, device="cuda")
    y = gemm.gemm(a, b, precision="tf32", config=config)
    assert_close(y, a.double() @ b.double(), torch.float32, tf32=True, name="C", scale=3.0)
    a.mul_(-1)
    again = gemm.gemm(a, b, precision="tf32", config=config)
    assert torch.equal(again, -y)


def test_offered_only_where_triton_has_its_gluon_api():
    """gemm_gluon.AVAILABLE: Triton 3.6 or later (3.5 compiles none of the kernel, 3.4 lacks warpgroup_mma);
    elsewhere no plan offers the kernel, even on Hopper, and the tuner's flags leave its candidates out."""
    import triton

    from triton_kernels import gemm_gluon

    version = tuple(int(part) for part in triton.__version__.split(".")[:2])
    assert gemm_gluon.AVAILABLE == (version >= (3, 6))
    a, b = torch.empty(256, 128, device="meta"), torch.empty(128, 256, device="meta")
    assert gemm.nmajor_eligible(a, b, "tf32", False, hopper=True) == gemm_gluon.AVAILABLE
    assert not gemm.nmajor_eligible(a, b, "ieee", False, hopper=True)
