"""GEMM cases: Triton fused GEMM vs torch.matmul (cuBLAS) / eager linear+bias+act / torch.compile."""
from __future__ import annotations

import torch
from torch.nn import functional

from triton_kernels import gemm

from ..harness import Case

ACT = {"none": lambda z: z, "relu": torch.relu, "gelu": functional.gelu,
       "gelu_tanh": lambda z: functional.gelu(z, approximate="tanh")}


def _set_tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def matmul_case(M, N, K, dtype, tf32=False, name="gemm", precision=None) -> Case:
    """C = A @ B: our kernel vs torch.matmul (cuBLAS). ``precision="tf32x3"``: ours with three tf32
    products against cuBLAS's fp32 (tf32 off), both near fp32 accuracy."""
    prec = precision or ("tf32" if tf32 else "ieee")

    def inputs(seed, device):
        _set_tf32(tf32)
        g = torch.Generator(device=device).manual_seed(seed)
        return (torch.randn(M, K, device=device, dtype=dtype, generator=g),
                torch.randn(K, N, device=device, dtype=dtype, generator=g))

    es = torch.tensor([], dtype=dtype).element_size()
    return Case(
        suite="ops", name=name, params={"M": M, "N": N, "K": K, "precision": prec}, dtype=dtype,
        inputs=inputs,
        fns={"eager": torch.matmul, "triton": lambda a, b: gemm.gemm(a, b, precision=prec)},
        reference=lambda a, b: a.double() @ b.double(),
        flops=2.0 * M * N * K, bytes=float(es * (M * K + K * N + M * N)), tf32=tf32,
    )


def linear_case(M, K, N, dtype, act="relu", backward=False, tf32=False, name=None, autocast=False,
                residual=False) -> Case:
    """y = act(x @ W^T + b): eager functional.linear + act (cuBLASLt addmm + an elementwise kernel) vs ours.
    ``name``: the case's name (default ``linear_<act>``); ``_fwdbwd`` is appended for the backward.
    ``autocast``: x, W and b in fp32 (master weights) and both backends called under torch.autocast to
    ``dtype``, as a mixed-precision training step calls them (the gradients come back in fp32).
    ``residual``: y = act(x @ W^T + b) + r, a residual block's output (eager adds r in a third kernel; ours in
    the GEMM's epilogue); the backward also returns r's gradient."""
    prec = "tf32" if tf32 else "ieee"
    f = ACT[act]
    held = torch.float32 if autocast else dtype  # the inputs' dtype
    n_leaves = 4 if residual else 3  # x, W, b (, r): the arguments that get gradients; dy follows them

    def inputs(seed, device):
        _set_tf32(tf32)
        g = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(M, K, device=device, dtype=held, generator=g)
        w = torch.randn(N, K, device=device, dtype=held, generator=g) / K ** 0.5
        b = torch.randn(N, device=device, dtype=held, generator=g)
        leaves = (x, w, b) + ((torch.randn(M, N, device=device, dtype=dtype, generator=g),) if residual else ())
        if backward:
            for t in leaves:
                t.requires_grad_()
            return (*leaves, torch.randn(M, N, device=device, dtype=dtype, generator=g))
        return leaves

    def forward_of(linear):
        def fn(*args):
            leaves = args[:n_leaves]
            with torch.autocast(leaves[0].device.type, dtype=dtype, enabled=autocast):
                y = linear(*leaves)
            if not backward:
                return y
            return (y, *torch.autograd.grad(y, leaves, args[-1]))
        return fn

    if residual:
        eager = forward_of(lambda x, w, b, r: f(functional.linear(x, w, b)) + r)
        triton_fn = forward_of(lambda x, w, b, r: gemm.linear(x, w, b, activation=act, residual=r, precision=prec))
    else:
        eager = forward_of(lambda x, w, b: f(functional.linear(x, w, b)))
        triton_fn = forward_of(lambda x, w, b: gemm.linear(x, w, b, activation=act, precision=prec))

    def reference(*args):
        leaves = args[:n_leaves]
        computed = [t.detach().to(dtype) for t in leaves]  # the operands as computed (autocast's casts)
        x, w, b = computed[:3]
        leaves64 = [t.double().requires_grad_(backward) for t in computed]
        with torch.enable_grad():
            z = functional.linear(*leaves64[:3])
            if act == "relu" and backward:
                # at the kink, take the side the low-precision pre-activation took (a flip there moves a
                # whole gradient entry and says nothing about the kernel)
                y = z * (functional.linear(x, w, b) > 0).double()
            else:
                y = f(z)
            if residual:
                y = y + leaves64[3]
            if not backward:
                return y.detach()
            return (y.detach(), *torch.autograd.grad(y, leaves64, args[-1].double()))

    es = torch.tensor([], dtype=dtype).element_size()
    io = M * K + N * K + N + M * N
    base = name or f"linear_{act}{'_residual' if residual else ''}{'_autocast' if autocast else ''}"
    return Case(
        suite="ops", name=base + ("_fwdbwd" if backward else ""),
        params={"M": M, "K": K, "N": N, "precision": prec}, dtype=dtype, inputs=inputs,
        fns={"eager": eager, "triton": triton_fn}, reference=reference,
        flops=2.0 * M * N * K * (3 if backward else 1),
        # the residual adds one read of r (its gradient is dy itself)
        bytes=float(es * (io * (3 if backward else 1) + residual * M * N)), tf32=tf32, backward=backward,
    )


