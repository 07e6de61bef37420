"""A launch path with almost no host cost: Triton's compiled launcher, called directly.

``kernel[grid](*args, **kwargs)`` spends most of its host time before the launch: binding the arguments
to the signature, computing each argument's specialisation (dtype, 16-byte alignment, divisibility by 16,
value 1) and hashing it into a cache key, reading the current stream and the launch hooks. For a kernel
whose constexprs and launch options a call site fixes once (one tuned config per key), almost all of that
is the same on every call, so :class:`BoundKernel` does it once:

* ``bind(kernel, num_warps=4, num_stages=1, BLOCK=128, ...)`` fixes the constexprs and options (made once
  per distinct set of values);
* ``bound.launch(grid, x_ptr=x, n=n, ...)`` takes the kernel's runtime arguments (constexprs left out),
  by name or in the kernel's order. A small generated function computes the guard -- per tensor its dtype and
  address mod 16, per int whether it is 1, its value mod 16 and whether it fits in 32 bits: what Triton
  specialises a compiled kernel on -- and on a hit calls the compiled kernel's own launcher with the
  metadata prepared at the first call (on Triton 3.6, for a kernel without scratch memory, the launcher's C
  entry point itself: ``_entry``; ``fix()``'s functions call it for kernels with scratch memory too, with a
  buffer kept per stream: ``_scratch``). A miss (a new specialisation) takes Triton's normal path once,
  which compiles if needed and launches, and records the compiled kernel for the next hit.

Under the interpreter, while torch.compile traces (fake tensors have no address, so the guard fails), or
while a launch hook is installed (a profiler), calls take Triton's normal path. A traced launch goes through
``torch.library.wrap_triton`` with the hint constexprs of ``TRACED_OFF`` off (see there); in the interpreter
it is skipped inside an op's fake implementation (op_registration.traced_interpreter_launch).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from .runtime import INTERPRET, is_fake
from .op_registration import traced_interpreter_launch


def _hooks_active() -> bool:
    hook = triton.knobs.runtime.launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


# Triton 3.6's CUDA launcher wrapper (CudaLauncher.__call__) allocates the kernel's scratch memory, if it has
# any, and passes (grid, stream, function, cooperative, pdl, global scratch, profile scratch, metadata, hooks,
# arguments) to the compiled C entry point: ~2 us of Python per launch
_WRAPPER_PARAMS = ["self", "gridX", "gridY", "gridZ", "stream", "function", "args"]


def _plain_wrapper(run) -> bool:
    """Whether ``run`` is Triton 3.6's CUDA launcher wrapper adding nothing but (maybe) global scratch memory
    to its C entry point: no profile scratch, the signature this module passes arguments by."""
    try:
        wrapper = list(inspect.signature(type(run).__call__).parameters)
    except (TypeError, ValueError):
        return False
    return (triton.__version__.split(".")[:2] == ["3", "6"] and wrapper == _WRAPPER_PARAMS
            and not getattr(run, "profile_scratch_size", 1) and hasattr(run, "launch"))


def _entry(run) -> tuple:
    """(callable, the arguments it takes between the function handle and the metadata) of a compiled
    kernel's launcher: the C entry point itself where the wrapper would add nothing (Triton 3.6, no scratch
    memory to allocate), else the wrapper with none."""
    if not _plain_wrapper(run) or getattr(run, "global_scratch_size", 1):
        return run, ()
    return run.launch, (bool(run.launch_cooperative_grid), bool(run.launch_pdl), None, None)


def _scratch_entry(run) -> tuple | None:
    """(C entry point, (cooperative, pdl), scratch bytes per program, alignment, pdl) of a Triton 3.6 launcher
    whose wrapper adds only global scratch memory (device-side TMA descriptors), else None. A kernel launched
    with programmatic dependent launch (pdl) may start before the one ahead of it ends, so it takes a buffer
    apart from the other launches' (``_scratch``)."""
    size = getattr(run, "global_scratch_size", 0)
    if not size or not _plain_wrapper(run) or not isinstance(getattr(run, "num_ctas", None), int):
        return None
    pdl = bool(getattr(run, "launch_pdl", False))
    return run.launch, (bool(run.launch_cooperative_grid), pdl), size * run.num_ctas, run.global_scratch_align, pdl


