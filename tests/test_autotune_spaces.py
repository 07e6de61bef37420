"""Declared config spaces: the tuner's candidates are exactly what each kernel tries, every candidate lies in
its shape's full space, the rules reject what cannot run, and the sweep plans the candidates the tuner does
try (the re-laid-out-B TMA ones included)."""
import itertools

import pytest
import torch

from autotune import kernels, spaces, sweep
from triton_kernels import conv1d, conv2d, cross_entropy, gemm, layernorm, softmax
from triton_kernels.runtime import ALL_TUNERS, Config, next_power_of_2

DIMS = (1, 7, 16, 33, 64, 100, 256, 1000, 2048, 4096, 8192)
ROWS = (1, 10, 100, 1000, 4096, 16384, 20000, 65536, 200000)


def _kernel_list(module, name):
    """The kernel file's own candidate function (absent once the kernel draws from autotune.spaces)."""
    fn = getattr(module, name, None)
    if fn is None:
        pytest.skip(f"{module.__name__} has no {name}: its tuner draws from autotune.spaces")
    return fn


def test_gemm_candidates_are_the_tuners():
    prune = _kernel_list(gemm, "_prune")
    for M, N, K in itertools.product(DIMS, DIMS, DIMS):
        for es, (tma, relayout) in itertools.product((2, 4), ((False, False), (True, False), (True, True))):
            assert spaces.candidates("gemm", M=M, N=N, K=K, dtype=es, tma=tma, relayout=relayout) == \
                prune(M, N, K, es, tma, relayout), (M, N, K, es, tma, relayout)
        assert spaces.candidates("gemm", M=M, N=N, K=K, dtype=4, f64=True) == prune(M, N, K, 4, f64=True)
    assert ALL_TUNERS["gemm"].configs == spaces.GEMM_TUNER_CONFIGS  # the list its cache file is keyed by


def test_conv1d_candidates_are_the_tuners():
    prune_conv, prune_dw = _kernel_list(conv1d, "_prune_conv"), _kernel_list(conv1d, "_prune_dw")
    for M, N, C in itertools.product(DIMS, DIMS, (3, 16, 100, 1024)):
        for es, pool in itertools.product((2, 4), (1, 3)):
            assert spaces.candidates("conv1d", M=M, N=N, C=C, dtype=es, pool=pool) == prune_conv(M, N, C, es, pool)
        assert spaces.candidates("conv1d_dw", C=C, N=N, dtype=2) == prune_dw(C, N, 2)


