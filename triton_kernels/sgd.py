"""SGD with momentum (torch.optim.SGD's update) for every parameter of a group in one launch.

torch.optim.SGD's default (foreach) implementation makes one pass over memory per operation: the weight
decay, the momentum scale, its add, the Nesterov add and the update each read and write the parameters'
size again (for ResNet-18's 11.2 M fp32 values, ~5 passes of ~90-135 MB). Here every value is read once (p,
its gradient, its momentum buffer) and written once (p, the buffer).

Math (torch.optim.SGD, per value; lr, momentum, dampening, weight_decay as its arguments):
    g = -grad if maximize else grad
    g = g + weight_decay * p                   (when weight_decay != 0)
    buf = g                                     (first step: the buffer starts as the gradient)
    buf = momentum * buf + (1 - dampening) * g  (later steps)
    g = g + momentum * buf if nesterov else buf (when momentum != 0)
    p = p - lr * g
in fp32, each result stored in the parameter's dtype. A gradient may be a narrower float (fp16, bf16) than its
fp32 parameter, as a mixed-precision model's weight gradients come out of its layers; it is widened as it is
loaded.

Tiling: the tensors laid end to end and cut into BLOCK-element chunks, one program per chunk. Two small
tables give each chunk its tensor and its index in that tensor (made once per list of sizes), and a third the
tensors' addresses: parameters, gradients, buffers (uploaded when one of them moves), so a launch takes a few
tensor arguments however many parameters there are. Each tensor is walked in its storage order, so a gradient
and a buffer must have their parameter's strides (a gradient in another layout is copied into it first).
"""
from __future__ import annotations

import operator
from typing import NamedTuple, Optional, Sequence

import torch
import triton
import triton.language as tl
from torch.autograd.graph import increment_version

from .runtime import (INTERPRET, Autotuner, Config, bucket, cdiv, check_dense, check_tensor, dtype_name, is_dense,
                      register_tuner)
from .runtime import launch as _launch


@triton.jit
def _sgd_kernel(addresses_ptr, chunk_tensor_ptr, chunk_index_ptr, numels_ptr, like_ptr, grad_like_ptr, lr, momentum,
                dampening, weight_decay, T, MAXIMIZE: tl.constexpr, HAS_WD: tl.constexpr, HAS_MOMENTUM: tl.constexpr,
                FIRST: tl.constexpr, NESTEROV: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
    """addresses: (3, T) int64, the data pointers of the T parameters, their gradients and their momentum
    buffers (the parameters again without momentum); chunk_tensor, chunk_index: (chunks,) int32, each chunk's
    tensor and its index in it; numels: (T,) int32; like / grad_like: tensors of the parameters' / the
    gradients' dtype (their pointer types type the addresses; a gradient may be narrower than its fp32
    parameter, and is widened as it is loaded). ALIGNED: every address a multiple of 16 elements. FIRST: the
    buffers are written, not read."""
    pid = tl.program_id(0)
    t = tl.load(chunk_tensor_ptr + pid)
    offs = tl.load(chunk_index_ptr + pid) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < tl.load(numels_ptr + t)
    p_ptr = tl.load(addresses_ptr + t).to(like_ptr.dtype)
    g_ptr = tl.load(addresses_ptr + T + t).to(grad_like_ptr.dtype)
    b_ptr = tl.load(addresses_ptr + 2 * T + t).to(like_ptr.dtype)
    if ALIGNED:
        p_ptr, g_ptr, b_ptr = tl.multiple_of(p_ptr, 16), tl.multiple_of(g_ptr, 16), tl.multiple_of(b_ptr, 16)
    p = tl.load(p_ptr + offs, mask=mask).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask).to(tl.float32)
    if MAXIMIZE:
        g = -g
    if HAS_WD:
        g = g + weight_decay * p
    if HAS_MOMENTUM:
        if FIRST:
            buf = g
        else:
            buf = tl.load(b_ptr + offs, mask=mask).to(tl.float32) * momentum + (1.0 - dampening) * g
        tl.store(b_ptr + offs, buf.to(like_ptr.dtype.element_ty), mask=mask)
        if NESTEROV:
            g = g + momentum * buf
        else:
            g = buf
    tl.store(p_ptr + offs, (p - lr * g).to(like_ptr.dtype.element_ty), mask=mask)


CONFIGS = [Config({"BLOCK": b}, w, 1) for b, w in ((2048, 4), (4096, 4), (4096, 8), (8192, 8), (1024, 4))]
INTERPRET_CONFIG = Config({"BLOCK": 256}, 4, 1)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INTERPRETER_DTYPES = (torch.float32, torch.float16)  # no bf16 in the interpreter


