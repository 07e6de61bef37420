"""The direct launch path (triton_kernels/launcher.py): the generated guard-and-launch function passes
what Triton's own launch would, and a new specialisation takes Triton's path. The compiled launcher
itself needs a GPU, so here it is a recording stand-in; the GPU tests of every op run the real one."""
import types

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from triton_kernels import launcher
from triton_kernels.launcher import BoundKernel, bind


def _copy(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr, EXTRA: tl.constexpr = 3):
    pass


DRIVER = types.SimpleNamespace(get_current_stream=lambda device: 1234, get_current_device=lambda: 0)


def _bound():
    bound = BoundKernel(JITFunction(_copy), {"BLOCK": 16}, {"num_warps": 4}, driver=DRIVER)
    misses = []
    bound._miss = lambda grid, key, args: misses.append((grid, key, args))
    return bound, misses


def test_hit_calls_the_compiled_launcher_with_every_slot():
    bound, misses = _bound()
    x, y = torch.randn(40), torch.empty(40)
    bound.launch((3,), x, y, 40, 0.5)  # first call: generated, then a miss (nothing compiled yet)
    assert len(misses) == 1 and misses[0][1] is not None
    calls = []
    bound._compiled[misses[0][1]] = (lambda *a: calls.append(a), "function", "metadata", ())
    bound.launch((3,), x, y, 40, 0.5)
    bound.launch((3, 2), x, y_ptr=y, n=40, scale=0.25)  # by keyword too
    assert calls[0] == (3, 1, 1, 1234, "function", "metadata", None, None, None,
                        x.data_ptr(), y.data_ptr(), 40, 0.5, 16, 3)
    assert calls[1][:3] == (3, 2, 1) and calls[1][-3] == 0.25
    assert len(misses) == 1


@pytest.mark.parametrize("change", ["divisibility", "one", "int64", "dtype", "alignment", "float_for_int"])
def test_a_new_specialisation_is_a_miss(change):
    bound, misses = _bound()
    x, y = torch.randn(64), torch.empty(64)
    bound.launch((1,), x, y, 32, 0.5)
    bound._compiled[misses[0][1]] = (lambda *a: None, "function", "metadata", ())
    args = {"divisibility": (x, y, 33, 0.5), "one": (x, y, 1, 0.5), "int64": (x, y, 2**33, 0.5),
            "dtype": (x.double(), y, 32, 0.5), "alignment": (x[1:], y, 32, 0.5),
            "float_for_int": (x, y, 32.0, 0.5)}[change]
    bound.launch((1,), *args)
    assert len(misses) == 2


def test_fake_tensors_take_the_normal_path():
    bound, misses = _bound()
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, y = torch.empty(8), torch.empty(8)
        bound.launch((1,), x, y, 8, 1.0)
    assert misses and misses[-1][1] is None  # no guard could be built: Triton's own path


def test_empty_tensors_take_the_direct_path():
    """An empty tensor has a null address, as a fake one does; it is launched directly all the same
    (e.g. the statistics an inference call does not save), not sent down Triton's slow path per call."""
    bound, misses = _bound()
    x, y = torch.randn(8), torch.empty(0)
    assert y.data_ptr() == 0
    bound.launch((1,), x, y, 8, 1.0)
    calls = []
    bound._compiled[misses[0][1]] = (lambda *a: calls.append(a), "function", "metadata", ())
    bound.launch((1,), x, y, 8, 1.0)
    assert len(misses) == 1 and calls and calls[0][10] == 0


def test_wrong_arguments_are_named():
    bound, _ = _bound()
    with pytest.raises(TypeError, match="x_ptr, y_ptr, n, scale"):
        bound.launch((1,), torch.empty(1), torch.empty(1), 1, 1.0, 5)
    with pytest.raises(TypeError, match="missing runtime arguments"):
        bound.launch((1,), torch.empty(1), torch.empty(1))