def _descriptor_entry(run) -> tuple | None:
    """(C entry point, the metadata of each descriptor argument) of a Triton 3.6 launcher whose kernel takes
    host-side tensor descriptors and has no scratch memory, else None (then the launcher _entry gives is
    called with the descriptors as they are). The wrapper around the entry point encodes each descriptor at
    every launch (make_tensordesc_arg); the fast path passes the encodings it keeps instead (``_encoded``)."""
    if not _plain_wrapper(run) or getattr(run, "global_scratch_size", 1):
        return None
    try:
        names = inspect.getclosurevars(run.launch).nonlocals
    except TypeError:
        return None
    entry, metas = names.get("launcher"), names.get("tensordesc_meta")
    if entry is None or not metas or any(meta is None for meta in metas):
        return None
    return entry, tuple(metas)


_ENCODED: dict[tuple, list] = {}  # (address, sizes, strides, block, padding, id(metadata)) -> the entry's arguments
MAX_ENCODED = 4096


def _make_tensordesc_arg(desc: TensorDescriptor, meta: dict) -> list:
    from triton.backends.nvidia.driver import make_tensordesc_arg
    return make_tensordesc_arg(desc, meta)


def _encoded(desc: TensorDescriptor, meta: dict, encode: Callable = _make_tensordesc_arg) -> list:
    """The arguments a descriptor takes at the C entry point ([CUtensorMap, *sizes, *strides]), as Triton's
    launcher encodes it (``encode``) with the compiled kernel's ``meta`` (swizzle, element type, block), kept:
    an encoding holds nothing but these values (the address is a number), so a hit is always the same map."""
    key = (desc.base.data_ptr(), *desc.shape, *desc.strides, *desc.block_shape, desc.padding, id(meta))
    args = _ENCODED.get(key)
    if args is None:
        if len(_ENCODED) >= MAX_ENCODED:
            _ENCODED.clear()
        args = _ENCODED[key] = encode(desc, meta)
    return args


def _int_class(v: int) -> tuple:
    return v == 1, v & 15, -2147483648 <= v <= 2147483647


def _descriptor_guard(desc: TensorDescriptor) -> tuple:
    """The guard of a descriptor argument, a superset of what Triton specialises it on: its base's dtype and
    address mod 16, its padding and block, and each size and stride as an int argument's."""
    return (desc.base.dtype, desc.base.data_ptr() & 15, desc.padding, tuple(desc.block_shape),
            tuple(map(_int_class, (*desc.shape, *desc.strides))))


def _descriptor_spec(desc: TensorDescriptor) -> tuple:
    """What fix() keeps of a descriptor argument: TensorDescriptor(base, *spec) rebuilds it on another base."""
    return list(desc.shape), list(desc.strides), list(desc.block_shape), desc.padding


# whether the current CUDA stream is capturing a graph (a CPU build of torch has only a stub that raises)
_capturing = torch._C._cuda_isCurrentStreamCapturing if torch.version.cuda else (lambda: False)
_SCRATCH: dict[tuple, Any] = {}  # (device, stream, bytes, dependent) -> a scratch buffer, reused on that stream
MAX_SCRATCH_BUFFERS = 64