class SGDKey(NamedTuple):
    """What a tuned SGD config depends on."""
    n: int          # values in all, bucketed
    tensors: int    # tensors per launch, bucketed
    dtype: str
    grad_dtype: str
    momentum: bool
    first: bool


_tuner = register_tuner(Autotuner("sgd", _sgd_kernel, CONFIGS, interpret_config=INTERPRET_CONFIG))
# (device, sizes, BLOCK) -> (chunk_tensor, chunk_index, numels) on the device; (device, addresses) -> their table
_CHUNKS: dict[tuple, tuple] = {}
_ADDRESSES: dict[tuple, torch.Tensor] = {}
_MAX_TABLES = 16  # address tables kept (a model's parameters and buffers stay put; its gradients often do)


def _chunks(device, numels: tuple, block: int) -> tuple:
    key = (device, numels, block)
    tables = _CHUNKS.get(key)
    if tables is None:
        counts = torch.tensor([cdiv(n, block) for n in numels])
        tensor = torch.repeat_interleave(torch.arange(len(numels)), counts)
        index = torch.arange(len(tensor)) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
        tables = _CHUNKS[key] = tuple(t.to(device=device, dtype=torch.int32)
                                      for t in (tensor, index, torch.tensor(numels)))
    return tables


def _address_table(device, addresses: tuple, align: int) -> tuple[torch.Tensor, bool]:
    """The addresses on the device, and whether each is a multiple of ``align`` bytes."""
    key = (device, addresses, align)
    entry = _ADDRESSES.get(key)
    if entry is None:
        if len(_ADDRESSES) >= _MAX_TABLES:
            _ADDRESSES.pop(next(iter(_ADDRESSES)))
        # from pinned memory without a wait: a pageable upload would stall the host until the GPU drains
        pinned = torch.device(device).type == "cuda"
        table = torch.tensor(addresses, dtype=torch.int64, pin_memory=pinned).to(device, non_blocking=pinned)
        entry = _ADDRESSES[key] = (table, all(a % align == 0 for a in addresses))
    return entry


def _launch_group(params, grads, bufs, hyper: tuple, flags: dict, config: Optional[Config]) -> None:
    """One launch over parameters of one dtype whose gradients share one dtype (bufs: params again without
    momentum)."""
    data_ptr = torch.Tensor.data_ptr
    addresses = (*map(data_ptr, params), *map(data_ptr, grads), *map(data_ptr, bufs))
    table, aligned = _address_table(params[0].device, addresses, 16 * params[0].element_size())
    numels = tuple(map(torch.Tensor.numel, params))

    def run(cfg: Config) -> None:
        tensor, index, sizes = _chunks(params[0].device, numels, cfg.kwargs["BLOCK"])
        _launch(_sgd_kernel, (len(tensor),), table, tensor, index, sizes, params[0], grads[0], *hyper, len(params),
                **flags, ALIGNED=aligned, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **cfg.kwargs)

    if config is None:
        key = SGDKey(n=bucket(sum(numels), 1 << 16), tensors=bucket(len(params), 4), dtype=dtype_name(params[0].dtype),
                     grad_dtype=dtype_name(grads[0].dtype), momentum=flags["HAS_MOMENTUM"], first=flags["FIRST"])
        copies: list = []  # the trials update what they are given: copies, made at the first trial

        def trial(cfg: Config) -> None:
            if not copies:
                copies.extend(([p.clone() for p in params], [b.clone() for b in bufs]))
            _launch_group(copies[0], grads, copies[1] if flags["HAS_MOMENTUM"] else copies[0], hyper, flags, cfg)

        config = _tuner.pick(key, trial)
    run(config)


def sgd_step_(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
              momentum_buffers: Sequence[Optional[torch.Tensor]], lr: float, momentum: float = 0.0,
              dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False, *,
              config: Optional[Config] = None) -> list[Optional[torch.Tensor]]:
    """torch.optim.SGD's update of ``params`` in place (see the module docstring), one launch per parameter
    and gradient dtype (first-step buffers apart). A gradient has its parameter's dtype, or is a narrower float
    (fp16, bf16) of an fp32 parameter (``grad_dtype``: a mixed-precision model's weight gradients as the
    autocast layers make them), widened to fp32 as it is loaded. ``momentum_buffers[i]`` None: param i's first step, its
    buffer is made (when momentum != 0); a buffer in another layout than its parameter's is replaced by a copy in
    the parameter's. Returns the buffers (None without momentum): keep these. ``config`` forces a launch config
    (tests)."""
    _check_options(lr, momentum, dampening, weight_decay, nesterov)
    _check_tensors(params, grads, momentum_buffers)
    return _step(params, grads, momentum_buffers, lr, momentum, dampening, weight_decay, nesterov, maximize, config)


