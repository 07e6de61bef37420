"""The config spaces of the tuned kernels: what may be tuned, what can run, and what the runtime tuner tries.

For every tuned kernel family this module declares

* the **full space**: its kernels (variants), the knobs of each (block sizes, group size, kernel-specific
  flags) with the values each may take, and the warps and pipeline stages;
* **rules** applied before anything is compiled: hardware limits (shared memory, registers, warps per SM),
  what a kernel needs (the TMA kernel only where TMA can read the operands), and what cannot suit a shape
  (tiles far larger than the problem, tiny tiles on a large one);
* the **tuner's candidates**: the short list the runtime tuner times for a shape, best guess first (the
  first runs when tuning is off or under torch.compile tracing), pruned by the same rules as in the kernel
  files. ``candidates(kernel, ...)`` returns exactly that list; ``full(kernel, ...)`` the valid full space.

    candidates("gemm", M=4096, N=1024, K=8704, dtype="bfloat16", tma=True, relayout=True)
    full("gemm", M=4096, N=1024, K=8704, dtype="bfloat16", tma=True)
    rejected("gemm", config, M=..., ...)   # the names of the rules a config breaks

Kernels: gemm, gemm_backward, conv1d, conv1d_dw, conv1d_dw_tma, conv2d, conv2d_flat, conv2d_flat_dw,
conv2d_transposed, softmax (row and looped kernels, by the row length), layernorm_fwd, layernorm_bwd (the row
kernels), cross_entropy (row and chunked kernels, by the class count). Every tuner candidate lies in the full space
of its shape (tests/test_autotune_spaces.py checks it for many shapes).
"""
from __future__ import annotations

import dataclasses
import itertools
import os
from typing import Any, Callable, Iterable

import torch

from triton_kernels.conv2d_kernels import flat_k_pad
from triton_kernels.runtime import Config, bucket, next_power_of_2

# ----------------------------------------------------------------------------------------------------
# Hardware limits (H100: 227 KB of shared memory per block, 255 registers per thread, 64 warps per SM)
# ----------------------------------------------------------------------------------------------------
SMEM_LIMIT = 220 * 1024   # bytes of pipelined operand tiles per program (headroom for the epilogue)
MAX_ACC_REGS = 128        # fp32 accumulator registers per thread of a dot kernel (the rest: addresses, operands)
MAX_ROW_VALUES = 256      # fp32 values per thread a row kernel keeps in registers (beyond: spills)
MAX_WARPS_PER_SM = 64
WARP = 32


def elem_bytes(dtype: Any) -> int:
    """Bytes per element of a dtype given as a torch dtype, a name ("bf16", "bfloat16", "float32", ...)
    or already as a byte count."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return dtype
    if isinstance(dtype, torch.dtype):
        return dtype.itemsize
    names = {"float32": 4, "fp32": 4, "tf32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2}
    key = str(dtype).replace("torch.", "")
    if key not in names:
        raise ValueError(f"dtype must be a torch dtype, one of {sorted(names)} or a byte count, got {dtype!r}")
    return names[key]


# ----------------------------------------------------------------------------------------------------
# The declaration
# ----------------------------------------------------------------------------------------------------
Values = "tuple | Callable[[dict], tuple]"


@dataclasses.dataclass(frozen=True)
class Variant:
    """One kernel of a family: its knobs (Config.kwargs, in order; values a tuple or ``f(ctx)``), fixed
    kwargs that select it (e.g. TMA=1), warps and stages, and when it is available for a context."""

    name: str
    knobs: tuple[tuple[str, Any], ...]
    warps: tuple[int, ...]
    stages: tuple[int, ...]
    fixed: tuple[tuple[str, int], ...] = ()
    when: Callable[[dict], bool] = lambda ctx: True

    def configs(self, ctx: dict) -> Iterable[Config]:
        names = [n for n, _ in self.knobs]
        values = [v(ctx) if callable(v) else v for _, v in self.knobs]
        for combo in itertools.product(*values, self.warps, self.stages):
            kwargs = dict(zip(names, combo[:len(names)]))
            kwargs.update(self.fixed)
            yield Config(kwargs, combo[-2], combo[-1])

    def owns(self, config: Config) -> bool:
        """Whether a config is of this variant (its kwargs name exactly this variant's knobs and fixed values)."""
        names = {n for n, _ in self.knobs} | {n for n, _ in self.fixed}
        return set(config.kwargs) == names and all(config.kwargs[n] == v for n, v in self.fixed)


@dataclasses.dataclass(frozen=True)
class Rule:
    """A predicate a config must satisfy for a context; ``kind``: "hardware" (cannot compile or run),
    "kernel" (the kernel cannot serve these operands) or "shape" (cannot suit the shape)."""

    name: str
    kind: str
    ok: Callable[[Config, dict], bool]
    doc: str = ""


@dataclasses.dataclass(frozen=True)
class Space:
    kernel: str
    variants: tuple[Variant, ...]
    rules: tuple[Rule, ...]
    context: Callable[..., dict]
    tuner: Callable[[dict], list[Config]]
    interpret: Callable[[dict], Config]
    doc: str = ""

    def variant_of(self, config: Config) -> Variant | None:
        return next((v for v in self.variants if v.owns(config)), None)

    def raw(self, ctx: dict) -> list[Config]:
        """Every config of every variant available in ``ctx``, before the rules."""
        return [c for v in self.variants if v.when(ctx) for c in v.configs(ctx)]

    def broken(self, config: Config, ctx: dict) -> list[str]:
        """Names of the rules ``config`` breaks in ``ctx`` ("variant" when no available variant owns it)."""
        variant = self.variant_of(config)
        if variant is None or not variant.when(ctx):
            return ["variant"]
        return [r.name for r in self.rules if not r.ok(config, ctx)]

    def valid(self, ctx: dict, kinds: Iterable[str] = ("hardware", "kernel", "shape")) -> list[Config]:
        kinds = tuple(kinds)
        rules = [r for r in self.rules if r.kind in kinds]
        return list(dict.fromkeys(c for c in self.raw(ctx) if all(r.ok(c, ctx) for r in rules)))


SPACES: dict[str, Space] = {}


def _register(space: Space) -> Space:
    SPACES[space.kernel] = space
    return space


def space(kernel: str) -> Space:
    if kernel not in SPACES:
        raise ValueError(f"kernel must be one of {sorted(SPACES)}, got {kernel!r}")
    return SPACES[kernel]


def context(kernel: str, **shape: Any) -> dict:
    """The normalised context (shape, element size, flags) of a kernel's space."""
    return space(kernel).context(**shape)


COST_MODEL_ENV = "TRITON_PLAYGROUND_COST_MODEL"  # a saved cost model (autotune/cost_model.py)


def candidates(kernel: str, **shape: Any) -> list[Config]:
    """The runtime tuner's candidates for this shape, best guess first: exactly the list it times. When
    $TRITON_PLAYGROUND_COST_MODEL names a saved cost model of this kernel, the list ranked by the model and
    cut to $TRITON_PLAYGROUND_PRUNE_K (default 4): the kernels' tuners call this, so they time only those."""
    sp = space(kernel)
    listed = list(sp.tuner(sp.context(**shape)))
    if os.environ.get(COST_MODEL_ENV):
        from . import cost_model  # numpy and torch.load: only when a model is named

        return cost_model.prune_listed(kernel, listed, **shape)
    return listed


def full(kernel: str, *, kinds: Iterable[str] = ("hardware", "kernel", "shape"), **shape: Any) -> list[Config]:
    """The full space for this shape after the rules of ``kinds`` (all by default)."""
    sp = space(kernel)
    return sp.valid(sp.context(**shape), kinds)


def rejected(kernel: str, config: Config, **shape: Any) -> list[str]:
    """Names of the rules ``config`` breaks for this shape ([] when it is valid)."""
    sp = space(kernel)
    return sp.broken(config, sp.context(**shape))


def interpret_config(kernel: str, **shape: Any) -> Config:
    """The one config the CPU interpreter runs for this shape."""
    sp = space(kernel)
    return sp.interpret(sp.context(**shape))


def _pow2(lo: int, hi: int) -> tuple[int, ...]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return tuple(out)


# ----------------------------------------------------------------------------------------------------
# GEMM (triton_kernels/gemm.py): the pointer kernel, the persistent TMA kernel, the TMA kernel on a
# re-laid-out copy of B
# ----------------------------------------------------------------------------------------------------
def _gemm_cfg(bm, bn, bk, warps, stages, group=8):
    return Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group}, warps, stages)