def cases(quick: bool = False, shapes=None, dtypes=None, tiny=None) -> list[Case]:
    from . import is_tiny, keep_dtypes, of_rank, shape_dtypes

    out: list[Case] = []
    if shapes:  # exactly the shapes asked for, as plain matmuls: MxNxK, or N for N^3
        for s in of_rank(shapes, 1, 3):
            M, N, K = s * 3 if len(s) == 1 else s
            for dt in shape_dtypes(dtypes):
                out.append(matmul_case(M, N, K, dt))
        return out
    if is_tiny(tiny):
        return keep_dtypes([matmul_case(33, 17, 40, torch.float32), matmul_case(64, 64, 64, torch.float16),
                            linear_case(37, 29, 23, torch.float32, "relu"),
                            linear_case(16, 24, 8, torch.float32, "gelu", True),
                            linear_case(16, 24, 8, torch.float32, "gelu_tanh", True),
                            linear_case(16, 24, 8, torch.float16, "relu", True, autocast=True),
                            linear_case(16, 24, 8, torch.float32, "relu", True, residual=True)], dtypes)
    bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32
    # the acceptance shapes
    out += [matmul_case(8192, 8192, 8192, bf16), linear_case(4096, 8704, 1024, bf16, "relu"),
            matmul_case(4096, 4096, 4096, f16), matmul_case(4096, 4096, 4096, f32, tf32=True),
            matmul_case(4096, 4096, 4096, bf16)]
    if quick:
        return out
    out += [matmul_case(4096, 4096, 4096, f32), matmul_case(4096, 4096, 4096, f32, precision="tf32x3"),
            linear_case(4096, 8704, 1024, bf16, "gelu"),
            linear_case(4096, 8704, 1024, bf16, "gelu_tanh"),
            linear_case(4096, 8704, 1024, bf16, "relu", backward=True),
            linear_case(4096, 8704, 1024, bf16, "gelu", backward=True), matmul_case(8192, 8192, 8192, f32),
            # the residual epilogue (a residual block's output), forward and forward + backward
            linear_case(4096, 8704, 1024, bf16, "relu", residual=True),
            linear_case(4096, 8704, 1024, bf16, "relu", backward=True, residual=True),
            # a mixed-precision training step's Linear: fp32 master weights, bf16 autocast
            linear_case(4096, 8704, 1024, bf16, "relu", backward=True, autocast=True),
            # tf32 with B K-major (nn.Linear's weight): the matmul cases above read an N-major B
            linear_case(4096, 4096, 4096, f32, "none", tf32=True),
            linear_case(8192, 8192, 8192, f32, "none", tf32=True),
            # and its backward, whose dX = dY @ W reads W N-major (gemm_gluon's kernel on Hopper)
            linear_case(4096, 4096, 4096, f32, "none", backward=True, tf32=True),
            # fp32 (ieee) forward + backward: three GEMMs on transposed views (on Hopper the fp64-accumulating tiles)
            linear_case(4096, 4096, 4096, f32, "none", backward=True)]
    for n in (256, 512, 1024, 2048, 8192):  # square sweep (latency vs size)
        out.append(matmul_case(n, n, n, bf16))
    for n in (1024, 2048, 8192):
        out.append(matmul_case(n, n, n, f32, tf32=True))
    # the studies' Linear shapes, forward and forward + backward (a training step's)
    for backward in (False, True):
        out += [linear_case(128, 784, 10, f32, "none", backward, name="mnist_softmax_regression_linear"),
                linear_case(1024, 16, 16, f32, "relu", backward, name="sgemm_width16_linear_relu"),
                linear_case(1024, 64, 64, f32, "relu", backward, name="sgemm_width64_linear_relu"),
                linear_case(512, 8704, 1024, bf16, "relu", backward, name="char_cnn_fc1_linear_relu"),
                linear_case(512, 1024, 1024, bf16, "relu", backward, name="char_cnn_fc2_linear_relu"),
                linear_case(512, 1024, 4, bf16, "none", backward, name="char_cnn_fc3_linear")]
    out.append(linear_case(512, 512, 10, f32, "none", tf32=True, name="resnet18_head_linear"))
    return out
