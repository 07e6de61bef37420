"""What a sweep needs to know about each tuned kernel: its shape, its inputs, its float64 reference, one call
with a given config (through the launcher's ``config=``), its work (FLOPs or bytes), and the tuning key
and tuner under which the runtime caches its choice.

    adapter = ADAPTERS["gemm"]
    shape = adapter.parse_shape("4096x1024x8704")             # {"M": 4096, "N": 1024, "K": 8704}
    plan = adapter.plan(shape, torch.bfloat16, variant, device) # space context, tuning key (no allocation)
    problem = adapter.problem(shape, torch.bfloat16, variant, device, seed=0)
    out = problem.call(config); problem.error(out)              # relative error vs float64

The space context of a GEMM (whether the TMA kernel and the re-laid-out copy of B can run) is derived from
the operands' layouts exactly as ``gemm.gemm_forward`` derives it, on meta tensors of the same strides.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

import triton_kernels  # noqa: F401  (the interpreter switch before triton)
from triton_kernels.runtime import INTERPRET, Config, bucket, next_power_of_2
from triton_kernels.testing import rel_err, tolerance

from . import spaces


@dataclasses.dataclass
class Plan:
    """What a trial needs before any input exists: the space context, the runtime's tuning key and tuner."""

    ctx: dict
    tune_key: tuple | None  # the kernel module's NamedTuple key
    tuner: str | None


@dataclasses.dataclass
class Problem:
    """Inputs on the device, and how to run, check and count one call."""

    call: Callable[[Config], Any]
    error: Callable[[Any], float]
    tolerance: float
    flops: float = 0.0
    bytes: float = 0.0


def _parse(text: str, dims: tuple[str, ...]) -> dict:
    try:
        values = [int(x) for x in str(text).lower().split("x")]
    except ValueError:
        values = []
    if len(values) != len(dims) or min(values, default=0) < 1:
        raise ValueError(f"shape must be {'x'.join(dims)} (positive integers), got {text!r}")
    return dict(zip(dims, values))


@dataclasses.dataclass(frozen=True)
class Adapter:
    kernel: str
    dims: tuple[str, ...]
    variant: dict                 # variant knob -> default value (recorded per trial)
    choices: dict                 # variant knob -> allowed values
    plan: Callable[..., Plan]
    problem: Callable[..., Problem]
    metric: str = "gbps"          # "tflops" (FLOP-bound) or "gbps" (memory-bound)
    module: str = ""              # the kernel's module (its import registers the runtime tuners)

    def parse_shape(self, text: str) -> dict:
        return _parse(text, self.dims)

    def shape_text(self, shape: dict) -> str:
        return "x".join(str(shape[d]) for d in self.dims)

    def check_variant(self, variant: dict) -> dict:
        out = dict(self.variant)
        for k, v in variant.items():
            if k not in self.variant:
                raise ValueError(f"{self.kernel} has no variant knob {k!r}; knobs: {sorted(self.variant)}")
            if v not in self.choices[k]:
                raise ValueError(f"{self.kernel} {k} must be one of {self.choices[k]}, got {v!r}")
            out[k] = v
        return out


def device_rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """testing.rel_err computed where the tensors are (a GPU's outputs are not copied to the host):
    ||out - ref|| / ||ref|| in float64; a non-finite output against a finite reference gives inf."""
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: out {tuple(out.shape)} vs ref {tuple(ref.shape)}")
    if out.device.type == "cpu":
        return rel_err(out, ref)
    out64, ref64 = out.detach().double(), ref.detach().double()
    if not bool(torch.isfinite(out64).all()) and bool(torch.isfinite(ref64).all()):
        return float("inf")
    den = float(ref64.norm())
    num = float((out64 - ref64).norm())
    return num if den == 0.0 else num / den