def _step(params, grads, momentum_buffers, lr, momentum, dampening, weight_decay, nesterov, maximize,
          config: Optional[Config] = None, strides=None, grad_strides=None) -> list[Optional[torch.Tensor]]:
    """sgd_step_ on checked arguments (its host time is the floor of an eager call: comprehensions, not loops);
    strides, grad_strides: the parameters' and gradients' strides when the caller has them."""
    has_momentum = momentum != 0
    strides = strides or list(map(torch.Tensor.stride, params))
    grad_strides = grad_strides or list(map(torch.Tensor.stride, grads))
    grads = [g if gs == s else _like(p).copy_(g) for p, g, s, gs in zip(params, grads, strides, grad_strides)]
    if has_momentum:  # a new buffer for a first step; a buffer in another layout (e.g. loaded) copied into p's
        bufs = [_like(p) if b is None else b if b.stride() == s else _like(p).copy_(b)
                for p, b, s in zip(params, momentum_buffers, strides)]
        firsts = [b is None for b in momentum_buffers]
    else:
        bufs, firsts = list(params), [False] * len(params)
    hyper = (float(lr), float(momentum), float(dampening), float(weight_decay))
    flags = dict(MAXIMIZE=bool(maximize), HAS_WD=weight_decay != 0, HAS_MOMENTUM=has_momentum, NESTEROV=bool(nesterov))
    dtype, grad_dtype = params[0].dtype, grads[0].dtype
    if all(p.dtype is dtype and g.dtype is grad_dtype and p.numel() for p, g in zip(params, grads)) \
            and len(set(firsts)) == 1:
        _launch_group(params, grads, bufs, hyper, dict(flags, FIRST=firsts[0]), config)
    else:  # one launch per (first step, dtype, gradient dtype): first steps write their buffers, not read them
        passes: dict[tuple, list[int]] = {}
        for i, (p, g) in enumerate(zip(params, grads)):
            if p.numel():
                passes.setdefault((firsts[i], p.dtype, g.dtype), []).append(i)
        for (first, _, _), idx in passes.items():
            _launch_group([params[i] for i in idx], [grads[i] for i in idx], [bufs[i] for i in idx], hyper,
                          dict(flags, FIRST=first), config)
    # the kernel wrote through pointers: bump the version counters, as torch's in-place update does (caches keyed
    # by a tensor's version, e.g. conv2d's packed weights, then see the new values)
    increment_version([*params, *bufs] if has_momentum else list(params))
    return bufs if has_momentum else [None] * len(params)