def test_conv2d_candidates_are_the_tuners():
    """conv2d's tuner draws from the declared space; at every ResNet-18 CIFAR layer (batch 512, bf16) the
    first candidate (the untuned choice) fits the layer's channels."""
    from bench.cases.conv2d import RESNET18_SHAPES

    prune = _kernel_list(conv2d, "_prune")
    for M, N, C, taps in itertools.product(DIMS, (3, 16, 64, 100, 512), (3, 16, 64, 256), (1, 9)):
        for es in (2, 4):
            assert spaces.candidates("conv2d", M=M, N=N, C=C, taps=taps, dtype=es) == prune(M, N, C, taps, es)
    assert ALL_TUNERS["conv2d"].configs == spaces.CONV2D_TUNER_CONFIGS  # the lists their cache files are keyed by
    assert ALL_TUNERS["conv2d_flat"].configs == spaces.CONV2D_FLAT_CONFIGS
    assert ALL_TUNERS["conv2d_flat_dw"].configs == spaces.CONV2D_FLAT_DW_CONFIGS
    assert ALL_TUNERS["conv2d_transposed"].configs == spaces.CONV2D_TRANSPOSED_TUNER_CONFIGS
    assert spaces.candidates("conv2d_transposed", M=512 * 16, N=512, C=512, H=4, W=4, dtype=2)[0] == \
        spaces.CONV2D_TRANSPOSED_CONFIGS[0]  # ResNet-18 CIFAR's 512-channel 4 x 4 layers: the measured best first
    # every stride-1 3 x 3 ResNet-18 CIFAR layer "auto" gives the transposed kernel has candidates; fp32 (tf32)
    # from the 4-byte list (BLOCK_K 32)
    for C, H, W, N, k, s in RESNET18_SHAPES:
        if k == 3 and s == 1 and C >= conv2d.TRANSPOSED_AUTO_MIN_C:
            assert spaces.candidates("conv2d_transposed", M=512 * H * W, N=N, C=C, H=H, W=W, dtype=2), (C, H)
            listed = spaces.candidates("conv2d_transposed", M=512 * H * W, N=N, C=C, H=H, W=W, dtype=4)
            assert listed and all(c in spaces.CONV2D_TRANSPOSED_4BYTE_CONFIGS for c in listed), (C, H)
    assert any(c in spaces.CONV2D_4BYTE_CONFIGS for c in prune(512 * 64, 256, 256, 9, 4))
    assert not any(c in spaces.CONV2D_4BYTE_CONFIGS for c in prune(512 * 64, 256, 256, 9, 2))
    # the ResNet stem (3 -> 64 channels, 3 x 3, batch 512): the first flat candidates are the listed guesses
    stem = dict(M=512 * 32 * 32, N=64, K=27, dtype=2)
    assert spaces.candidates("conv2d_flat", **stem)[0] == spaces.CONV2D_FLAT_CONFIGS[0]
    assert spaces.candidates("conv2d_flat_dw", **stem)[0] == spaces.CONV2D_FLAT_DW_CONFIGS[0]
    for C, H, W, N, k, s in RESNET18_SHAPES:
        first = prune(512 * (H // s) * (W // s), N, C, k * k, 2)[0].kwargs
        assert first["BLOCK_N"] <= N and first["BLOCK_K"] <= max(16, C) and first["BLOCK_M"] >= 128, (C, N, first)


def test_row_kernel_candidates_are_the_tuners():
    row, looped = _kernel_list(softmax, "_row_configs"), _kernel_list(softmax, "_looped_configs")
    ln_fwd, ln_bwd = _kernel_list(layernorm, "_fwd_configs"), _kernel_list(layernorm, "_bwd_configs")
    ce = _kernel_list(cross_entropy, "_configs")
    for M, N in itertools.product(ROWS, ROWS + (10, 40, 3000, 32000, 128256)):
        long_row = next_power_of_2(N) > softmax.MAX_FUSED_N
        assert spaces.candidates("softmax", M=M, N=N) == (looped() if long_row else row(M, N))
        if next_power_of_2(N) <= layernorm.MAX_ROW_D:
            assert spaces.candidates("layernorm_fwd", M=M, D=N) == ln_fwd(M, N)
            assert spaces.candidates("layernorm_bwd", M=M, D=N) == ln_bwd(N)
        for dtype in (torch.float32, torch.bfloat16):
            assert spaces.candidates("cross_entropy", M=M, V=N, dtype=dtype) == list(ce(N, dtype.itemsize))


SHAPES = {
    "gemm": [dict(M=M, N=N, K=K, dtype=d, tma=t, relayout=r, nmajor=n, nmajor_copy_a=c, f64=f) for M, N, K in
             [(16, 16, 16), (128, 10, 784), (1024, 16, 16), (4096, 1024, 8704), (8192, 8192, 8192), (100, 3000, 33)]
             for d in ("bfloat16", "float32")
             for t, r, n, c in ((False, False, False, False), (True, False, False, False), (True, True, False, False),
                                (True, True, True, False), (True, True, False, True)) for f in (False, True)],
    "gemm_backward": [dict(M=M, N=N, K=K, dtype=d) for M, N, K in [(128, 10, 784), (1024, 16, 16), (512, 1024, 8704),
                                                                   (1, 1, 1)] for d in ("bfloat16", "float32")],
    "conv1d": [dict(M=M, N=N, C=C, dtype=d, pool=p) for M, N, C in [(4, 16, 3), (5000, 256, 256), (64, 1024, 70)]
               for d in ("float16", "float32") for p in (1, 3)],
    "conv1d_dw": [dict(C=C, N=N, dtype=d) for C, N in [(3, 16), (256, 256), (70, 1024)] for d in ("float16", "float32")],
    "conv1d_dw_tma": [dict(C=C, N=N, dtype=d) for C, N in [(3, 16), (256, 256), (70, 1024)]
                      for d in ("float16", "bfloat16")],
    "conv2d": [dict(M=M, N=N, C=C, taps=t, dtype=d) for M, N, C, t in [(4, 16, 3, 9), (524288, 64, 3, 9),
                                                                      (131072, 128, 64, 1), (8192, 512, 512, 9)]
               for d in ("bfloat16", "float32")],
    "conv2d_flat": [dict(M=M, N=N, K=K, dtype=d, stats=st) for M, N, K in [(4, 16, 9), (524288, 64, 27), (100, 3, 126),
                                                                          (131072, 512, 128)]
                    for d in ("bfloat16", "float32") for st in (False, True)],
    "conv2d_flat_dw": [dict(M=M, N=N, K=K, dtype=d) for M, N, K in [(4, 16, 9), (524288, 64, 27), (100, 3, 126),
                                                                   (131072, 512, 128)] for d in ("bfloat16", "float32")],
    "conv2d_transposed": [dict(M=B * H * W, N=N, C=C, H=H, W=W, taps=t, dtype=d)
                          for B, C, H, W, N, t in [(512, 512, 4, 4, 512, 9), (2, 16, 2, 8, 20, 25), (64, 256, 8, 8, 256, 1),
                                                   (1, 64, 16, 32, 64, 9)] for d in ("bfloat16", "float32")],
    "softmax": [dict(M=M, N=N) for M, N in itertools.product((1, 100, 8192), (10, 1000, 16384, 32000, 200000))],
    "layernorm_fwd": [dict(M=M, D=D) for M, D in itertools.product((1, 100, 16384), (10, 768, 4096, 16384))],
    "layernorm_bwd": [dict(M=M, D=D) for M, D in itertools.product((1, 100, 16384), (10, 768, 4096, 16384))],
    "cross_entropy": [dict(M=M, V=V, dtype=d) for M, V in itertools.product((8, 8192), (10, 4000, 32000, 128256))
                      for d in ("float32", "bfloat16")],
}


@pytest.mark.parametrize("kernel", sorted(SHAPES))
def test_every_candidate_lies_in_the_full_space(kernel):
    assert set(SHAPES) == set(spaces.SPACES)
    sp = spaces.space(kernel)
    for shape in SHAPES[kernel]:
        ctx = sp.context(**shape)
        for c in sp.tuner(ctx):
            assert sp.broken(c, ctx) == [], (kernel, shape, c)
        assert isinstance(sp.interpret(ctx), Config)


def test_rules_reject_what_cannot_run():
    big = dict(M=8192, N=8192, K=8192, dtype="bfloat16", tma=False)
    tile = {"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8}
    assert "shared_memory" in spaces.rejected("gemm", Config(tile, 16, 5), **big)  # 5 x 128 KB of tiles
    assert "registers" in spaces.rejected("gemm", Config({**tile, "BLOCK_K": 32}, 4, 2), **big)  # 512 acc/thread
    assert spaces.rejected("gemm", Config({**tile, "BLOCK_K": 32}, 16, 2), **big) == []
    assert spaces.rejected("gemm", Config({**tile, "BLOCK_K": 32, "TMA": 1}, 16, 2), **big) == ["variant"]
    assert spaces.rejected("gemm", Config({**tile, "BLOCK_K": 32, "TMA": 1}, 16, 2), **dict(big, tma=True)) == []
    assert "not_too_large" in spaces.rejected("gemm", Config({**tile, "BLOCK_K": 32}, 16, 2), **dict(big, M=16))
    assert spaces.rejected("cross_entropy", Config({"BLOCK_V": 1024, "PER_SM": 16}, 8, 1), M=8, V=1000) == \
        ["warps_per_sm"]
    fp32 = spaces.full("gemm", M=4096, N=4096, K=4096, dtype="float32")
    bf16 = spaces.full("gemm", M=4096, N=4096, K=4096, dtype="bfloat16")
    assert 1000 < len(fp32) < len(bf16)  # 4-byte tiles fill shared memory sooner
    assert not any(spaces.rejected("gemm", c, M=4096, N=4096, K=4096, dtype="float32") for c in fp32[::50])


def test_the_16_warp_tma_tile_is_offered_only_where_its_epilogue_fits():
    """The 16-warp 128 x 256 TMA tile overflows shared memory with every epilogue but the erf GELU's (its sm_90
    compiles): the tuner offers it for activation="gelu" or an unknown activation, never for the others."""
    sixteen = [c for c in spaces.GEMM_TMA_CONFIGS if c.num_warps == 16]
    assert sixteen
    shape = dict(M=4096, N=1024, K=8704, dtype="bfloat16", tma=True)
    for activation, offered in ((None, True), ("gelu", True), ("none", False), ("relu", False), ("gelu_tanh", False)):
        listed = spaces.candidates("gemm", **shape, activation=activation)
        assert all((c in listed) == offered for c in sixteen), activation
        assert all(("epilogue_shared_memory" in spaces.rejected("gemm", c, **shape, activation=activation))
                   == (not offered) for c in sixteen), activation


def test_f64_candidates_come_first_for_fp32_ieee_on_hopper_only():
    """The fp64-accumulating tiles (F64=1) head the list where gemm.f64_eligible holds (fp32 "ieee" on Hopper), are
    absent elsewhere and for 16-bit operands, and count two registers per fp64 accumulator; the sweep's layout flags
    say the same."""
    shape = dict(M=4096, N=4096, K=4096)
    listed = spaces.candidates("gemm", **shape, dtype="float32", f64=True)
    n = sum(1 for c in listed if c.kwargs.get("F64"))
    assert n and all(c.kwargs.get("F64") for c in listed[:n])
    assert not any(c.kwargs.get("F64") for c in spaces.candidates("gemm", **shape, dtype="float32"))
    assert not any(c.kwargs.get("F64") for c in spaces.candidates("gemm", **shape, dtype="bfloat16", f64=True))
    tile = Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 16, "GROUP_M": 8, "F64": 1}, 4, 3)
    assert "registers" in spaces.rejected("gemm", tile, **shape, dtype="float32", f64=True)
    assert spaces.rejected("gemm", Config(tile.kwargs, 8, 3), **shape, dtype="float32", f64=True) == []
    assert spaces.rejected("gemm", Config(tile.kwargs, 8, 3), **shape, dtype="float32") == ["variant"]
    a, b = torch.empty(64, 64, device="meta"), torch.empty(64, 64, device="meta")
    assert kernels.gemm_layout_flags(a, b, "ieee", True)["f64"]
    assert not any(kernels.gemm_layout_flags(*ops, prec, hopper)["f64"] for ops, prec, hopper in (
        ((a, b), "tf32", True), ((a, b), "ieee", False), ((a.bfloat16(), b.bfloat16()), "ieee", True)))


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="kernel must be one of"):
        spaces.candidates("matmul", M=1, N=1, K=1)
    with pytest.raises(ValueError, match="dtype must be"):
        spaces.candidates("gemm", M=1, N=1, K=1, dtype="int8")