class Lazy:
    """A value computed at its first use (references: a capture pass needs only the inputs)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make, self.value, self.done = make, None, False

    def __call__(self) -> Any:
        if not self.done:
            self.value, self.done = self.make(), True
        return self.value


def _generator(seed: int, device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def _randn(shape, dtype, device, g) -> torch.Tensor:
    return torch.randn(shape, device=device, dtype=torch.float32, generator=g).to(dtype)


# ----------------------------------------------------------------------------------------------------
# GEMM
# ----------------------------------------------------------------------------------------------------
def tma_device(device: torch.device | str) -> bool:
    """Whether a device runs the GEMM's TMA kernel: CUDA of compute capability 9 or more, never the interpreter."""
    device = torch.device(device)
    return not INTERPRET and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def gemm_layout_flags(a: torch.Tensor, b: torch.Tensor, precision: str, on_tma_device: bool) -> dict:
    """The flags gemm_forward derives from A and B: the precision it runs, unit column strides, whether
    the TMA kernel can run, whether a re-laid-out copy of B would stay TMA-aligned (tf32 with an
    N-major B, or 16-bit with a K-major B), whether the Gluon tf32 kernel runs on A (nmajor) or on a
    row-major copy of it (nmajor_copy_a): gemm.nmajor_eligible's conditions, a TMA device taken for a
    Hopper (32-bit indices); and whether the fp64-accumulating kernel is offered (f64: gemm.f64_eligible's)."""
    from triton_kernels import gemm
    from triton_kernels.tma import _tma_eligible

    M, K = a.shape
    N = b.shape[1]
    prec = precision if a.dtype == torch.float32 else "ieee"
    a_unit, b_unit = a.stride(1) == 1, b.stride(1) == 1
    tma = _tma_eligible(a, b, M, N, K, on_tma_device)
    relayout = tma and gemm.relayout_eligible(b, prec)
    nmajor, nmajor_copy = gemm.nmajor_flags(a, b, prec, False, hopper=on_tma_device) if tma else (False, False)
    return {"prec": prec, "a_unit": a_unit, "b_unit": b_unit, "tma": tma, "relayout": relayout, "nmajor": nmajor,
            "nmajor_copy_a": nmajor_copy, "f64": gemm.f64_eligible(a, prec, hopper=on_tma_device)}


def _gemm_operands(M, N, K, dtype, layout, device, g=None):
    """A (M, K) and B (K, N) as the layout says (t: stored transposed); meta tensors when g is None."""
    def make(rows, cols, transposed):
        shape = (cols, rows) if transposed else (rows, cols)
        t = torch.empty(shape, device="meta", dtype=dtype) if g is None else _randn(shape, dtype, device, g)
        return t.t() if transposed else t

    return make(M, K, layout[0] == "t"), make(K, N, layout[1] == "t")


def _gemm_plan(shape: dict, dtype: torch.dtype, variant: dict, device) -> Plan:
    M, N, K = shape["M"], shape["N"], shape["K"]
    a, b = _gemm_operands(M, N, K, dtype, variant["layout"], device)
    f = gemm_layout_flags(a, b, variant["precision"], tma_device(device))
    ctx = spaces.context("gemm", M=M, N=N, K=K, dtype=dtype, tma=f["tma"], relayout=f["relayout"], nmajor=f["nmajor"],
                         nmajor_copy_a=f["nmajor_copy_a"], activation=variant["act"], f64=f["f64"])
    from triton_kernels.gemm import GemmKey

    key = GemmKey(m=bucket(M), n=bucket(N), k=bucket(K), dtype=dtype, precision=f["prec"], activation=variant["act"],
                  has_bias=variant["bias"], has_residual=False, a_unit_stride=f["a_unit"], b_unit_stride=f["b_unit"],
                  tma=f["tma"])
    return Plan(ctx, key, "gemm")


def _gemm_problem(shape: dict, dtype: torch.dtype, variant: dict, device, seed: int = 0) -> Problem:
    from triton_kernels import gemm

    M, N, K = shape["M"], shape["N"], shape["K"]
    g = _generator(seed, device)
    a, b = _gemm_operands(M, N, K, dtype, variant["layout"], device, g)
    b = b / K ** 0.5
    bias = _randn((N,), dtype, device, g) if variant["bias"] else None
    act, prec = variant["act"], variant["precision"]

    def reference():
        z = a.double() @ b.double() + (bias.double() if bias is not None else 0.0)
        return {"none": z, "relu": torch.relu(z), "gelu": torch.nn.functional.gelu(z)}[act]

    ref = Lazy(reference)

    def call(cfg: Config):
        return gemm.gemm_forward(a, b, bias, activation=act, precision=prec, config=cfg)[0]

    tf32 = dtype == torch.float32 and prec == "tf32" and not INTERPRET
    return Problem(call, lambda out: device_rel_err(out, ref()), tolerance(dtype, tf32), flops=2.0 * M * N * K,
                   bytes=float((M * K + K * N + M * N) * dtype.itemsize))


GEMM = Adapter("gemm", ("M", "N", "K"), {"layout": "nn", "act": "none", "precision": "ieee", "bias": True},
               {"layout": ("nn", "nt", "tn", "tt"), "act": ("none", "relu", "gelu"), "precision": ("ieee", "tf32"),
                "bias": (True, False)},
               _gemm_plan, _gemm_problem, metric="tflops", module="triton_kernels.gemm")