def _scratch(nbytes: int, align: int, device: int, stream: int, dependent: bool = False) -> Any:
    """Global scratch memory for one launch on ``stream``, from the allocator Triton would call (what
    ``triton.set_allocator`` set in this context). Launches on one stream run one after another, so one
    buffer per (device, stream, size) serves them all, where the wrapper allocates at every launch. A
    ``dependent`` launch (programmatic dependent launch) may overlap the launch ahead of it: the dependent
    launches share a buffer of their own, which holds as long as no dependent launch with scratch follows
    another (the one caller, gemm_eager's chained backward, launches one after a plain GEMM). A launch
    being captured into a CUDA graph gets a buffer of its own, which the graph keeps."""
    if _capturing():
        return triton.runtime._allocation._allocator.get()(nbytes, align, stream)
    key = (device, stream, nbytes, dependent)
    buf = _SCRATCH.get(key)
    if buf is None:
        if len(_SCRATCH) >= MAX_SCRATCH_BUFFERS:
            _SCRATCH.clear()
        buf = _SCRATCH[key] = triton.runtime._allocation._allocator.get()(nbytes, align, stream)
    return buf


def _device_getter(driver) -> Callable[[], int]:
    """The current device index: torch's C getter where the driver asks torch (its Python wrapper first
    initialises CUDA, done long before a launch gets here)."""
    get = driver.get_current_device
    if get is torch.cuda.current_device and hasattr(torch._C, "_cuda_getDevice"):
        return torch._C._cuda_getDevice
    return get


# hint constexprs (inline PTX that changes no result) a kernel traced by torch.compile is compiled without:
# the programmatic-dependent-launch waits and the L2 prefetch
TRACED_OFF = ("PDL", "PREFETCH")