def test_sample_is_the_same_draw_for_every_shape_of_a_dtype():
    sp = spaces.space("gemm")
    a = sweep.sampled(sp, spaces.context("gemm", M=4096, N=4096, K=4096, dtype="bfloat16"), 40, seed=3)
    b = sweep.sampled(sp, spaces.context("gemm", M=2048, N=3072, K=1024, dtype="bfloat16"), 40, seed=3)
    c = sweep.sampled(sp, spaces.context("gemm", M=4096, N=4096, K=4096, dtype="bfloat16"), 40, seed=4)
    small = sweep.sampled(sp, spaces.context("gemm", M=64, N=64, K=64, dtype="bfloat16"), 40, seed=3)
    ctx_b = spaces.context("gemm", M=2048, N=3072, K=1024, dtype="bfloat16")
    # the same draw; each shape's own rules (e.g. split-K's K slices) then drop what cannot suit it
    assert b == [x for x in a if not sp.broken(x, ctx_b)] and 10 < len(b) <= len(a) <= 40 and a != c
    assert set(small) - set(a) and all(not spaces.rejected("gemm", x, M=64, N=64, K=64, dtype="bfloat16") for x in small)


def test_layout_flags_name_the_gluon_candidates_the_tuner_tries():
    """tf32 with an N-major B: the tuner adds the Gluon kernel's candidates, on A row-major (nmajor) or on a
    row-major copy of an M-major A (nmajor_copy_a); the sweep's flags say the same (gemm.nmajor_eligible), so
    its tuner space is the tuner's list."""
    M, N, K = 2048, 2048, 512
    meta = dict(device="meta", dtype=torch.float32)
    a, a_t, b = torch.empty(M, K, **meta), torch.empty(K, M, **meta).t(), torch.empty(K, N, **meta)
    flags = kernels.gemm_layout_flags(a, b, "tf32", True)
    assert flags["nmajor"] and not flags["nmajor_copy_a"]
    flags_t = kernels.gemm_layout_flags(a_t, b, "tf32", True)
    assert flags_t["nmajor_copy_a"] and not flags_t["nmajor"]
    for other in (kernels.gemm_layout_flags(a, b, "ieee", True), kernels.gemm_layout_flags(a, b, "tf32", False),
                  kernels.gemm_layout_flags(a, torch.empty(N, K, **meta).t(), "tf32", True),
                  kernels.gemm_layout_flags(a.bfloat16(), b.bfloat16(), "tf32", True)):
        assert not other["nmajor"] and not other["nmajor_copy_a"]
    shape = dict(M=M, N=N, K=K, dtype=torch.float32, tma=True, relayout=flags["relayout"])
    assert any(c.kwargs.get("NMAJOR") for c in spaces.candidates("gemm", **shape, nmajor=flags["nmajor"]))
    assert not any(c.kwargs.get("NMAJOR") for c in spaces.candidates("gemm", **shape))