def test_bind_is_memoised_per_value_set():
    kernel = JITFunction(_copy)
    a = bind(kernel, BLOCK=16, num_warps=4)
    assert bind(kernel, num_warps=4, BLOCK=16) is a
    assert bind(kernel, BLOCK=32, num_warps=4) is not a
    assert a.options == {"num_warps": 4} and a.constexprs == {"BLOCK": 16}


def test_fixed_launch_passes_every_slot_and_takes_the_compiled_launcher():
    """fix(): the grid and the non-tensor arguments of one call signature fixed; a call passes only the
    tensors, and goes to the compiled kernel launch() filed for that signature (aligned addresses)."""
    bound, misses = _bound()
    x, y = torch.randn(40), torch.empty(40)
    fixed = bound.fix((3,), x, y, 40, 0.5)
    assert not misses  # fixing launches nothing
    fixed(x, y)  # nothing compiled yet: through launch(), which files the compiled kernel
    assert len(misses) == 1
    calls = []
    bound._compiled[misses[0][1]] = (lambda *a: calls.append(a), "function", "metadata", ())
    x2, y2 = torch.randn(40), torch.empty(40)
    fixed(x2, y2)
    assert calls == [(3, 1, 1, 1234, "function", "metadata", None, None, None,
                      x2.data_ptr(), y2.data_ptr(), 40, 0.5, 16, 3)]
    assert len(misses) == 1


@pytest.mark.parametrize("change", ["dtype", "alignment"])
def test_fixed_launch_of_another_specialisation_goes_through_launch(change):
    bound, misses = _bound()
    x, y = torch.randn(64), torch.empty(64)
    fixed = bound.fix((1,), x, y, 32, 0.5)
    fixed(x, y)
    calls = []
    bound._compiled[misses[0][1]] = (lambda *a: calls.append(a), "function", "metadata", ())
    other = {"dtype": (x.double(), y), "alignment": (x[1:], y)}[change]
    fixed(*other)
    assert not calls and len(misses) == 2 and misses[1][1] != misses[0][1]
    fixed(x, y)
    assert len(calls) == 1


def _tile(a_desc, y_ptr, n, BLOCK: tl.constexpr):
    pass


def _descriptor_bound():
    """A kernel taking a host-side tensor descriptor, with a stand-in encoder that records its calls."""
    encodings = []

    def encode(desc, meta):
        encodings.append((desc.base.data_ptr(), list(desc.shape), list(desc.strides), meta["block"]))
        return [f"map@{desc.base.data_ptr()}", *desc.shape, *desc.strides]

    driver = types.SimpleNamespace(**vars(DRIVER), encode_descriptor=encode)
    bound = BoundKernel(JITFunction(_tile), {"BLOCK": 16}, {"num_warps": 4}, driver=driver)
    misses = []
    bound._miss = lambda grid, key, args: misses.append((grid, key, args))
    return bound, misses, encodings