GEMM_CONFIGS = [
    # large tiles for Hopper (wgmma 64xN per warpgroup; 8 warps = 2 warpgroups); first = best guess
    _gemm_cfg(128, 256, 64, 8, 3), _gemm_cfg(256, 128, 64, 8, 3), _gemm_cfg(128, 256, 64, 8, 4),
    _gemm_cfg(128, 128, 64, 8, 4), _gemm_cfg(128, 128, 64, 4, 4), _gemm_cfg(128, 128, 128, 8, 3),
    _gemm_cfg(128, 64, 64, 4, 4), _gemm_cfg(64, 128, 64, 4, 4), _gemm_cfg(64, 64, 64, 4, 4),
    # fp32 friendly (smaller K tile)
    _gemm_cfg(128, 128, 32, 8, 3), _gemm_cfg(64, 64, 32, 4, 3),
    # small / skinny shapes
    _gemm_cfg(64, 32, 32, 4, 4), _gemm_cfg(32, 64, 32, 4, 4), _gemm_cfg(32, 32, 32, 4, 3), _gemm_cfg(16, 32, 32, 2, 3),
    # outputs a few columns wide with K ~ 1000 (the Char-CNN's 512 x 1024 -> 4: 7.6 us on an H100, against
    # 12.7 us for the best tile above and cuBLAS's 11.1 us): long K steps, each program one 32-row strip
    _gemm_cfg(32, 16, 128, 4, 4), _gemm_cfg(16, 16, 128, 2, 4),
]
# the persistent TMA kernel (Hopper+, 16-byte aligned rows): same tiles, marked TMA=1
GEMM_TMA_CONFIGS = [
    Config({**c.kwargs, "TMA": 1}, c.num_warps, c.num_stages) for c in (
        _gemm_cfg(128, 256, 64, 8, 3), _gemm_cfg(128, 256, 64, 8, 4), _gemm_cfg(256, 128, 64, 8, 3),
        _gemm_cfg(128, 128, 64, 8, 4), _gemm_cfg(128, 128, 64, 4, 4), _gemm_cfg(128, 128, 128, 8, 3),
        _gemm_cfg(128, 64, 64, 4, 4), _gemm_cfg(128, 128, 32, 8, 3), _gemm_cfg(128, 256, 32, 8, 3),
        # 16 warps: the same 128 x 256 tile with half the accumulators per thread, so an epilogue of many
        # instructions per value (the erf GELU: Linear + GELU 4096 x 8704 -> 1024 on an H100, one tile per
        # SM, 110.5 -> 107.5 us; cuBLAS + gelu 105.0) has the registers and the warps to hide its latency
        _gemm_cfg(128, 256, 64, 16, 4),
        # few rows, long K (the Char-CNN's 512 x 8704 -> 1024: 128 tiles of 64 x 64 fill the SMs without
        # split-K when the copy engine runs 6-12 tiles ahead; 30.7 us on an H100, cuBLAS 31.0)
        _gemm_cfg(64, 64, 128, 4, 6), _gemm_cfg(64, 64, 64, 4, 12),
        # outputs of ~128 narrow tiles with K ~ 1000 (bf16 1024^3: 128 tiles of 64 x 128 or 128 x 64 for 132 SMs),
        # 4 stages of a 128-long K step (192 KB), so each tile's 8 K steps are mostly in flight at once: on an
        # H100 9.4 / 9.7 us against cuBLAS's 9.4 (its 128 x 64 x 64, 8 stages, 2-CTA clusters); the best tile
        # above took 10.7 us, the same two tiles with 3 stages 10.3, and BLOCK_K 64 at 5-8 stages 10.1-10.9
        _gemm_cfg(64, 128, 128, 4, 4), _gemm_cfg(128, 64, 128, 4, 4))
]
# the same TMA kernel on a copy of B in the other layout: fp32 tiles for tf32 with an N-major B, 16-bit
# tiles for a K-major B
GEMM_TMA_RELAYOUT_CONFIGS = [
    Config({**c.kwargs, "TMA": 1, "B_RELAYOUT": 1}, c.num_warps, c.num_stages) for c in (
        _gemm_cfg(128, 128, 32, 8, 3), _gemm_cfg(128, 256, 32, 8, 3), _gemm_cfg(128, 64, 32, 4, 4),
        _gemm_cfg(128, 256, 64, 8, 3), _gemm_cfg(256, 128, 64, 8, 3), _gemm_cfg(128, 128, 64, 8, 4))
]
# split-K on the pointer kernel, for outputs of few tiles with a long K (the studies' 512 x 8704 -> 1024
# Linear: 32 tiles of 128 x 128 for 132 SMs): SPLIT_K programs per tile, each over a slice of K
GEMM_SPLITK_CONFIGS = [
    Config({**c.kwargs, "SPLIT_K": split}, c.num_warps, c.num_stages) for c, split in (
        (_gemm_cfg(64, 128, 64, 4, 4), 4), (_gemm_cfg(64, 128, 64, 4, 4), 8), (_gemm_cfg(128, 128, 64, 8, 3), 4),
        (_gemm_cfg(128, 128, 64, 8, 3), 8), (_gemm_cfg(64, 64, 64, 4, 4), 8), (_gemm_cfg(64, 64, 64, 4, 4), 16),
        (_gemm_cfg(64, 64, 32, 4, 4), 16))
]
# split-K for skinny outputs (N <= 32) with a long K: the tiles above are pruned there as far wider than
# N, which left 512 x 1024 -> 4 with M / 64 = 8 programs each walking all of K
GEMM_SPLITK_SKINNY_CONFIGS = [
    Config({**c.kwargs, "SPLIT_K": split}, c.num_warps, c.num_stages) for c, split in (
        (_gemm_cfg(64, 32, 64, 4, 3), 4), (_gemm_cfg(32, 32, 64, 2, 3), 4), (_gemm_cfg(32, 32, 64, 2, 3), 8),
        (_gemm_cfg(64, 16, 128, 4, 3), 8))
]
# 4-byte operands (tf32 / tf32x3 on the tensor cores, ieee on FFMA): a stage of an fp32 tile is twice a
# 16-bit one, so the 16-bit lists above lose their deep-pipeline large tiles to the shared-memory rule
# (128 x 256 x 64 x 3 stages = 288 KB). tf32 wgmma reads 32-byte K slices (k8), so BLOCK_K 32 = one
# 128-byte swizzled row; 4 stages of 128 x 256 x 32 = 192 KB. FFMA (ieee): each thread's accumulator
# block must be large (8 x 16 = 128 values: 24 operand loads per 128 FMAs) or shared-memory loads,
# not the FMAs, bound the loop (256 x 128 on 8 warps gives that without spilling).
GEMM_FP32_CONFIGS = [
    # tf32: the TMA kernel on K-major B (nn.Linear's weight; the copy of an N-major B)
    *(Config({**c.kwargs, "TMA": 1, "B_RELAYOUT": 1}, c.num_warps, c.num_stages) for c in (
        _gemm_cfg(128, 256, 32, 8, 4), _gemm_cfg(256, 128, 32, 8, 4), _gemm_cfg(128, 128, 64, 8, 3),
        _gemm_cfg(128, 128, 32, 4, 5))),
    *(Config({**c.kwargs, "TMA": 1}, c.num_warps, c.num_stages) for c in (
        _gemm_cfg(128, 256, 32, 8, 4), _gemm_cfg(256, 128, 32, 8, 4), _gemm_cfg(128, 128, 32, 4, 5),
        _gemm_cfg(128, 128, 16, 4, 4))),
    # the pointer kernel: a tf32 tile, then FFMA tiles (ieee). In an sm_90 compile (Triton 3.6) 128 x 128
    # on 4 warps spills with ieee (36 / 720 bytes at BLOCK_K 16 / 32); 256 x 128 x 16 on 8 warps does not
    # and loads the fewest operands per FMA (179 ld.shared per 2048 FMAs, against 144 per 1024 at 64 x 64),
    # yet 128 x 64 x 32 on 4 warps runs fastest at 4096^3 on an H100 (of 26 tilings tried, none is faster)
    _gemm_cfg(128, 256, 32, 8, 4), _gemm_cfg(256, 128, 16, 8, 3), _gemm_cfg(128, 64, 32, 4, 4),
    _gemm_cfg(64, 128, 32, 4, 4),
]
# fp32 "ieee" on Hopper: the pointer kernel with PRECISION "fp64" (F64=1): the fp32 tiles widened in registers,
# exact products summed in fp64 on the fp64 tensor cores (gemm_kernels._mma), which run at the FFMA rate's peak (H100
# / H200: 67 TFLOP/s each) but reach ~90 % of it where FFMA loops reach ~70 %. An fp64 accumulator takes two
# registers. On an H200 against cuBLAS's fp32 SGEMM at 4096^3 / 8192^3: 64 x 128 x 16 on 4 warps, 4 stages 1.18x /
# 1.22x, 64 x 64 x 16 1.13x / 1.17x; 128 x 128 x 16 on 8 warps 1.08x; BLOCK_K 32 on 4 warps spills
GEMM_F64_CONFIGS = [Config({**c.kwargs, "F64": 1}, c.num_warps, c.num_stages) for c in (
    _gemm_cfg(64, 128, 16, 4, 4), _gemm_cfg(64, 64, 16, 4, 5), _gemm_cfg(128, 128, 32, 8, 3),
    _gemm_cfg(256, 64, 16, 8, 3), _gemm_cfg(128, 128, 16, 8, 4), _gemm_cfg(64, 32, 16, 4, 4),
    _gemm_cfg(32, 64, 16, 4, 4), _gemm_cfg(32, 32, 32, 4, 3))]