def test_sweep_plans_the_relayout_candidates_the_tuner_tries():
    """The tuner tries TMA kernels on a re-laid-out copy of B (16-bit B stored K-major, as nn.Linear's
    weight; tf32 with an N-major B); the sweep's --space tuner plans exactly the tuner's list for the
    operands' flags, those included. (It used to call gemm._prune without relayout.)"""
    M, N, K = 4096, 1024, 8704
    a = torch.empty(M, K, device="meta", dtype=torch.bfloat16)
    b = torch.empty(N, K, device="meta", dtype=torch.bfloat16).t()  # "nt": K-major B
    flags = kernels.gemm_layout_flags(a, b, "ieee", on_tma_device=True)
    assert flags["tma"] and flags["relayout"] and not flags["b_unit"]
    assert not kernels.gemm_layout_flags(a, b, "ieee", on_tma_device=False)["tma"]
    nn_flags = kernels.gemm_layout_flags(a, torch.empty(K, N, device="meta", dtype=torch.bfloat16), "ieee", True)
    assert nn_flags["tma"] and not nn_flags["relayout"]
    ctx = spaces.context("gemm", M=M, N=N, K=K, dtype=torch.bfloat16, tma=True, relayout=True)
    case = sweep.Case("gemm", {"M": M, "N": N, "K": K}, torch.bfloat16, dict(kernels.GEMM.variant, layout="nt"),
                      kernels.Plan(ctx, None, "gemm"))
    planned = [t.config for t in sweep.plan_trials("gemm", [case], "tuner")]
    assert planned == spaces.candidates("gemm", M=M, N=N, K=K, dtype=torch.bfloat16, tma=True, relayout=True)
    assert any(c.kwargs.get("B_RELAYOUT") for c in planned)
    assert [t.tuner_rank for t in sweep.plan_trials("gemm", [case], "tuner")] == list(range(len(planned)))
    full = sweep.plan_trials("gemm", [case], "full", sample=30)
    assert set(planned) <= {t.config for t in full} and len(full) > len(planned)