def test_descriptor_arguments_are_encoded_once_and_passed_expanded():
    """A host-side tensor descriptor reaches the C entry point as Triton's launcher passes it -- its encoded
    map, then its sizes and strides -- with the encoding kept for the next call of the same descriptor; a
    descriptor of another block or address is a miss or a new encoding."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    bound, misses, encodings = _descriptor_bound()
    x, y = torch.randn(32, 48), torch.empty(32)
    desc = TensorDescriptor(x, [32, 48], [48, 1], [16, 16])
    bound.launch((2,), desc, y, 32)
    calls = []
    key = misses[0][1]
    bound._compiled[key] = (lambda *a: calls.append(a), "function", "metadata", ())
    bound._descriptor_metas[key] = ({"block": [16, 16]},)
    for _ in range(2):
        bound.launch((2,), TensorDescriptor(x, [32, 48], [48, 1], [16, 16]), y, 32)
    expected = (2, 1, 1, 1234, "function", "metadata", None, None, None, f"map@{x.data_ptr()}", 32, 48, 48, 1,
                y.data_ptr(), 32, 16)
    assert calls == [expected, expected] and len(encodings) == 1
    x2 = torch.randn(32, 48)
    bound.launch((2,), TensorDescriptor(x2, [32, 48], [48, 1], [16, 16]), y, 32)
    assert calls[-1][9] == f"map@{x2.data_ptr()}" and len(encodings) == 2 and len(misses) == 1
    bound.launch((2,), TensorDescriptor(x, [32, 48], [48, 1], [32, 16]), y, 32)  # another block: a miss
    assert len(misses) == 2 and len(calls) == 3


def test_fixed_launch_takes_a_descriptor_as_its_base_tensor():
    """fix(): a descriptor argument is passed, per call, as the tensor it reads; its sizes, strides and block
    are the fixed call's. A base of another dtype or alignment goes through launch() with the descriptor
    rebuilt on it."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    bound, misses, encodings = _descriptor_bound()
    x, y = torch.randn(32, 48), torch.empty(32)
    fixed = bound.fix((2,), TensorDescriptor(x, [32, 48], [48, 1], [16, 16]), y, 32)
    fixed(x, y)  # nothing compiled yet: through launch()
    assert len(misses) == 1 and isinstance(misses[0][2][0], TensorDescriptor)
    calls = []
    key = misses[0][1]
    bound._compiled[key] = (lambda *a: calls.append(a), "function", "metadata", ())
    bound._descriptor_metas[key] = ({"block": [16, 16]},)
    x2 = torch.randn(32, 48)
    fixed(x2, y)
    fixed(x2, y)
    assert calls[0] == (2, 1, 1, 1234, "function", "metadata", None, None, None, f"map@{x2.data_ptr()}", 32, 48,
                        48, 1, y.data_ptr(), 32, 16)
    assert calls[1] == calls[0] and encodings == [(x2.data_ptr(), [32, 48], [48, 1], [16, 16])]
    fixed(x2.double(), y)
    desc = misses[-1][2][0]
    assert len(misses) == 2 and len(calls) == 2 and desc.base.dtype == torch.float64
    assert (list(desc.shape), list(desc.strides), list(desc.block_shape)) == ([32, 48], [48, 1], [16, 16])


def test_descriptors_pass_as_they_are_where_the_launcher_encodes_them():
    """Where no C entry point was found under Triton's wrapper (another Triton version: the descriptors'
    metadata None), the launcher _entry gave is called with the descriptors themselves, which it encodes; launch()
    and fix() alike, nothing encoded or kept here."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    bound, misses, encodings = _descriptor_bound()
    x, y = torch.randn(32, 48), torch.empty(32)
    fixed = bound.fix((2,), TensorDescriptor(x, [32, 48], [48, 1], [16, 16]), y, 32)
    bound.launch((2,), TensorDescriptor(x, [32, 48], [48, 1], [16, 16]), y, 32)
    calls = []
    key = misses[0][1]
    bound._compiled[key] = (lambda *a: calls.append(a), "function", "metadata", ())
    bound._descriptor_metas[key] = None
    desc = TensorDescriptor(x, [32, 48], [48, 1], [16, 16])
    bound.launch((2,), desc, y, 32)
    x2 = torch.randn(32, 48)
    fixed(x2, y)
    assert calls[0][9] is desc and calls[0][10:] == (y.data_ptr(), 32, 16)
    passed = calls[1][9]
    assert isinstance(passed, TensorDescriptor) and passed.base is x2 and list(passed.block_shape) == [16, 16]
    assert not encodings and len(misses) == 1


def test_descriptor_entry_unwraps_triton_36s_encoding_wrapper(monkeypatch):
    """Triton 3.6 wraps the C entry point of a kernel with descriptor arguments in a function that encodes
    them at every launch; _descriptor_entry finds the entry point and the descriptors' metadata inside it,
    and gives None where it cannot (no metadata, scratch memory), so Triton's launcher runs those."""
    monkeypatch.setattr(triton, "__version__", "3.6.0")

    def wrap(launcher, tensordesc_meta):
        def inner(*args):
            return launcher(*args), tensordesc_meta
        return inner

    run, entry = _Wrapper(), (lambda *a: None)
    run.launch = wrap(entry, [{"swizzle": 128}])
    assert launcher._descriptor_entry(run) == (entry, ({"swizzle": 128},))
    run.launch = wrap(entry, None)
    assert launcher._descriptor_entry(run) is None
    run.launch, run.global_scratch_size = wrap(entry, [{"swizzle": 128}]), 256
    assert launcher._descriptor_entry(run) is None