# tf32 with A row-major and B N-major on Hopper: the Gluon kernel (gemm_gluon.py; NMAJOR=1), B read where it
# lies as the register operand of C^T = B^T A^T. Two consumer warpgroups (8 warps of math) each own a 64 x BLOCK_M
# accumulator. 256 x 128, 4 stages of 256 x 32 + 32 x 128 fp32 = 192 KB: on an H100 against cuBLAS (`a @ b`, GPU
# times) 0.98x / 0.97x / 0.95x at 2048^3 / 4096^3 / 8192^3 (3 stages 0.92x / 0.94x / 0.95x). Narrower tiles for
# outputs of few 256 x 128 tiles (1024^3: 32 tiles for 132 SMs)
GEMM_TF32_NMAJOR_CONFIGS = [Config({**_gemm_cfg(bm, 128, 32, 8, stages).kwargs, "TMA": 1, "NMAJOR": 1}, 8, stages)
                            for bm, stages in ((256, 4), (256, 3), (128, 5), (64, 6))]
# the same kernel on a row-major copy of an M-major A (A_RELAYOUT=1): tf32 with both operands in the layouts
# tf32 wgmma cannot read, as the weight gradient of a Linear (dW = dY^T X)
GEMM_TF32_NMAJOR_COPY_A_CONFIGS = [Config({**c.kwargs, "A_RELAYOUT": 1}, c.num_warps, c.num_stages)
                                   for c in GEMM_TF32_NMAJOR_CONFIGS]
GEMM_INTERPRET_CONFIG = _gemm_cfg(32, 32, 32, 4, 1)
# every config the GEMM tuner may try (its persistent cache is keyed by a hash of these)
GEMM_TUNER_CONFIGS = (GEMM_CONFIGS + GEMM_TMA_CONFIGS + GEMM_TMA_RELAYOUT_CONFIGS + GEMM_SPLITK_CONFIGS
                      + GEMM_SPLITK_SKINNY_CONFIGS + GEMM_FP32_CONFIGS + GEMM_TF32_NMAJOR_CONFIGS
                      + GEMM_TF32_NMAJOR_COPY_A_CONFIGS + GEMM_F64_CONFIGS)
SPLITK_MAX_TILES = 64   # split-K is offered when C has fewer 128 x 128 tiles than this ...
SPLITK_MIN_K = 1024     # ... and K is at least this long


def _gemm_context(M: int, N: int, K: int, dtype: Any = "float32", tma: bool = False, relayout: bool = False,
                  nmajor: bool = False, nmajor_copy_a: bool = False, activation: str | None = None,
                  f64: bool = False) -> dict:
    """f64: the fp64-accumulating pointer kernel can serve this GEMM (fp32 "ieee" on Hopper: gemm.f64_eligible)."""
    elem = elem_bytes(dtype)
    return {"M": int(M), "N": int(N), "K": int(K), "elem": elem, "tma": bool(tma),
            "relayout": bool(tma and relayout), "nmajor": bool(tma and nmajor),
            "nmajor_copy_a": bool(tma and nmajor_copy_a), "activation": activation, "f64": bool(f64 and elem == 4)}


def _tiles(c: Config) -> tuple[int, int, int]:
    return c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"]


def _stage_bytes(c: Config, ctx: dict) -> int:
    """Shared memory of the pipelined operand tiles: num_stages x (A tile + B tile)."""
    bm, bn, bk = _tiles(c)
    return c.num_stages * (bm * bk + bk * bn) * ctx["elem"]


def _gemm_smem(c: Config, ctx: dict) -> bool:
    return _stage_bytes(c, ctx) <= SMEM_LIMIT


def _gemm_epilogue_smem(c: Config, ctx: dict) -> bool:
    """16-warp TMA tiles: Triton 3.6 runs the epilogue of one tile beside the next tile's loads, with a
    BLOCK_M x BLOCK_N scratch of its own, for every epilogue but the erf GELU's (sm_90 compiles of 128 x 256 x 64,
    4 stages, bf16: 262,176 bytes of shared memory, 196,640 with the erf GELU; an SM has 232,448). An unknown
    activation (None) keeps the tile."""
    if not (c.kwargs.get("TMA", 0) and c.num_warps == 16) or ctx["activation"] in (None, "gelu"):
        return True
    return _stage_bytes(c, ctx) + c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] * ctx["elem"] <= SMEM_LIMIT


def _gemm_not_too_large(c: Config, ctx: dict) -> bool:
    bm, bn, bk = _tiles(c)
    return bm <= 2 * bucket(ctx["M"]) and bn <= 2 * bucket(ctx["N"]) and bk <= 2 * bucket(ctx["K"])


def _gemm_not_too_small(c: Config, ctx: dict) -> bool:
    bm, bn, _ = _tiles(c)
    return not (ctx["M"] * ctx["N"] >= 2048 * 2048 and bm * bn < 64 * 64)


def _splitk_slices(c: Config, ctx: dict) -> bool:
    split = c.kwargs.get("SPLIT_K", 1)
    return split == 1 or ctx["K"] >= 2 * split * c.kwargs["BLOCK_K"]


def _splitk_wanted(ctx: dict) -> bool:
    tiles = -(-ctx["M"] // 128) * -(-ctx["N"] // 128)
    return tiles < SPLITK_MAX_TILES and ctx["K"] >= SPLITK_MIN_K


def _acc_registers(c: Config, ctx: dict, accumulators: int = 1) -> bool:
    bm, bn = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]
    accumulators *= 2 if c.kwargs.get("F64", 0) else 1  # an fp64 accumulator takes two registers
    return bm * bn * accumulators <= MAX_ACC_REGS * WARP * c.num_warps


def _gemm_tuner(ctx: dict) -> list[Config]:
    """gemm.py's ``_prune``: the lists above (TMA ones where TMA can read the operands, re-laid-out ones
    where the copy of B stays TMA-aligned, split-K ones where C has few tiles and K is long), minus what
    overflows shared memory (with the epilogue's scratch where it has one), tiles far larger than the
    problem, tiny tiles on a large problem and K slices shorter than two BLOCK_K steps."""
    out = []
    pool = (GEMM_CONFIGS + (GEMM_TMA_CONFIGS if ctx["tma"] else []) + (GEMM_TMA_RELAYOUT_CONFIGS if ctx["relayout"] else [])
            + (GEMM_SPLITK_CONFIGS if _splitk_wanted(ctx) else [])
            + (GEMM_SPLITK_SKINNY_CONFIGS if _splitk_wanted(ctx) and ctx["N"] <= 64 else [])
            + (GEMM_TF32_NMAJOR_CONFIGS if ctx["nmajor"] else [])
            + (GEMM_TF32_NMAJOR_COPY_A_CONFIGS if ctx["nmajor_copy_a"] else []))
    if ctx["elem"] == 4:  # the 4-byte tiles, each only where its kernel can run
        pool += [c for c in GEMM_FP32_CONFIGS if (not c.kwargs.get("TMA") or ctx["tma"])
                 and (not c.kwargs.get("B_RELAYOUT") or ctx["relayout"])]
    if ctx["f64"]:  # first: at large shapes they beat every FFMA tile
        pool = GEMM_F64_CONFIGS + pool
    pool = list(dict.fromkeys(pool))
    for c in pool:
        if (_gemm_smem(c, ctx) and _gemm_epilogue_smem(c, ctx) and _gemm_not_too_large(c, ctx)
                and _gemm_not_too_small(c, ctx) and _splitk_slices(c, ctx)):
            out.append(c)
    return out or [GEMM_INTERPRET_CONFIG]


_GEMM_TILES = (("BLOCK_M", _pow2(16, 256)), ("BLOCK_N", _pow2(16, 256)), ("BLOCK_K", _pow2(16, 128)),
               ("GROUP_M", (1, 4, 8, 16)))
_GEMM_WARPS, _GEMM_STAGES = (2, 4, 8, 16), (1, 2, 3, 4, 5)
_GEMM_TMA_STAGES = _GEMM_STAGES + (6, 8, 10, 12)  # the copy engine can run far ahead of the math
# the Gluon kernel: any BLOCK_M a wgmma takes as its N (two warpgroups of 64 rows: BLOCK_N 128), one k8 x 4 step
_NMAJOR_TILES = (("BLOCK_M", (64, 128, 256)), ("BLOCK_N", (128,)), ("BLOCK_K", (32,)), ("GROUP_M", (8,)))
_NMAJOR_STAGES = (3, 4, 5, 6)

# rules every output-tile space (GEMM, conv1d, conv2d) applies alike
_THREADS_RULE = Rule("threads", "hardware",
                     lambda c, ctx: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] >= 4 * WARP * c.num_warps,
                     "at least 4 accumulators per thread (smaller tiles leave warps idle)")