class BoundKernel:
    """A ``@triton.jit`` kernel with its constexprs and launch options fixed; see the module docstring."""

    def __init__(self, kernel: Any, constexprs: dict, options: dict, driver: Any = None) -> None:
        """``driver``: what gives the current device and stream (default: Triton's active driver; given
        explicitly, the generated path is used even under the interpreter, which has no driver), and, where it
        has ``encode_descriptor(desc, meta)``, the encodings of descriptor arguments (default: Triton's)."""
        self.kernel = kernel
        self.driver = driver
        self.constexprs = constexprs
        self.options = options
        params = getattr(kernel, "params", None)  # the interpreter's kernels have no compiled signature
        if params is not None:
            self.runtime_names = [p.name for p in params if not p.is_constexpr]
        else:  # the interpreter: the parameters not annotated as constexprs
            signature = inspect.signature(kernel.fn).parameters.values()
            self.runtime_names = [p.name for p in signature if "constexpr" not in str(p.annotation)]
        # guard -> (launcher entry, function handle, packed metadata, the entry's arguments before the metadata)
        self._compiled: dict[tuple, tuple] = {}
        # guard -> _scratch_entry's tuple, for kernels with scratch memory (fix()'s functions use it)
        self._scratch_entries: dict[tuple, tuple] = {}
        # guard -> the metadata of each descriptor argument, for kernels taking host-side tensor descriptors
        self._descriptor_metas: dict[tuple, tuple] = {}
        self._fixed_code: dict[tuple, Any] = {}  # argument kinds -> fix()'s compiled functions
        self.launch = self._first_launch if (not INTERPRET or driver is not None) else self._slow

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launch(grid, *args, **kwargs)

    # -- the normal Triton path ---------------------------------------------------------------------
    def _slow(self, grid, *args, **kwargs):
        if INTERPRET and traced_interpreter_launch(*args, *kwargs.values()):
            return None
        if not INTERPRET and is_fake(*(a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))):
            # torch.compile launches the kernel its own way, without programmatic dependent launch, and with
            # the hints of TRACED_OFF off: their inline PTX would make its analysis of which arguments the
            # kernel writes give up and assume all, which is wrong for a tensor passed twice (an output and
            # an absent argument's placeholder): the write may then land in a copy it discards
            options = {k: v for k, v in self.options.items() if k != "launch_pdl"}
            constexprs = {k: False if k in TRACED_OFF else v for k, v in self.constexprs.items()}
            return torch.library.wrap_triton(self.kernel)[grid](*args, **kwargs, **constexprs, **options)
        return self.kernel[grid](*args, **kwargs, **self.constexprs, **self.options)

    def _miss(self, grid, key, args):
        if key is None or _hooks_active():
            return self._slow(grid, *args)
        compiled = self._slow(grid, *args)  # compiles once, then launches
        if compiled is not None and not isinstance(compiled, (list, tuple)):
            entry, before_metadata = _entry(compiled.run)
            if any(isinstance(a, TensorDescriptor) for a in args):
                found = _descriptor_entry(compiled.run)
                self._descriptor_metas[key] = None  # None: _entry's launcher, which encodes the descriptors itself
                if found is not None:
                    entry, self._descriptor_metas[key] = found
                    before_metadata = (bool(compiled.run.launch_cooperative_grid), bool(compiled.run.launch_pdl),
                                       None, None)
            self._compiled[key] = (entry, compiled.function, compiled.packed_metadata, before_metadata)
            scratch = _scratch_entry(compiled.run)
            if scratch is not None:
                self._scratch_entries[key] = scratch
        return compiled

    # -- the generated fast path ----------------------------------------------------------------------
    def _scope(self) -> dict:
        """Names the generated functions use; each constexpr as _lp_c_<name>."""
        driver = self.driver if self.driver is not None else triton.runtime.driver.active
        scope = {"_lp_compiled": self._compiled, "_lp_miss": self._miss, "_lp_knobs": triton.knobs.runtime,
                 "_lp_fake": is_fake, "_lp_bound": self, "_lp_dmetas": self._descriptor_metas,
                 "_lp_dguard": _descriptor_guard, "_lp_TD": TensorDescriptor,
                 "_lp_stream": driver.get_current_stream, "_lp_device": _device_getter(driver)}
        encode = getattr(self.driver, "encode_descriptor", _make_tensordesc_arg)
        # a descriptor argument's slots: its kept encoding, or itself where the launcher encodes it (metas None)
        scope["_lp_enc"] = lambda desc, metas, j: (desc,) if metas is None else _encoded(desc, metas[j], encode)
        for p in self.kernel.params:
            if p.is_constexpr:
                scope[f"_lp_c_{p.name}"] = self.constexprs.get(p.name, p.default)
        return scope

    def _values(self, args: tuple, kwargs: dict) -> dict:
        """The runtime arguments by name; a TypeError naming them when some are missing or unknown."""
        names = self.runtime_names
        if len(args) > len(names) or set(kwargs) - set(names[len(args):]):
            raise TypeError(f"{self.kernel.__name__} takes the runtime arguments ({', '.join(names)}); got "
                            f"{len(args)} positional and {sorted(kwargs)} by keyword")
        values = dict(zip(names, args), **kwargs)
        missing = [n for n in names if n not in values]
        if missing:
            raise TypeError(f"{self.kernel.__name__}: missing runtime arguments {missing}")
        return values

    @staticmethod
    def _guard(name: str, value: Any, pointer: str) -> list[str]:
        """The guard terms of one runtime argument (what Triton specialises on): a tensor's dtype and its
        address (``pointer``) mod 16; an int's ==1, mod 16 and 32-bit range; a bool / None itself; a tensor
        descriptor's _descriptor_guard; anything else its class."""
        if isinstance(value, torch.Tensor):
            return [f"{name}.dtype", f"{pointer} & 15"]
        if isinstance(value, TensorDescriptor):
            return [f"_lp_dguard({name})"]
        if isinstance(value, bool) or value is None:
            return [name]
        if isinstance(value, int):
            return [f"{name} == 1", f"{name} & 15", f"-2147483648 <= {name} <= 2147483647"]
        return [f"{name}.__class__"]

    def _first_launch(self, grid, *args, **kwargs):
        """Generate the guard-and-launch function for the argument kinds of this first call. It takes
        the kernel's runtime parameters by name or position, like the kernel itself."""
        names = self.runtime_names
        values = self._values(args, kwargs)
        guard, passed, prologue = [], {}, []
        for i, name in enumerate(names):
            if isinstance(values[name], torch.Tensor):
                # the compiled launcher takes an address as an int (and then skips its own
                # data_ptr() call and pointer-attribute query)
                prologue.append(f"_lp_p{i} = {name}.data_ptr()")
                passed[name] = f"_lp_p{i}"
            guard += self._guard(name, values[name], f"_lp_p{i}")
        scope = self._scope()
        # the compiled launcher takes every parameter, constexprs included (their slots skipped); a descriptor
        # its encoding (sizes and strides after the map)
        descriptors = [n for n in names if isinstance(values[n], TensorDescriptor)]
        call = [f"_lp_c_{p.name}" if p.is_constexpr else
                f"*_lp_enc({p.name}, _lp_dmetas[_lp_key], {descriptors.index(p.name)})" if p.name in descriptors
                else passed.get(p.name, p.name) for p in self.kernel.params]
        arglist = ", ".join(names)
        # a null address: a fake tensor (torch.compile tracing; Triton's own path) or an empty one (an
        # output the kernel does not write, e.g. statistics in inference: launched directly like any other)
        pointers = [f"not {p}" for p in passed.values()]
        nonnull = (f"if ({' or '.join(pointers)}) and _lp_fake({', '.join(passed)}): raise TypeError" if pointers
                   else "pass")
        src = f"""
def launch(_lp_grid, {arglist}):
    try:
        {'; '.join(prologue) or 'pass'}
        {nonnull}
        _lp_key = (_lp_device(), {', '.join(guard)})
    except (AttributeError, TypeError, RuntimeError):  # fake tensors, other argument kinds
        return _lp_miss(_lp_grid, None, ({arglist},))
    _lp_hit = _lp_compiled.get(_lp_key)
    _lp_hook = _lp_knobs.launch_enter_hook
    if _lp_hit is None or (_lp_hook is not None and getattr(_lp_hook, "calls", True)):
        return _lp_miss(_lp_grid, _lp_key, ({arglist},))
    _lp_run, _lp_function, _lp_metadata, _lp_before = _lp_hit
    _lp_n = len(_lp_grid)
    _lp_run(_lp_grid[0], _lp_grid[1] if _lp_n > 1 else 1, _lp_grid[2] if _lp_n > 2 else 1,
            _lp_stream(_lp_key[0]), _lp_function, *_lp_before, _lp_metadata, None, None, None, {', '.join(call)})
"""
        exec(compile(src, f"<launch {self.kernel.__name__}>", "exec"), scope)  # noqa: S102
        self.launch = scope["launch"]
        self.source = src
        return self.launch(grid, *args, **kwargs)

    def fix(self, grid, *args, **kwargs) -> Callable:
        """A launch function for calls that differ from ``launch(grid, *args, **kwargs)`` only in their
        tensors: the grid and every other argument fixed, it takes the tensor arguments positionally (in
        the kernel's order). It goes straight to the compiled launcher when every tensor has this call's
        dtype and a non-null, 16-byte aligned address, the current device is this call's and no launch
        hook is installed; any other call (or one before the kernel is compiled) goes through ``launch``.
        Meant for one function per call signature (e.g. a module's input shape); this call is not launched.
        A tensor descriptor argument is taken, in its place, as the tensor it reads (its base), with this
        call's sizes, strides and block."""
        values = self._values(args, kwargs)
        tensors = [n for n in self.runtime_names if isinstance(values[n], (torch.Tensor, TensorDescriptor))]
        specs = {n: _descriptor_spec(values[n]) for n in tensors if isinstance(values[n], TensorDescriptor)}
        fixed = {n: v for n, v in values.items() if n not in tensors}
        if INTERPRET and self.driver is None:  # the interpreter: Triton's own call
            return lambda *ts: self.launch(grid, **{n: TensorDescriptor(t, *specs[n]) if n in specs else t
                                                    for n, t in zip(tensors, ts)}, **fixed)
        kinds = tuple(" ".join(self._guard(n, values[n], "")) for n in self.runtime_names)  # the argument kinds
        code = self._fixed_code.get(kinds)
        if code is None:
            code = self._fixed_code[kinds] = self._fixed_source(tensors, values)
        scope = self._scope()
        grid = tuple(grid) + (1,) * (3 - len(grid))
        scope.update(_lp_dev=scope["_lp_device"](), _lp_hit=None, _lp_direct=None, _lp_dm=None, _lp_fixed=fixed,
                     _lp_grid=grid, _lp_scratch_entries=self._scratch_entries, _lp_scratch=_scratch,
                     _lp_programs=grid[0] * grid[1] * grid[2], _lp_fenc=_fixed_encoding,
                     **{f"_lp_g{i}": g for i, g in enumerate(grid)}, **{f"_lp_v_{n}": v for n, v in fixed.items()},
                     **{f"_lp_t{i}": values[n].base.dtype if n in specs else values[n].dtype
                        for i, n in enumerate(tensors)},
                     **{f"_lp_spec_{n}": spec for n, spec in specs.items()}, **{f"_lp_enc_{n}": {} for n in specs})
        exec(code, scope)  # noqa: S102  (defines _lp_guard and launch)
        # the key launch() files this call's compiled kernel under (16-byte aligned addresses)
        scope["_lp_key"] = scope["_lp_guard"](*(values[n] for n in self.runtime_names), *(16 for _ in tensors))
        return scope["launch"]

    def _fixed_source(self, tensors: list, values: dict):
        """The compiled module of fix()'s functions for one set of argument kinds: ``launch`` and
        ``_lp_guard`` (the key, as launch() computes it). Values are names in each function's globals."""
        names = self.runtime_names
        pointers = [f"_lp_p{i}" for i in range(len(tensors))]
        descriptors = [n for n in tensors if isinstance(values[n], TensorDescriptor)]
        guard = [term for n in names
                 for term in self._guard(n, values[n], pointers[tensors.index(n)] if n in tensors else "")]
        call = [f"_lp_c_{p.name}" if p.is_constexpr else f"*_lp_x_{p.name}" if p.name in descriptors
                else pointers[tensors.index(p.name)] if p.name in tensors else f"_lp_v_{p.name}"
                for p in self.kernel.params]
        usual = (f"({' | '.join(pointers)}) & 15 or not ({' and '.join(pointers)}) or "
                 + " or ".join(f"{n}.dtype is not _lp_t{i}" for i, n in enumerate(tensors)))
        slow = "_lp_bound.launch(_lp_grid, {}, **_lp_fixed)".format(
            ", ".join(f"{n}=_lp_TD({n}, *_lp_spec_{n})" if n in descriptors else f"{n}={n}" for n in tensors))
        # a descriptor's encoding: kept per base address by this function (its sizes, strides and block fixed)
        encode = "".join(f"""
    _lp_x_{n} = _lp_enc_{n}.get({pointers[tensors.index(n)]})
    if _lp_x_{n} is None:
        _lp_x_{n} = _lp_fenc(_lp_enc_{n}, {pointers[tensors.index(n)]}, {n}, _lp_spec_{n}, _lp_dm, {j}, _lp_enc)"""
                         for j, n in enumerate(descriptors))
        src = f"""
def _lp_guard({', '.join(names + pointers)}):
    return (_lp_dev, {', '.join(guard)})


def launch({', '.join(tensors)}):
    global _lp_hit, _lp_direct, _lp_dm
    {'; '.join(f'{p} = {n}.data_ptr()' for p, n in zip(pointers, tensors))}
    _lp_hook = _lp_knobs.launch_enter_hook
    if {usual} or (_lp_hook is not None and getattr(_lp_hook, "calls", True)) or _lp_device() != _lp_dev:
        return {slow}
    if _lp_hit is None:  # found once: launch() files a compiled kernel under its key for good
        _lp_hit = _lp_compiled.get(_lp_key)
        if _lp_hit is None:
            return {slow}
        _lp_direct = _lp_scratch_entries.get(_lp_key)
        _lp_dm = _lp_dmetas.get(_lp_key)
    _lp_s = _lp_stream(_lp_dev){encode}
    if _lp_direct is None:
        _lp_hit[0](_lp_g0, _lp_g1, _lp_g2, _lp_s, _lp_hit[1], *_lp_hit[3], _lp_hit[2], None, None, None,
                   {', '.join(call)})
    else:  # the C entry point with this stream's scratch buffer (no profile scratch)
        _lp_direct[0](_lp_g0, _lp_g1, _lp_g2, _lp_s, _lp_hit[1], *_lp_direct[1],
                      _lp_scratch(_lp_programs * _lp_direct[2], _lp_direct[3], _lp_dev, _lp_s, _lp_direct[4]), None,
                      _lp_hit[2],
                      None, None, None, {', '.join(call)})
"""
        return compile(src, f"<fixed launch {self.kernel.__name__}>", "exec")