class _Wrapper:
    """Triton 3.6's CudaLauncher as far as launcher._entry reads it."""

    def __init__(self, global_scratch_size=0):
        self.global_scratch_size, self.profile_scratch_size = global_scratch_size, 0
        self.launch_cooperative_grid, self.launch_pdl = 0, 1
        self.launch = lambda *a: None

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        pass


def test_the_c_entry_point_is_called_where_the_wrapper_adds_nothing(monkeypatch):
    """Triton 3.6, no scratch memory: the C entry point with (cooperative, pdl, no global / profile scratch)
    before the metadata, as the wrapper would pass them; with scratch memory or another Triton version, the
    wrapper itself."""
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    run = _Wrapper()
    assert launcher._entry(run) == (run.launch, (False, True, None, None))
    scratch = _Wrapper(global_scratch_size=128)
    assert launcher._entry(scratch) == (scratch, ())
    monkeypatch.setattr(triton, "__version__", "3.7.0")
    assert launcher._entry(run) == (run, ())
    bound, misses = _bound()
    x, y = torch.randn(40), torch.empty(40)
    fixed = bound.fix((3,), x, y, 40, 0.5)
    fixed(x, y)
    calls = []
    bound._compiled[misses[0][1]] = (lambda *a: calls.append(a), "function", "metadata", (False, True, None, None))
    fixed(x, y)
    bound.launch((3,), x, y, 40, 0.5)
    expected = (3, 1, 1, 1234, "function", False, True, None, None, "metadata", None, None, None,
                x.data_ptr(), y.data_ptr(), 40, 0.5, 16, 3)
    assert calls == [expected, expected]