def _like(p: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(p.shape, p.stride(), dtype=p.dtype, device=p.device)


def _check_options(lr, momentum, dampening, weight_decay, nesterov) -> None:
    for name, value in (("lr", lr), ("momentum", momentum), ("dampening", dampening), ("weight_decay", weight_decay)):
        if isinstance(value, torch.Tensor) or not isinstance(value, (int, float)) or not value >= 0.0:
            raise ValueError(f"{name} must be a float >= 0, got {value!r}")
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("Nesterov momentum requires a momentum and zero dampening")


def _check_tensors(params, grads, bufs) -> None:
    if not isinstance(params, (list, tuple)) or not params:
        raise ValueError(f"params must be a non-empty list or tuple of tensors, got {params!r}")
    if len(grads) != len(params) or len(bufs) != len(params):
        raise ValueError(f"params, grads and momentum_buffers must be as long: {len(params)}, {len(grads)}, "
                         f"{len(bufs)}")
    check_tensor("params[0]", params[0], dtypes=DTYPES, device=None, interpreter_dtypes=INTERPRETER_DTYPES)
    if not _all_valid(params, grads, bufs):  # find the first bad argument and name it
        device = params[0].device
        for i, (p, g, b) in enumerate(zip(params, grads, bufs)):
            check_tensor(f"params[{i}]", p, dtypes=DTYPES, device=device, interpreter_dtypes=INTERPRETER_DTYPES)
            check_tensor(f"grads[{i}]", g, dtypes=_grad_dtypes(p.dtype), device=device,
                         interpreter_dtypes=INTERPRETER_DTYPES)
            if g.is_sparse:
                raise ValueError(f"grads[{i}] is sparse: SGD's fused step takes dense gradients")
            if g.shape != p.shape:
                raise ValueError(f"grads[{i}] has shape {tuple(g.shape)}, its parameter {tuple(p.shape)}")
            check_dense(f"params[{i}]", p)
            if b is not None and (not isinstance(b, torch.Tensor) or b.dtype != p.dtype or b.shape != p.shape
                                  or b.device != p.device):
                raise ValueError(f"momentum_buffers[{i}] must have its parameter's dtype, shape and device")
        raise AssertionError("_all_valid refused tensors that every check accepts")


def _all_valid(params, grads, bufs) -> bool:
    """Whether every tensor passes the checks of _check_tensors' loop (params[0]'s device and dtype checked):
    one cheap pass for the common case."""
    device, dtypes = params[0].device, INTERPRETER_DTYPES if INTERPRET else DTYPES
    tensor = torch.Tensor
    return all(isinstance(p, tensor) and isinstance(g, tensor) and p.dtype in dtypes
               and g.dtype in _grad_dtypes(p.dtype, dtypes)
               and p.device == device and g.device == device and g.shape == p.shape and not g.is_sparse
               and is_dense(p) and p.numel() < 2**31
               and (b is None or isinstance(b, tensor) and b.dtype == p.dtype and b.shape == p.shape
                    and b.device == device)
               for p, g, b in zip(params, grads, bufs))


def _grad_dtypes(dtype: torch.dtype, dtypes: tuple = DTYPES) -> tuple:
    """The gradient dtypes a parameter of ``dtype`` takes: its own, and for fp32 the narrower floats among
    ``dtypes``."""
    return dtypes if dtype == torch.float32 else (dtype,)


_DTYPE, _SHAPE = operator.attrgetter("dtype"), operator.attrgetter("shape")


def _signature(tensors) -> tuple:
    """What the per-step check of a group compares: each tensor's dtype, shape, device index and strides (C-level
    maps, a few µs for ResNet-18's 62 parameters)."""
    return (list(map(_DTYPE, tensors)), list(map(_SHAPE, tensors)), list(map(torch.Tensor.get_device, tensors)),
            list(map(torch.Tensor.stride, tensors)))


class SGD(torch.optim.SGD):
    """torch.optim.SGD (same arguments, state and state_dict: a torch SGD's state loads into it and back) whose
    step is :func:`sgd_step_`: one launch per parameter group. Dense gradients only; ``lr`` a float (a
    scheduler's floats do); no foreach / fused / differentiable options (the launch is all of them). A group's
    parameters and buffers are checked in full at its first step (and after a load_state_dict or a change of
    which parameters have gradients, or of their dtypes); later steps check each gradient's dtype, shape and
    device only. A gradient may be narrower than its fp32 parameter (see :func:`sgd_step_`)."""

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False) -> None:
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                         nesterov=nesterov, maximize=maximize)
        # group index -> (parameters, their _signature, their gradients' dtypes) at the last full check
        self._checked: dict[int, tuple] = {}

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        self._checked.clear()  # new buffers: check them

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for index, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            momentum, grads = group["momentum"], [p.grad for p in params]
            state = self.state
            bufs = [state[p].get("momentum_buffer") for p in params]
            _check_options(group["lr"], momentum, group["dampening"], group["weight_decay"], group["nesterov"])
            known, signature = self._checked.get(index), _signature(params)
            grad_signature = _signature(grads)
            # checked in full when the parameters, their dtypes, shapes, devices or strides, or the gradients'
            # dtypes changed since the last full check; every step, each gradient has its parameter's shape and
            # device and is dense
            if known is None or len(known[0]) != len(params) or not all(map(operator.is_, known[0], params)) \
                    or known[1] != signature or known[2] != grad_signature[0] \
                    or grad_signature[1:3] != signature[1:3] or any(map(operator.attrgetter("is_sparse"), grads)):
                _check_tensors(params, grads, bufs)
                self._checked[index] = (params, signature, grad_signature[0])
            new_bufs = _step(params, grads, bufs, group["lr"], momentum, group["dampening"], group["weight_decay"],
                             group["nesterov"], group["maximize"], strides=signature[3], grad_strides=grad_signature[3])
            if momentum != 0:  # a buffer made or re-laid this step goes into the state
                for p, old, new in zip(params, bufs, new_bufs):
                    if new is not old:
                        state[p]["momentum_buffer"] = new
        return loss