_CONV_SMEM_RULE = Rule("shared_memory", "hardware", _gemm_smem,
                       "num_stages x (x tile + weight tile) bytes <= SMEM_LIMIT")
_NOT_TOO_LARGE_RULE = Rule("not_too_large", "shape", _gemm_not_too_large,
                           "tiles at most twice the problem (power-of-two bucket)")
_NOT_TOO_SMALL_RULE = Rule("not_too_small", "shape", _gemm_not_too_small,
                           "no tile under 64 x 64 on an M x N >= 2048^2 problem")


GEMM = _register(Space(
    "gemm",
    variants=(
        Variant("pointer", _GEMM_TILES, _GEMM_WARPS, _GEMM_STAGES),
        Variant("tma", _GEMM_TILES, _GEMM_WARPS, _GEMM_TMA_STAGES, fixed=(("TMA", 1),), when=lambda ctx: ctx["tma"]),
        Variant("tma_relayout", _GEMM_TILES, _GEMM_WARPS, _GEMM_STAGES, fixed=(("TMA", 1), ("B_RELAYOUT", 1)),
                when=lambda ctx: ctx["relayout"]),
        Variant("tf32_nmajor", _NMAJOR_TILES, (8,), _NMAJOR_STAGES, fixed=(("TMA", 1), ("NMAJOR", 1)),
                when=lambda ctx: ctx["nmajor"]),
        Variant("tf32_nmajor_copy_a", _NMAJOR_TILES, (8,), _NMAJOR_STAGES,
                fixed=(("TMA", 1), ("NMAJOR", 1), ("A_RELAYOUT", 1)), when=lambda ctx: ctx["nmajor_copy_a"]),
        # split-K only where C has few tiles and K is long (elsewhere every SM already has a tile)
        Variant("splitk", _GEMM_TILES + (("SPLIT_K", (2, 4, 8, 16)),), _GEMM_WARPS, _GEMM_STAGES,
                when=_splitk_wanted),
        # fp32 "ieee" on Hopper: exact products summed in fp64 (gemm_kernels._mma)
        Variant("f64", _GEMM_TILES, _GEMM_WARPS, _GEMM_STAGES, fixed=(("F64", 1),), when=lambda ctx: ctx["f64"]),
    ),
    rules=(
        Rule("shared_memory", "hardware", _gemm_smem, "num_stages x (A tile + B tile) bytes <= SMEM_LIMIT"),
        Rule("epilogue_shared_memory", "hardware", _gemm_epilogue_smem,
             "16-warp TMA tiles, any epilogue but the erf GELU: the stages plus a C tile <= SMEM_LIMIT"),
        Rule("registers", "hardware", _acc_registers,
             "BLOCK_M x BLOCK_N accumulators (two registers each in fp64) <= MAX_ACC_REGS per thread"),
        _THREADS_RULE, _NOT_TOO_LARGE_RULE, _NOT_TOO_SMALL_RULE,
        Rule("split_k_slices", "shape", _splitk_slices, "split-K: every K slice at least two BLOCK_K steps"),
    ),
    context=_gemm_context,
    tuner=_gemm_tuner,
    interpret=lambda ctx: GEMM_INTERPRET_CONFIG,
    doc="C = act(A @ B + bias): M, N, K; dtype; tma: TMA can read A and B (Hopper, 16-byte aligned rows); "
        "relayout: the re-laid-out copy of B would stay TMA-aligned; nmajor: tf32, A row-major, B N-major on "
        "Hopper (the Gluon kernel); nmajor_copy_a: the same on a row-major copy of an M-major A; activation: the "
        "epilogue's (None: any); f64: fp32 'ieee' on Hopper (the fp64-accumulating pointer kernel)",
))


# ----------------------------------------------------------------------------------------------------
# conv1d (triton_kernels/conv1d.py): the implicit-GEMM forward, and the weight-gradient kernel
# ----------------------------------------------------------------------------------------------------
CONV_CONFIGS = [
    _gemm_cfg(128, 256, 64, 8, 3), _gemm_cfg(128, 128, 64, 8, 4), _gemm_cfg(128, 128, 64, 4, 4),
    _gemm_cfg(256, 128, 64, 8, 3), _gemm_cfg(64, 256, 64, 8, 3), _gemm_cfg(128, 64, 64, 4, 4),
    _gemm_cfg(64, 128, 64, 4, 4), _gemm_cfg(64, 64, 64, 4, 4), _gemm_cfg(128, 128, 32, 8, 3),
    _gemm_cfg(64, 64, 32, 4, 3), _gemm_cfg(32, 64, 32, 4, 4), _gemm_cfg(32, 32, 32, 4, 3),
]
CONV_INTERPRET_CONFIG = _gemm_cfg(32, 32, 32, 4, 1)
DW_CONFIGS = [Config({"BLOCK_C": bc, "BLOCK_N": bn, "BLOCK_M": bm}, w, s) for bc, bn, bm, w, s in (
    (128, 128, 64, 8, 3), (128, 128, 32, 4, 4), (64, 128, 64, 4, 3), (128, 64, 64, 4, 3), (64, 64, 64, 4, 3),
    (128, 256, 64, 8, 3), (64, 64, 32, 4, 4))]
DW_INTERPRET_CONFIG = Config({"BLOCK_C": 32, "BLOCK_N": 32, "BLOCK_M": 32}, 4, 1)


def _conv_context(M: int, N: int, C: int, dtype: Any = "float32", pool: int = 1) -> dict:
    """M = B x output rows (after pooling), N = output channels, C = input channels."""
    return {"M": int(M), "N": int(N), "K": int(C), "C": int(C), "elem": elem_bytes(dtype), "pool": int(pool)}


def _conv_registers(c: Config, ctx: dict) -> bool:  # pooling keeps two accumulators live
    return _acc_registers(c, ctx, 2 if ctx["pool"] > 1 else 1)


def _conv_tuner(ctx: dict) -> list[Config]:
    """conv1d.py's ``_prune_conv``: shared memory, registers (two accumulators when pooling), not far
    larger than the problem."""
    out = [c for c in CONV_CONFIGS if _gemm_smem(c, ctx) and _conv_registers(c, ctx) and _gemm_not_too_large(c, ctx)]
    return out or [CONV_INTERPRET_CONFIG]


CONV1D = _register(Space(
    "conv1d",
    variants=(Variant("implicit_gemm", _GEMM_TILES, _GEMM_WARPS, _GEMM_STAGES),),
    rules=(
        _CONV_SMEM_RULE,
        Rule("registers", "hardware", _conv_registers, "accumulators (two when pooling) <= MAX_ACC_REGS per thread"),
        _THREADS_RULE, _NOT_TOO_LARGE_RULE,
    ),
    context=_conv_context, tuner=_conv_tuner, interpret=lambda ctx: CONV_INTERPRET_CONFIG,
    doc="y = act(conv1d(x, w) + bias) (+ max-pool): M = B x L_out / pool, N = C_out, C = C_in; dtype; pool",
))


def _dw_context(C: int, N: int, dtype: Any = "float32") -> dict:
    return {"C": int(C), "N": int(N), "elem": elem_bytes(dtype)}


def _dw_smem(c: Config, ctx: dict) -> bool:
    k = c.kwargs
    return c.num_stages * (k["BLOCK_C"] + k["BLOCK_N"]) * k["BLOCK_M"] * ctx["elem"] <= SMEM_LIMIT


def _dw_not_too_large(c: Config, ctx: dict) -> bool:
    return c.kwargs["BLOCK_C"] <= 2 * bucket(ctx["C"]) and c.kwargs["BLOCK_N"] <= 2 * bucket(ctx["N"])


def _dw_registers(c: Config, ctx: dict) -> bool:
    return c.kwargs["BLOCK_C"] * c.kwargs["BLOCK_N"] <= MAX_ACC_REGS * WARP * c.num_warps


CONV1D_DW = _register(Space(
    "conv1d_dw",
    variants=(Variant("split_k", (("BLOCK_C", _pow2(16, 256)), ("BLOCK_N", _pow2(16, 256)), ("BLOCK_M", _pow2(16, 128))),
                      _GEMM_WARPS, _GEMM_STAGES),),
    rules=(
        Rule("shared_memory", "hardware", _dw_smem, "num_stages x (x tile + dz tile) bytes <= SMEM_LIMIT"),
        Rule("registers", "hardware", _dw_registers, "BLOCK_C x BLOCK_N accumulators <= MAX_ACC_REGS per thread"),
        Rule("not_too_large", "shape", _dw_not_too_large, "tiles at most twice the problem"),
    ),
    context=_dw_context,
    tuner=lambda ctx: [c for c in DW_CONFIGS if _dw_smem(c, ctx) and _dw_not_too_large(c, ctx)] or [DW_INTERPRET_CONFIG],
    interpret=lambda ctx: DW_INTERPRET_CONFIG,
    doc="dw[n, c, t] = sum over rows of x[row + t, c] dz[row, n]: C = C_in, N = C_out; dtype",
))