def test_a_fixed_launch_with_scratch_memory_reuses_one_buffer_per_stream(monkeypatch):
    """Triton 3.6, a kernel with global scratch memory (device-side TMA descriptors): fix()'s function calls
    the C entry point with a buffer from the allocator Triton would call, sized for its grid, allocated once
    per (device, stream, size) and passed again on the next call; a dependent launch (pdl) takes a buffer
    apart; while a CUDA graph is being captured each launch gets its own. The general launch() keeps the
    wrapper, which allocates per launch."""
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    run = _Wrapper(global_scratch_size=128)
    run.launch_pdl, run.num_ctas, run.global_scratch_align = 0, 1, 64
    entry = launcher._scratch_entry(run)
    assert entry == (run.launch, (False, False), 128, 64, False)
    run.launch_pdl = 1
    assert launcher._scratch_entry(run) == (run.launch, (False, True), 128, 64, True)
    for attr, value in (("profile_scratch_size", 8), ("global_scratch_size", 0)):
        other = _Wrapper(global_scratch_size=128)
        other.launch_pdl, other.num_ctas, other.global_scratch_align = 0, 1, 64
        setattr(other, attr, value)
        assert launcher._scratch_entry(other) is None, attr
    allocations = []

    def allocate(size, align, stream):
        allocations.append((size, align, stream))
        return torch.empty(size, dtype=torch.int8)

    triton.set_allocator(allocate)
    monkeypatch.setattr(launcher, "_SCRATCH", {})
    try:
        bound, misses = _bound()
        x, y = torch.randn(40), torch.empty(40)
        fixed = bound.fix((3, 2), x, y, 40, 0.5)
        fixed(x, y)
        calls, wrapped = [], []
        bound._compiled[misses[0][1]] = (lambda *a: wrapped.append(a), "function", "metadata", ())
        bound._scratch_entries[misses[0][1]] = (lambda *a: calls.append(a), (False, False), 128, 64, False)
        fixed(x, y)
        fixed(x, y)
        assert allocations == [(6 * 128, 64, 1234)] and not wrapped
        assert launcher._scratch(6 * 128, 64, 0, 1234, True) is not calls[0][7]  # dependent launches: apart
        assert launcher._scratch(6 * 128, 64, 0, 1234, True) is launcher._scratch(6 * 128, 64, 0, 1234, True)
        del allocations[1:]
        assert calls[0][:5] == (3, 2, 1, 1234, "function") and calls[0][5:7] == (False, False)
        assert calls[0][7] is calls[1][7] and calls[0][7].numel() == 6 * 128
        assert calls[0][8:13] == (None, "metadata", None, None, None)
        assert calls[0][13:] == (x.data_ptr(), y.data_ptr(), 40, 0.5, 16, 3)
        monkeypatch.setattr(launcher, "_capturing", lambda: True)
        fixed(x, y)
        assert len(allocations) == 2 and calls[2][7] is not calls[0][7]
        bound.launch((3, 2), x, y, 40, 0.5)
        assert len(wrapped) == 1 and len(calls) == 3
    finally:
        triton.set_allocator(triton.runtime._allocation.NullAllocator())


@triton.jit
def _copy_hinted_kernel(src_ptr, dst_ptr, unused_ptr, n, PREFETCH: tl.constexpr, BLOCK: tl.constexpr):
    """dst = src; PREFETCH adds an inline-PTX no-op (a hint's shape); unused_ptr is never touched."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    values = tl.load(src_ptr + offs, mask=mask)
    if PREFETCH:
        values = tl.inline_asm_elementwise("mov.u32 $0, $1;", "=r,r", [values], dtype=tl.int32, is_pure=False,
                                           pack=1)
    tl.store(dst_ptr + offs, values, mask=mask)


@pytest.mark.gpu
@pytest.mark.mutation_analysis_gives_up
def test_gpu_traced_launch_turns_hints_off():
    """A launch traced by torch.compile runs with the hints of TRACED_OFF off, so torch's analysis of the
    written arguments succeeds and an output also passed as a placeholder keeps its values; launched
    through wrap_triton with the hint on, the analysis gives up, which tests/isolated.MutationAnalysisWatch
    (what fails any GPU test where it happens) sees."""
    from .isolated import MutationAnalysisWatch

    bound = bind(_copy_hinted_kernel, PREFETCH=True, BLOCK=256)

    @torch.library.triton_op("tk_test::copy_hinted", mutates_args=())
    def copy(x: torch.Tensor) -> torch.Tensor:  # as the package's ops launch: a bound kernel in a triton_op
        y = torch.empty_like(x)
        bound.launch((4,), x, y, y, x.numel())  # y twice: the output and a placeholder
        return y

    src = torch.arange(1000, device="cuda", dtype=torch.int32)
    torch._dynamo.reset()
    with MutationAnalysisWatch() as watch:
        assert torch.equal(torch.compile(lambda x: copy(x) + 1, fullgraph=True)(src), src + 1)
    assert not watch.failures

    def copy_hinted(x):
        y = torch.empty_like(x)
        torch.library.wrap_triton(_copy_hinted_kernel)[(4,)](x, y, y, x.numel(), PREFETCH=True, BLOCK=256)
        return y

    torch._dynamo.reset()
    with MutationAnalysisWatch() as watch:
        torch.compile(copy_hinted, fullgraph=True)(src)
    assert watch.failures