def _fixed_encoding(cache: dict, address: int, base: torch.Tensor, spec: tuple, metas: tuple | None, index: int,
                    encoded: Callable) -> tuple | list:
    """The slots of the descriptor TensorDescriptor(base, *spec), the kernel's descriptor argument ``index``
    (``encoded``: the scope's _lp_enc): its encoding, kept in a fix()'d function's ``cache`` by base address; or,
    where the launcher encodes descriptors itself (``metas`` None), the descriptor, not kept (it holds its base)."""
    desc = TensorDescriptor(base, *spec)
    if metas is None:
        return (desc,)
    if len(cache) >= 64:
        cache.clear()
    args = cache[address] = encoded(desc, metas, index)
    return args


def launch_and_fix(kernel: BoundKernel, grid, args: dict) -> Callable:
    """Launch ``kernel`` once with ``args`` (by name) and return its launch function for later calls that
    differ only in their tensors (taken positionally, in the kernel's order): ``kernel.fix``'s."""
    kernel.launch(grid, **args)
    return kernel.fix(grid, **args)


_BOUND: dict[tuple, BoundKernel] = {}
_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "launch_pdl")


def bind(kernel: Any, **constexprs_and_options: Any) -> BoundKernel:
    """The :class:`BoundKernel` of ``kernel`` with these constexprs and launch options (num_warps,
    num_stages, ...), made once per distinct set of values."""
    key = (id(kernel), tuple(sorted(constexprs_and_options.items())))
    bound = _BOUND.get(key)
    if bound is None:
        options = {k: constexprs_and_options.pop(k) for k in _OPTIONS if k in constexprs_and_options}
        bound = _BOUND[key] = BoundKernel(kernel, constexprs_and_options, options)
    return bound