# conv1d.py's TMA weight-gradient kernel (16-bit operands on Hopper), best guess first (H200, bf16, the Char-CNN
# layers: 128 x 128 x 32 over 5 stages at L 336, 64 x 128 at L 110)
CONV1D_DW_TMA_CONFIGS = [Config({"BLOCK_C": bc, "BLOCK_N": bn, "BLOCK_M": bm}, w, s) for bc, bn, bm, w, s in (
    (128, 128, 32, 4, 5), (128, 256, 64, 8, 3), (128, 128, 64, 8, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
    (128, 128, 32, 8, 4), (64, 64, 64, 4, 4))]
CONV1D_DW_TMA_INTERPRET_CONFIG = Config({"BLOCK_C": 32, "BLOCK_N": 32, "BLOCK_M": 16}, 4, 1)

CONV1D_DW_TMA = _register(Space(
    "conv1d_dw_tma",
    variants=(Variant("tma_split_k", (("BLOCK_C", _pow2(16, 256)), ("BLOCK_N", _pow2(16, 256)),
                                      ("BLOCK_M", _pow2(16, 128))), _GEMM_WARPS, _GEMM_STAGES),),
    rules=CONV1D_DW.rules,
    context=_dw_context,
    tuner=lambda ctx: [c for c in CONV1D_DW_TMA_CONFIGS if _dw_smem(c, ctx) and _dw_not_too_large(c, ctx)]
    or [CONV1D_DW_TMA_INTERPRET_CONFIG],
    interpret=lambda ctx: CONV1D_DW_TMA_INTERPRET_CONFIG,
    doc="conv1d_dw's sum, each sample's rows in BLOCK_M blocks read through TMA descriptors: C = C_in, N = C_out; "
        "dtype",
))


# ----------------------------------------------------------------------------------------------------
# conv2d (triton_kernels/conv2d.py): the implicit-GEMM forward over NHWC activations
# ----------------------------------------------------------------------------------------------------
# best guess first for Hopper, 16-bit: 128 x 128 x 64 on two warpgroups where C_out >= 128, 128 x 64 on one
# where C_out = 64 (ResNet's first stage), BLOCK_K 16 for the 3-channel stem; the "fits the channels" rule
# below drops tiles wider than C_out, so each ResNet layer's first candidate is the one listed for its width
CONV2D_CONFIGS = [
    _gemm_cfg(128, 128, 64, 8, 3), _gemm_cfg(128, 64, 64, 4, 4), _gemm_cfg(256, 128, 64, 8, 3),
    _gemm_cfg(128, 256, 64, 8, 3), _gemm_cfg(256, 64, 64, 8, 3), _gemm_cfg(128, 128, 64, 4, 4),
    _gemm_cfg(64, 128, 64, 4, 4), _gemm_cfg(64, 64, 64, 4, 4), _gemm_cfg(128, 128, 32, 8, 4),
    _gemm_cfg(128, 64, 32, 4, 4), _gemm_cfg(64, 64, 32, 4, 3), _gemm_cfg(32, 64, 32, 4, 3),
    _gemm_cfg(128, 64, 16, 4, 4), _gemm_cfg(128, 128, 16, 8, 4), _gemm_cfg(64, 64, 16, 4, 3),
    _gemm_cfg(32, 32, 32, 4, 3), _gemm_cfg(32, 32, 16, 4, 3), _gemm_cfg(32, 16, 16, 4, 2),
]
CONV2D_SMALLEST = CONV2D_CONFIGS[-1]  # valid for every shape: the tuner's list when nothing else fits
# fp32 (tf32 and ieee) also tries BLOCK_K 32 on wide tiles, where 64 leaves no room for the stages: at tf32 the
# best tiles of the stride-2 layers, which keep this kernel (results/NVIDIA_H200/runs/
# 2026-11-28_c80b032_conv-tf32-transposed-probe: 0.66x / 0.75x cuDNN's TF32; the list's best probed before them,
# 0.56x / 0.57x)
CONV2D_4BYTE_CONFIGS = [_gemm_cfg(128, 256, 32, 8, 4), _gemm_cfg(256, 128, 32, 8, 4), _gemm_cfg(256, 128, 32, 8, 3)]
CONV2D_TUNER_CONFIGS = CONV2D_CONFIGS + CONV2D_4BYTE_CONFIGS  # the list the tuner's cache file is keyed by
CONV2D_INTERPRET_CONFIG = _gemm_cfg(32, 32, 32, 4, 1)


def _conv2d_context(M: int, N: int, C: int, taps: int = 9, dtype: Any = "float32", stats: bool = False) -> dict:
    """M = batch x output pixels, N = output channels, C = input channels, taps = KH x KW; stats: the
    epilogue also reduces per-channel partial statistics (no extra accumulator: the same registers)."""
    return {"M": int(M), "N": int(N), "K": int(C) * int(taps), "C": int(C), "taps": int(taps),
            "elem": elem_bytes(dtype), "stats": bool(stats)}


def _conv2d_fits_channels(c: Config, ctx: dict) -> bool:
    """A tile no wider than the (bucketed) output channels, and a K step no longer than the (bucketed)
    input channels of one tap (the K loop walks C_in per tap: a longer step is only padding)."""
    return c.kwargs["BLOCK_N"] <= bucket(ctx["N"]) and c.kwargs["BLOCK_K"] <= bucket(ctx["C"])


def _conv2d_tuner(ctx: dict) -> list[Config]:
    """conv2d.py's ``_prune``: shared memory, registers, tiles not far larger than the problem, no tile under
    64 x 64 on a large one, and fitting the channels."""
    listed = CONV2D_CONFIGS + (CONV2D_4BYTE_CONFIGS if ctx["elem"] == 4 else [])
    out = [c for c in listed if _gemm_smem(c, ctx) and _acc_registers(c, ctx)
           and _gemm_not_too_large(c, ctx) and _gemm_not_too_small(c, ctx) and _conv2d_fits_channels(c, ctx)]
    return out or [CONV2D_SMALLEST]


CONV2D = _register(Space(
    "conv2d",
    variants=(Variant("implicit_gemm", _GEMM_TILES, _GEMM_WARPS, _GEMM_STAGES),),
    rules=(
        _CONV_SMEM_RULE,
        Rule("registers", "hardware", _acc_registers, "BLOCK_M x BLOCK_N accumulators <= MAX_ACC_REGS per thread"),
        _THREADS_RULE, _NOT_TOO_LARGE_RULE, _NOT_TOO_SMALL_RULE,
        Rule("fits_channels", "shape", _conv2d_fits_channels,
             "BLOCK_N <= bucket(C_out), BLOCK_K <= bucket(C_in) (a tap's channels)"),
    ),
    context=_conv2d_context, tuner=_conv2d_tuner, interpret=lambda ctx: CONV2D_INTERPRET_CONFIG,
    doc="y = act(conv2d(x, w) + bias + residual) on NHWC x: M = B x H_out x W_out, N = C_out, C = C_in, "
        "taps = KH x KW; dtype; stats",
))


# ----------------------------------------------------------------------------------------------------
# conv2d with few input channels (triton_kernels/conv2d.py's flat-K kernels): the whole K = KH x KW x C_in
# in one gathered tile; the forward's knobs are its output tile, the weight gradient's its row block and
# column tile (its programs: a fixed few per SM, each walking every S-th row block)
# ----------------------------------------------------------------------------------------------------
def _flat_cfg(bm, bn, warps, group=8):
    return Config({"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": group}, warps, 1)


def _flat_dw_cfg(bm, bn, warps, stages):
    return Config({"BLOCK_M": bm, "BLOCK_N": bn}, warps, stages)


# best guess first for the ResNet stem (3 -> 64 channels, K = 27 -> 32; measured on an H100): a 64-wide
# tile per program, so each program stores 128 whole NHWC rows; the weight gradient's 128-row blocks on 4 warps,
# 2 stages
CONV2D_FLAT_CONFIGS = [
    _flat_cfg(128, 64, 4), _flat_cfg(256, 64, 8), _flat_cfg(64, 64, 4), _flat_cfg(128, 128, 8),
    _flat_cfg(256, 128, 8), _flat_cfg(128, 32, 4), _flat_cfg(64, 32, 4), _flat_cfg(32, 32, 4), _flat_cfg(32, 16, 2),
]
CONV2D_FLAT_INTERPRET_CONFIG = _flat_cfg(32, 32, 4, group=2)
CONV2D_FLAT_DW_CONFIGS = [
    _flat_dw_cfg(128, 64, 4, 2), _flat_dw_cfg(64, 64, 4, 2), _flat_dw_cfg(256, 64, 8, 2), _flat_dw_cfg(128, 64, 4, 3),
    _flat_dw_cfg(128, 128, 8, 2), _flat_dw_cfg(128, 32, 4, 2), _flat_dw_cfg(32, 32, 4, 2), _flat_dw_cfg(32, 16, 2, 2),
]
CONV2D_FLAT_DW_INTERPRET_CONFIG = _flat_dw_cfg(32, 32, 4, 1)


def _flat_context(M: int, N: int, K: int, dtype: Any = "float32", stats: bool = False) -> dict:
    """M = batch x output pixels, N = output channels, K = KH x KW x C_in (padded to K_PAD in the kernel)."""
    return {"M": int(M), "N": int(N), "K": int(K), "K_PAD": flat_k_pad(int(K)),
            "elem": elem_bytes(dtype), "stats": bool(stats)}


def _flat_fits(c: Config, ctx: dict) -> bool:
    """A tile no wider than the (bucketed) output channels and no taller than twice the (bucketed) rows."""
    return c.kwargs["BLOCK_N"] <= max(16, bucket(ctx["N"])) and c.kwargs["BLOCK_M"] <= 2 * bucket(ctx["M"])


def _flat_registers(c: Config, ctx: dict) -> bool:
    """The output tile's accumulators and the gathered (BLOCK_M, K_PAD) tile within MAX_ACC_REGS per thread."""
    k = c.kwargs
    return k["BLOCK_M"] * (k["BLOCK_N"] + ctx["K_PAD"]) <= MAX_ACC_REGS * WARP * c.num_warps


def _flat_dw_registers(c: Config, ctx: dict) -> bool:
    k = c.kwargs
    return ctx["K_PAD"] * k["BLOCK_N"] + k["BLOCK_M"] * ctx["K_PAD"] <= MAX_ACC_REGS * WARP * c.num_warps


def _flat_dw_smem(c: Config, ctx: dict) -> bool:
    k = c.kwargs
    return c.num_stages * k["BLOCK_M"] * (ctx["K_PAD"] + k["BLOCK_N"]) * ctx["elem"] <= SMEM_LIMIT


_FLAT_TILES = (("BLOCK_M", _pow2(16, 256)), ("BLOCK_N", _pow2(16, 256)))
CONV2D_FLAT = _register(Space(
    "conv2d_flat",
    variants=(Variant("flat_k", _FLAT_TILES + (("GROUP_M", (1, 4, 8, 16)),), _GEMM_WARPS, (1,)),),
    rules=(
        Rule("registers", "hardware", _flat_registers, "BLOCK_M x (BLOCK_N + K_PAD) values <= MAX_ACC_REGS per thread"),
        _THREADS_RULE,
        Rule("fits", "shape", _flat_fits, "BLOCK_N <= bucket(C_out), BLOCK_M <= 2 bucket(M)"),
    ),
    context=_flat_context,
    tuner=lambda ctx: [c for c in CONV2D_FLAT_CONFIGS if _flat_registers(c, ctx) and _flat_fits(c, ctx)]
    or [CONV2D_FLAT_CONFIGS[-1]],
    interpret=lambda ctx: CONV2D_FLAT_INTERPRET_CONFIG,
    doc="y = act(conv2d(x, w) + bias + residual), K = KH x KW x C_in in one tile: M = B x H_out x W_out, "
        "N = C_out, K; dtype; stats",
))
CONV2D_FLAT_DW = _register(Space(
    "conv2d_flat_dw",
    variants=(Variant("split_rows", _FLAT_TILES, _GEMM_WARPS, _GEMM_STAGES),),
    rules=(
        Rule("shared_memory", "hardware", _flat_dw_smem,
             "num_stages x BLOCK_M x (K_PAD + BLOCK_N) bytes <= SMEM_LIMIT"),
        Rule("registers", "hardware", _flat_dw_registers,
             "K_PAD x BLOCK_N accumulators + the gathered tile <= MAX_ACC_REGS per thread"),
        Rule("fits", "shape", _flat_fits, "BLOCK_N <= bucket(C_out), BLOCK_M <= 2 bucket(M)"),
    ),
    context=_flat_context,
    tuner=lambda ctx: [c for c in CONV2D_FLAT_DW_CONFIGS if _flat_dw_smem(c, ctx) and _flat_dw_registers(c, ctx)
                       and _flat_fits(c, ctx)] or [CONV2D_FLAT_DW_CONFIGS[-1]],
    interpret=lambda ctx: CONV2D_FLAT_DW_INTERPRET_CONFIG,
    doc="dW[k, n] = sum_m A[m, k] dz[m, n] (A: the im2col of x, K = KH x KW x C_in): M, N = C_out, K; dtype",
))


# ----------------------------------------------------------------------------------------------------
# conv2d computed transposed (triton_kernels/conv2d.py's transposed kernel: out^T = W . X^T, TMA operands,
# persistent programs): BLOCK_P output pixels (whole image rows) x BLOCK_N output channels per tile,
# PER_SM programs per SM
# ----------------------------------------------------------------------------------------------------
def _transposed_cfg(bp, bn, warps, stages, bk=64, per_sm=1):
    return Config({"BLOCK_P": bp, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "PER_SM": per_sm}, warps, stages)


# best first, as measured at 512 channels 4 x 4, batch 512, bf16 on an H100
# (results/NVIDIA_H100_80GB_HBM3/runs/2026-11-27_3d22218_conv-transposed-probe): 54.6, 54.9, 57.1, 63.7 us; then
# 64-channel tiles, the best at 64 channels on 32 x 32 and 16 x 16 maps (results/NVIDIA_H200/runs/
# 2026-11-28_39c6ac2_conv-auto-probe: 256 x 64 on 8 or 4 warps, 98.6-99.3 us; 128 x 64 two per SM, 31.3-31.5 us)
CONV2D_TRANSPOSED_CONFIGS = [
    _transposed_cfg(256, 128, 8, 3), _transposed_cfg(256, 128, 8, 4), _transposed_cfg(128, 256, 8, 3),
    _transposed_cfg(128, 128, 8, 4), _transposed_cfg(128, 128, 4, 4), _transposed_cfg(64, 64, 4, 3, bk=32),
    _transposed_cfg(256, 64, 8, 4), _transposed_cfg(256, 64, 4, 4), _transposed_cfg(128, 64, 8, 4, per_sm=2),
    _transposed_cfg(128, 64, 4, 3, per_sm=2),
]
# fp32 at tf32, best first as measured at 64-512 channels on 32 x 32 to 4 x 4 maps, batch 512, on an H200
# (results/NVIDIA_H200/runs/2026-11-28_c80b032_conv-tf32-transposed-probe): BLOCK_K 32, where 64 leaves no room
# for the stages
CONV2D_TRANSPOSED_4BYTE_CONFIGS = [
    _transposed_cfg(256, 128, 8, 4, bk=32), _transposed_cfg(256, 128, 8, 3, bk=32),
    _transposed_cfg(256, 64, 8, 4, bk=32), _transposed_cfg(256, 64, 4, 4, bk=32),
    _transposed_cfg(128, 128, 4, 4, bk=32), _transposed_cfg(128, 256, 8, 4, bk=32),
    _transposed_cfg(128, 64, 4, 4, bk=32),
]
CONV2D_TRANSPOSED_TUNER_CONFIGS = CONV2D_TRANSPOSED_CONFIGS + CONV2D_TRANSPOSED_4BYTE_CONFIGS  # its cache key
CONV2D_TRANSPOSED_INTERPRET_CONFIG = _transposed_cfg(16, 32, 4, 1, bk=16)


def _transposed_context(M: int, N: int, C: int, H: int, W: int, taps: int = 9, dtype: Any = "float32") -> dict:
    """M = batch x output pixels, N = output channels, C = input channels, H x W the output feature map."""
    return {"M": int(M), "N": int(N), "C": int(C), "H": int(H), "W": int(W), "taps": int(taps),
            "elem": elem_bytes(dtype)}


def transposed_rows(block_p: int, H: int, W: int) -> tuple[int, int] | None:
    """(samples, rows) of a BLOCK_P-pixel tile of whole W-pixel rows, or None when such tiles would not tile
    the H x W maps (W a power of two dividing BLOCK_P; the rows per tile dividing H or a multiple of it)."""
    if W < 1 or W & (W - 1) or block_p % W:
        return None
    rows = block_p // W
    if rows <= H:
        return (1, rows) if H % rows == 0 else None
    return (rows // H, H) if rows % H == 0 and H & (H - 1) == 0 else None


def _transposed_smem(c: Config, ctx: dict) -> bool:
    k = c.kwargs
    return c.num_stages * (k["BLOCK_N"] + k["BLOCK_P"]) * k["BLOCK_K"] * ctx["elem"] <= SMEM_LIMIT


def _transposed_registers(c: Config, ctx: dict) -> bool:
    return c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_P"] <= MAX_ACC_REGS * WARP * c.num_warps


def _transposed_fits(c: Config, ctx: dict) -> bool:
    """K steps within one tap's channels, no tile wider than the output channels, whole-row pixel tiles."""
    k = c.kwargs
    return (ctx["C"] % k["BLOCK_K"] == 0 and k["BLOCK_N"] <= max(16, bucket(ctx["N"]))
            and transposed_rows(k["BLOCK_P"], ctx["H"], ctx["W"]) is not None)


def _transposed_tuner(ctx: dict) -> list[Config]:
    listed = CONV2D_TRANSPOSED_4BYTE_CONFIGS if ctx["elem"] == 4 else CONV2D_TRANSPOSED_CONFIGS
    return [c for c in listed
            if _transposed_smem(c, ctx) and _transposed_registers(c, ctx) and _transposed_fits(c, ctx)]


CONV2D_TRANSPOSED = _register(Space(
    "conv2d_transposed",
    variants=(Variant("transposed", (("BLOCK_P", _pow2(16, 256)), ("BLOCK_N", _pow2(16, 256)),
                                     ("BLOCK_K", (16, 32, 64)), ("GROUP_M", (8,)), ("PER_SM", (1, 2))),
                      _GEMM_WARPS, _GEMM_STAGES),),
    rules=(
        Rule("shared_memory", "hardware", _transposed_smem,
             "num_stages x (BLOCK_N + BLOCK_P) x BLOCK_K bytes <= SMEM_LIMIT"),
        Rule("registers", "hardware", _transposed_registers, "BLOCK_N x BLOCK_P accumulators <= MAX_ACC_REGS per thread"),
        Rule("threads", "hardware", lambda c, ctx: c.kwargs["BLOCK_P"] * c.kwargs["BLOCK_N"] >= 4 * WARP * c.num_warps,
             "at least 4 accumulators per thread"),
        Rule("fits", "shape", _transposed_fits, "BLOCK_K divides C_in, BLOCK_N <= bucket(C_out), whole-row pixel tiles"),
    ),
    context=_transposed_context, tuner=_transposed_tuner, interpret=lambda ctx: CONV2D_TRANSPOSED_INTERPRET_CONFIG,
    doc="y = act(conv2d(x, w) + bias), stride 1 or 2, computed as out^T = W . X^T: M = B x H x W, "
        "N = C_out, C = C_in, H x W the output map, taps; dtype",
))


# ----------------------------------------------------------------------------------------------------
# the fused backward of a short GEMM (triton_kernels/gemm_backward.py): dA and dB tiles in one grid
# ----------------------------------------------------------------------------------------------------
# small tiles first: the shapes it serves have few tiles of either product (MNIST's 128 x 784 -> 10:
# 2 x 13 + 13 x 1 tiles of 64 x 64). A dB tile walks all of M alone: the SGEMM MLP's 1024 x 64 -> 64 in
# fp32 (FFMA) is one 64 x 64 tile of 4.2 M multiply-adds on one SM (~19 us), sixteen 16 x 16 ones take ~1 us
GEMM_BACKWARD_CONFIGS = [
    _gemm_cfg(64, 64, 64, 4, 3), _gemm_cfg(32, 64, 64, 4, 3), _gemm_cfg(64, 32, 64, 4, 3),
    _gemm_cfg(32, 32, 64, 4, 2), _gemm_cfg(128, 64, 64, 4, 3), _gemm_cfg(64, 128, 64, 4, 3),
    _gemm_cfg(128, 128, 64, 8, 3), _gemm_cfg(128, 128, 32, 8, 4), _gemm_cfg(64, 64, 128, 4, 2),
    _gemm_cfg(32, 32, 64, 2, 3), _gemm_cfg(16, 32, 64, 2, 3), _gemm_cfg(32, 16, 64, 2, 3), _gemm_cfg(16, 16, 64, 2, 3),
    _gemm_cfg(16, 16, 128, 2, 2),
]
GEMM_BACKWARD_INTERPRET_CONFIG = _gemm_cfg(32, 32, 32, 4, 1)


def _gemm_backward_context(M: int, N: int, K: int, dtype: Any = "float32") -> dict:
    """The forward's M, N, K: dA is M x K summed over N, dB is K x N summed over M."""
    return {"M": int(M), "N": int(N), "K": int(K), "elem": elem_bytes(dtype)}


def _gemm_backward_smem(c: Config, ctx: dict) -> bool:
    """num_stages x (dC + saved + operand tile) per step: at most 3 BLOCK_K-long tiles of the larger side."""
    bm, bn, bk = _tiles(c)
    return c.num_stages * 3 * max(bm, bn) * bk * ctx["elem"] <= SMEM_LIMIT


def _gemm_backward_not_too_large(c: Config, ctx: dict) -> bool:
    """Rows (M of dA, K of dB), columns (K of dA, N of dB) and the sum's step (N of dA, M of dB) at most
    twice the larger of the two problems' sizes (power-of-two bucket)."""
    bm, bn, bk = _tiles(c)
    M, N, K = ctx["M"], ctx["N"], ctx["K"]
    return bm <= 2 * bucket(max(M, K)) and bn <= 2 * bucket(max(K, N)) and bk <= 2 * bucket(max(M, N))


def _gemm_backward_tuner(ctx: dict) -> list[Config]:
    """gemm_backward.py's candidates: the list above, minus what overflows shared memory or registers and
    tiles far larger than either product."""
    out = [c for c in GEMM_BACKWARD_CONFIGS if _gemm_backward_smem(c, ctx) and _acc_registers(c, ctx)
           and _gemm_backward_not_too_large(c, ctx)]
    return out or [GEMM_BACKWARD_INTERPRET_CONFIG]


GEMM_BACKWARD = _register(Space(
    "gemm_backward",
    variants=(Variant("grouped", _GEMM_TILES, _GEMM_WARPS, _GEMM_STAGES),),
    rules=(
        Rule("shared_memory", "hardware", _gemm_backward_smem, "num_stages x 3 x max(BLOCK_M, BLOCK_N) x BLOCK_K "
             "bytes <= SMEM_LIMIT"),
        Rule("registers", "hardware", _acc_registers, "BLOCK_M x BLOCK_N accumulators <= MAX_ACC_REGS per thread"),
        _THREADS_RULE,
        Rule("not_too_large", "shape", _gemm_backward_not_too_large,
             "tiles and the sum's step at most twice the problems (power-of-two bucket)"),
    ),
    context=_gemm_backward_context, tuner=_gemm_backward_tuner,
    interpret=lambda ctx: GEMM_BACKWARD_INTERPRET_CONFIG,
    doc="dA = dZ B^T, dB = A^T dZ, dbias of C = act(A @ B + bias), act none / relu: the forward's M, N, K; dtype",
))


# ----------------------------------------------------------------------------------------------------
# softmax (triton_kernels/softmax.py): row kernels (whole rows in registers) and looped kernels
# ----------------------------------------------------------------------------------------------------
SOFTMAX_MAX_FUSED_N = 16384  # softmax.MAX_FUSED_N: longest row (power of two) of the row kernels
_ROW_WARPS = (1, 2, 4, 8, 16, 32)


def _softmax_context(M: int, N: int) -> dict:
    bn = next_power_of_2(N)
    return {"M": int(M), "N": int(N), "bn": bn, "looped": bn > SOFTMAX_MAX_FUSED_N}


def _softmax_row_tuner(M: int, N: int) -> list[Config]:
    """softmax.py's ``_row_configs``: rows per program x warps, sized to the row length."""
    bn = next_power_of_2(N)
    out = []
    for elems in (8192, 4096, 16384, 2048):
        bm = max(1, elems // bn)
        if bm > bucket(M, 1) or bm * bn > max(SOFTMAX_MAX_FUSED_N, bn):
            continue
        for warps in (8, 4, 16):
            if warps * 32 * 4 > max(bm * bn, 512):  # fewer than 4 elements per thread: too many warps
                continue
            out.append(Config({"BLOCK_M": bm}, warps, 1))
    return list(dict.fromkeys(out)) or [Config({"BLOCK_M": 1}, 4, 1)]


def _softmax_looped_tuner() -> list[Config]:
    """softmax.py's ``_looped_configs``."""
    return [Config({"BLOCK_N": bn}, w, 1) for bn in (4096, 8192, 2048) for w in (8, 16, 4) if bn >= w * 32 * 4]


def _row_values(c: Config, ctx: dict) -> bool:
    """fp32 values each thread holds: BLOCK_M rows of the padded row length (or one BLOCK_N chunk)."""
    per_program = c.kwargs["BLOCK_M"] * ctx["bn"] if "BLOCK_M" in c.kwargs else c.kwargs["BLOCK_N"]
    return per_program <= MAX_ROW_VALUES * WARP * c.num_warps


SOFTMAX = _register(Space(
    "softmax",
    variants=(
        Variant("row", (("BLOCK_M", _pow2(1, SOFTMAX_MAX_FUSED_N)),), _ROW_WARPS, (1,), when=lambda ctx: not ctx["looped"]),
        Variant("looped", (("BLOCK_N", _pow2(256, SOFTMAX_MAX_FUSED_N)),), _ROW_WARPS, (1,), when=lambda ctx: ctx["looped"]),
    ),
    rules=(
        Rule("registers", "hardware", _row_values, "values per thread <= MAX_ROW_VALUES"),
        Rule("program_values", "hardware",
             lambda c, ctx: "BLOCK_M" not in c.kwargs or c.kwargs["BLOCK_M"] * ctx["bn"] <= max(SOFTMAX_MAX_FUSED_N, ctx["bn"]),
             "a row program holds at most MAX_FUSED_N values (or one row)"),
        Rule("rows", "shape", lambda c, ctx: "BLOCK_M" not in c.kwargs or c.kwargs["BLOCK_M"] <= bucket(ctx["M"], 1),
             "no more rows per program than the (bucketed) batch"),
        Rule("chunk", "shape", lambda c, ctx: "BLOCK_N" not in c.kwargs or c.kwargs["BLOCK_N"] >= 4 * WARP * c.num_warps,
             "a looped chunk gives every thread at least 4 values"),
    ),
    context=_softmax_context,
    tuner=lambda ctx: _softmax_looped_tuner() if ctx["looped"] else _softmax_row_tuner(ctx["M"], ctx["N"]),
    interpret=lambda ctx: (Config({"BLOCK_N": 256}, 4, 1) if ctx["looped"]
                           else Config({"BLOCK_M": max(1, min(64, 4096 // ctx["bn"]))}, 4, 1)),
    doc="(log-)softmax over rows of length N, forward and backward (same space): M rows, N",
))


# ----------------------------------------------------------------------------------------------------
# LayerNorm (triton_kernels/layernorm.py): the row kernels (rows of at most MAX_ROW_D values)
# ----------------------------------------------------------------------------------------------------
LN_MAX_ROW_D = 16384


def _ln_context(M: int, D: int) -> dict:
    return {"M": int(M), "D": int(D), "bn": next_power_of_2(D)}


def _ln_fwd_tuner(ctx: dict) -> list[Config]:
    """layernorm.py's ``_fwd_configs``."""
    bd, M = ctx["bn"], ctx["M"]
    out = []
    for bm in (1, 2, 4, 8, 16):
        if bm * bd > max(LN_MAX_ROW_D, bd) or bm > bucket(M, 1) or bm * bd < 1024 and bm < 16:
            continue
        for w in (8, 4, 16, 2):
            if w * 32 * 4 <= max(bm * bd, 128):
                out.append(Config({"BLOCK_M": bm}, w, 1))
    return out or [Config({"BLOCK_M": 1}, 4, 1)]


def _ln_bwd_tuner(ctx: dict) -> list[Config]:
    """layernorm.py's ``_bwd_configs``."""
    bd = ctx["bn"]
    configs = [Config({"PER_SM": p}, w, 1) for p in (2, 1, 4, 8, 16) for w in (8, 4, 16, 2)
               if w * 32 * 2 <= max(bd, 64) and p * w <= 32]
    return configs or [Config({"PER_SM": 2}, 4, 1)]


LAYERNORM_FWD = _register(Space(
    "layernorm_fwd",
    variants=(Variant("row", (("BLOCK_M", _pow2(1, 64)),), _ROW_WARPS, (1,)),),
    rules=(
        Rule("registers", "hardware", _row_values, "values per thread <= MAX_ROW_VALUES"),
        Rule("program_values", "hardware", lambda c, ctx: c.kwargs["BLOCK_M"] * ctx["bn"] <= max(LN_MAX_ROW_D, ctx["bn"]),
             "a program holds at most MAX_ROW_D values (or one row)"),
        Rule("rows", "shape", lambda c, ctx: c.kwargs["BLOCK_M"] <= bucket(ctx["M"], 1),
             "no more rows per program than the (bucketed) batch"),
    ),
    context=_ln_context, tuner=_ln_fwd_tuner,
    interpret=lambda ctx: Config({"BLOCK_M": max(1, min(32, 2048 // ctx["bn"]))}, 4, 1),
    doc="y = (x - mean) * rstd * w + b over rows of D <= 16384 values: M rows, D",
))


def _ln_bwd_values(c: Config, ctx: dict) -> bool:  # a program walks one row at a time: x, dy and dw/db partials
    return ctx["bn"] <= MAX_ROW_VALUES * WARP * c.num_warps


LAYERNORM_BWD = _register(Space(
    "layernorm_bwd",
    variants=(Variant("row", (("PER_SM", (1, 2, 4, 8, 16, 32)),), _ROW_WARPS, (1,)),),
    rules=(
        Rule("registers", "hardware", _ln_bwd_values, "values of a row per thread <= MAX_ROW_VALUES"),
        Rule("warps_per_sm", "hardware", lambda c, ctx: c.kwargs["PER_SM"] * c.num_warps <= MAX_WARPS_PER_SM,
             "programs per SM x warps <= 64 resident warps"),
        Rule("values_per_thread", "shape", lambda c, ctx: c.num_warps * WARP * 2 <= max(ctx["bn"], 8 * WARP),
             "every thread at least 2 values of a row (up to 4 warps on short rows)"),
    ),
    context=_ln_context, tuner=_ln_bwd_tuner, interpret=lambda ctx: Config({"PER_SM": 2}, 4, 1),
    doc="dx, dw, db of LayerNorm over rows of D <= 16384 values: M rows, D",
))


# ----------------------------------------------------------------------------------------------------
# cross-entropy (triton_kernels/cross_entropy.py): the row kernel (a row in registers) and the chunked one
# ----------------------------------------------------------------------------------------------------
CE_MAX_ONE_CHUNK_V = 8192
CE_MAX_REG_ROW_V = 32768


def _ce_context(M: int, V: int, dtype: Any = "float32") -> dict:
    return {"M": int(M), "V": int(V), "npow": next_power_of_2(V), "elem": elem_bytes(dtype)}


def _ce_tuner(ctx: dict) -> list[Config]:
    """cross_entropy.py's ``_configs``: small rows in one block (warps x programs per SM); rows up to 32768
    classes held in registers by 16 warps (the L2 prefetch of the next row first for rows of at most 64 KB);
    longer rows chunked, register double-buffering first."""
    npow, V, elem = ctx["npow"], ctx["V"], ctx["elem"]
    if npow <= CE_MAX_ONE_CHUNK_V:
        return [Config({"BLOCK_V": npow, "PER_SM": p}, w, 1) for w in (4, 2, 1, 8, 16) for p in (8, 4, 16, 32)
                if w * 32 <= max(npow // 4, 32) and w * p <= 64]
    out = []
    if npow <= CE_MAX_REG_ROW_V:
        pf_first = V * elem <= (1 << 16)
        out += [Config({"BLOCK_V": npow, "PER_SM": 1, "PREFETCH": int(pf)}, 16, 1) for pf in (pf_first, not pf_first)]
    out += [Config({"BLOCK_V": bv, "PER_SM": p, "REG_DB": db}, w, st)
            for bv, w, p, db, st in ((8192, 16, 1, 1, 1), (8192, 16, 1, 0, 1), (4096, 8, 2, 0, 2), (4096, 8, 2, 1, 1))]
    return out


_CE_PER_SM = (1, 2, 4, 8, 16, 32, 64)


def _ce_values(c: Config, ctx: dict) -> bool:
    return c.kwargs["BLOCK_V"] <= MAX_ROW_VALUES * WARP * c.num_warps


CROSS_ENTROPY = _register(Space(
    "cross_entropy",
    variants=(
        Variant("row", (("BLOCK_V", lambda ctx: (ctx["npow"],)), ("PER_SM", _CE_PER_SM)), _ROW_WARPS, (1,),
                when=lambda ctx: ctx["npow"] <= CE_MAX_ONE_CHUNK_V),
        Variant("row_prefetch", (("BLOCK_V", lambda ctx: (ctx["npow"],)), ("PER_SM", _CE_PER_SM), ("PREFETCH", (0, 1))),
                _ROW_WARPS, (1,), when=lambda ctx: CE_MAX_ONE_CHUNK_V < ctx["npow"] <= CE_MAX_REG_ROW_V),
        Variant("chunked", (("BLOCK_V", lambda ctx: tuple(b for b in _pow2(1024, 16384) if b < ctx["npow"])),
                            ("PER_SM", _CE_PER_SM), ("REG_DB", (0, 1))), _ROW_WARPS, (1, 2),
                when=lambda ctx: ctx["npow"] > CE_MAX_ONE_CHUNK_V),
    ),
    rules=(
        Rule("registers", "hardware", _ce_values, "values of a block per thread <= MAX_ROW_VALUES"),
        Rule("warps_per_sm", "hardware", lambda c, ctx: c.kwargs["PER_SM"] * c.num_warps <= MAX_WARPS_PER_SM,
             "programs per SM x warps <= 64 resident warps"),
        Rule("values_per_thread", "shape", lambda c, ctx: c.num_warps * WARP <= max(c.kwargs["BLOCK_V"] // 4, 32),
             "every thread at least 4 values of a block"),
    ),
    context=_ce_context, tuner=_ce_tuner,
    interpret=lambda ctx: Config({"BLOCK_V": min(1024, ctx["npow"]), "PER_SM": 2}, 4, 1),
    doc="fused cross-entropy forward (+ gradient) over M rows of V classes; dtype",
))