# ----------------------------------------------------------------------------------------------------
# conv1d forward (implicit GEMM)
# ----------------------------------------------------------------------------------------------------
def _conv_plan(shape: dict, dtype: torch.dtype, variant: dict, device) -> Plan:
    B, L, C, N, k, pool = shape["B"], shape["L"], shape["C"], shape["N"], shape["k"], variant["pool"]
    LP = (L - k + 1) // pool
    if LP < 1:
        raise ValueError(f"conv1d shape {shape}: no output rows (L - k + 1) // pool")
    prec = variant["precision"] if dtype == torch.float32 else "ieee"
    ctx = spaces.context("conv1d", M=B * LP, N=N, C=C, dtype=dtype, pool=pool)
    from triton_kernels.conv1d import ConvKey

    key = ConvKey(m=bucket(B * LP), n=N, c=C, kernel_size=k, pool=pool, pad=0, dtype=dtype, precision=prec,
                  activation=variant["act"], has_bias=True)
    return Plan(ctx, key, "conv1d")


def _conv_problem(shape: dict, dtype: torch.dtype, variant: dict, device, seed: int = 0) -> Problem:
    from triton_kernels import conv1d

    B, L, C, N, k, pool = shape["B"], shape["L"], shape["C"], shape["N"], shape["k"], variant["pool"]
    g = _generator(seed, device)
    x = _randn((B, L, C), dtype, device, g)
    weight = (_randn((k, C, N), dtype, device, g) / (k * C) ** 0.5).permute(2, 1, 0)  # (C_out, C_in, k) view
    bias = _randn((N,), dtype, device, g)
    act, prec = variant["act"], variant["precision"]

    def reference():
        z = torch.nn.functional.conv1d(x.double().transpose(1, 2), weight.double(), bias.double())
        if act == "relu":
            z = torch.relu(z)
        if pool > 1:
            z = torch.nn.functional.max_pool1d(z, pool)
        return z.transpose(1, 2)

    ref = Lazy(reference)
    LP = (L - k + 1) // pool

    def call(cfg: Config):
        return conv1d.conv1d_forward(x, weight, bias, activation=act, pool=pool, precision=prec, config=cfg)

    tf32 = dtype == torch.float32 and prec == "tf32" and not INTERPRET
    return Problem(call, lambda out: device_rel_err(out, ref()), tolerance(dtype, tf32),
                   flops=2.0 * B * (L - k + 1) * N * C * k,
                   bytes=float((B * L * C + k * C * N + B * LP * N) * dtype.itemsize))


CONV1D = Adapter("conv1d", ("B", "L", "C", "N", "k"), {"act": "relu", "pool": 1, "precision": "ieee"},
                 {"act": ("none", "relu"), "pool": (1, 2, 3, 4), "precision": ("ieee", "tf32")},
                 _conv_plan, _conv_problem, metric="tflops", module="triton_kernels.conv1d")


# ----------------------------------------------------------------------------------------------------
# softmax (forward or backward)
# ----------------------------------------------------------------------------------------------------
def _softmax_plan(shape: dict, dtype: torch.dtype, variant: dict, device) -> Plan:
    M, N = shape["M"], shape["N"]
    ctx = spaces.context("softmax", M=M, N=N)
    forward = variant["direction"] == "forward"
    from triton_kernels.softmax import SoftmaxKey

    key = SoftmaxKey(m=bucket(M), n=bucket(N), dtype=dtype, grad_dtype=None if forward else dtype, log=variant["log"],
                     unit_stride=True)
    tuner = f"softmax_{'fwd' if forward else 'bwd'}_{'looped' if ctx['looped'] else 'row'}"
    return Plan(ctx, key, tuner)


def _softmax_problem(shape: dict, dtype: torch.dtype, variant: dict, device, seed: int = 0) -> Problem:
    from triton_kernels import softmax

    M, N = shape["M"], shape["N"]
    g = _generator(seed, device)
    x = _randn((M, N), dtype, device, g)
    log = variant["log"]
    f = torch.log_softmax if log else torch.softmax
    if variant["direction"] == "forward":
        ref = Lazy(lambda: f(x.double(), dim=1))
        return Problem(lambda cfg: softmax.softmax_forward(x, log, config=cfg), lambda out: device_rel_err(out, ref()),
                       tolerance(dtype), bytes=2.0 * M * N * dtype.itemsize)
    y = f(x.float(), dim=1).to(dtype)
    dy = _randn((M, N), dtype, device, g)

    def reference():
        y64, dy64 = y.double(), dy.double()
        return dy64 - torch.exp(y64) * dy64.sum(1, keepdim=True) if log else y64 * (dy64 - (dy64 * y64).sum(1, keepdim=True))

    ref = Lazy(reference)
    return Problem(lambda cfg: softmax.softmax_backward(dy, y, log, config=cfg), lambda out: device_rel_err(out, ref()),
                   tolerance(dtype), bytes=3.0 * M * N * dtype.itemsize)