# Both tables key by id(kernel): a JITFunction's own hash reads its cache key, a property, on every lookup.
# Each entry holds the kernel itself, which keeps it alive, so its id is never reused for another.
_BINDING: dict[int, tuple] = {}  # id(kernel) -> (kernel, names of its constexprs and launch options)


def launch_bound(kernel: Any, grid: Any, args: tuple, kwargs: dict) -> None:
    """``kernel[grid](*args, **kwargs)`` through the :class:`BoundKernel` of the constexprs and options
    among ``kwargs`` (the rest are runtime arguments, as are ``args``)."""
    entry = _BINDING.get(id(kernel))
    if entry is None:
        entry = _BINDING[id(kernel)] = (kernel, frozenset([p.name for p in kernel.params if p.is_constexpr]
                                                          + list(_OPTIONS)))
    fixed = entry[1]
    key = (id(kernel), tuple([(k, v) for k, v in kwargs.items() if k in fixed]))
    bound = _BOUND.get(key)
    if bound is None:
        items = dict(key[1])
        options = {k: items.pop(k) for k in _OPTIONS if k in items}
        bound = _BOUND[key] = BoundKernel(kernel, items, options)
    if len(key[1]) == len(kwargs):
        bound.launch(grid, *args)
    else:
        bound.launch(grid, *args, **{k: v for k, v in kwargs.items() if k not in fixed})