SOFTMAX = Adapter("softmax", ("M", "N"), {"direction": "forward", "log": False},
                  {"direction": ("forward", "backward"), "log": (False, True)}, _softmax_plan, _softmax_problem,
                  module="triton_kernels.softmax")


# ----------------------------------------------------------------------------------------------------
# LayerNorm forward (row kernel)
# ----------------------------------------------------------------------------------------------------
def _ln_plan(shape: dict, dtype: torch.dtype, variant: dict, device) -> Plan:
    M, D = shape["M"], shape["D"]
    if next_power_of_2(D) > spaces.LN_MAX_ROW_D:
        raise ValueError(f"layernorm_fwd sweeps the row kernel: D <= {spaces.LN_MAX_ROW_D}, got {D}")
    from triton_kernels.layernorm import LayerNormForwardKey

    key = LayerNormForwardKey(m=bucket(M), d=bucket(D), dtype=dtype, has_weight=variant["affine"],
                              has_bias=variant["affine"], save_stats=False)
    return Plan(spaces.context("layernorm_fwd", M=M, D=D), key, "layernorm_fwd_row")


def _ln_problem(shape: dict, dtype: torch.dtype, variant: dict, device, seed: int = 0) -> Problem:
    from triton_kernels import layernorm

    M, D = shape["M"], shape["D"]
    g = _generator(seed, device)
    x = _randn((M, D), dtype, device, g)
    w = _randn((D,), dtype, device, g) if variant["affine"] else None
    b = _randn((D,), dtype, device, g) if variant["affine"] else None
    ref = Lazy(lambda: torch.nn.functional.layer_norm(x.double(), (D,), w.double() if w is not None else None,
                                                      b.double() if b is not None else None, 1e-5))

    def call(cfg: Config):
        return layernorm.layer_norm_forward(x, w, b, 1e-5, False, config=cfg)[0]

    return Problem(call, lambda out: device_rel_err(out, ref()), tolerance(dtype), bytes=2.0 * M * D * dtype.itemsize)


LAYERNORM_FWD = Adapter("layernorm_fwd", ("M", "D"), {"affine": True}, {"affine": (True, False)}, _ln_plan, _ln_problem,
                        module="triton_kernels.layernorm")


# ----------------------------------------------------------------------------------------------------
# cross-entropy (fused forward + gradient)
# ----------------------------------------------------------------------------------------------------
_REDUCTIONS = ("none", "sum", "mean")


def _ce_plan(shape: dict, dtype: torch.dtype, variant: dict, device) -> Plan:
    M, V = shape["M"], shape["V"]
    from triton_kernels.cross_entropy import CrossEntropyKey

    key = CrossEntropyKey(m=bucket(M), v=bucket(V), dtype=dtype, has_weight=False, smooth=False,
                          compute_grad=variant["grad"], reduction=variant["reduction"], unit_stride=True)
    return Plan(spaces.context("cross_entropy", M=M, V=V, dtype=dtype), key, "cross_entropy")


def _ce_problem(shape: dict, dtype: torch.dtype, variant: dict, device, seed: int = 0) -> Problem:
    from triton_kernels import cross_entropy

    M, V = shape["M"], shape["V"]
    g = _generator(seed, device)
    logits = _randn((M, V), dtype, device, g) * 3
    target = torch.randint(0, V, (M,), device=device, generator=g)
    reduction, grad = variant["reduction"], variant["grad"]

    def reference():
        x64 = logits.double().requires_grad_(grad)
        loss64 = torch.nn.functional.cross_entropy(x64, target, reduction=reduction)
        return [loss64.detach()] + ([torch.autograd.grad(loss64.sum(), x64)[0]] if grad else [])

    refs = Lazy(reference)

    def call(cfg: Config):
        loss, _, g_ = cross_entropy.cross_entropy_forward(logits, target, reduction=reduction, compute_grad=grad,
                                                          config=cfg)
        return (loss, g_) if grad else (loss,)

    def error(out) -> float:
        return max(device_rel_err(o, r) for o, r in zip(out, refs()))

    return Problem(call, error, tolerance(dtype), bytes=float(M * V * dtype.itemsize * (2 if grad else 1)))


CROSS_ENTROPY = Adapter("cross_entropy", ("M", "V"), {"reduction": "mean", "grad": True},
                        {"reduction": _REDUCTIONS, "grad": (True, False)}, _ce_plan, _ce_problem,
                        module="triton_kernels.cross_entropy")


ADAPTERS: dict[str, Adapter] = {a.kernel: a for a in (GEMM, CONV1D, SOFTMAX, LAYERNORM_FWD, CROSS_ENTROPY)}


def adapter(kernel: str) -> Adapter:
    if kernel not in ADAPTERS:
        raise ValueError(f"--kernel must be one of {sorted(ADAPTERS)}, got {kernel!r}")
    return ADAPTERS[kernel]
