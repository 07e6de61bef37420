"""Grid-wide exchange between the programs of one launch: every program publishes two (W,) fp32 vectors
and reads every program's, with no second launch, no counter and no fence.

Used by the training-mode ResNet-MLP kernels (fused_resnet.py), whose batch norm needs statistics over
every row tile of the batch at every layer. It only works when all programs of the grid are resident at
once (at most one per SM): the launcher sizes the grid for that, and a wait that gives up (after
``MAX_SPIN`` polls) flags the launch instead of hanging it.

Protocol, barrier k of a launch (see :func:`exchange`): program p stores its values as 64-bit words
(tag_k << 32) | bits(value) into slot k % 2 of the exchange buffer, then polls (volatile loads, L1
bypassed) until every program's words of that slot carry tag_k. A word is written whole (64-bit stores
are single-copy atomic), so a reader that sees the tag also sees the value: the data is its own barrier.
Tags come from a barrier count kept in device memory across launches (``state[0]``), so a reused buffer
never holds a stale word with the current tag.

softmax_regression.py's fused SGD step also exchanges data between co-resident programs, but with a
different primitive: an all-reduce of a (batch, classes) tile by int64 atomic adds of fixed-point values
whose low bits count contributions, so the sum is exact in any order of arrival. Here every program
needs each other program's values separately (the batch statistics are merged with Chan's formula, in
one fixed order, not summed), so the exchange is an all-gather of tagged words. The two share
``MAX_SPIN``.
"""
from __future__ import annotations

import functools
import inspect
import sys
import types

import torch
import triton
import triton.language as tl
from triton.runtime.jit import KernelInterface

from .runtime import next_power_of_2

MAX_SPIN = 1 << 20  # polls of a grid-wide wait before giving up (~1 s; only if programs are not resident)


@triton.jit
def barrier_tag(base, k):
    """Tag of barrier k of a launch whose first barrier follows ``base``: 1 .. 2**31 - 2, never 0 (the
    value the exchange buffer starts with), and different from the last few barriers' tags."""
    return (base + k) % 2147483646 + 1


@triton.jit
def exchange(sync_ptr, tag, k, va, vb, pid, n_prog, failed, max_spin, NP: tl.constexpr, W: tl.constexpr):
    """Grid-wide exchange of two (W,) fp32 vectors per program: program ``pid`` publishes (va, vb) for
    barrier ``k`` and waits until every program has published its own; returns the (NP, W) tiles of all
    programs' va and vb (rows >= n_prog are 0) and the updated per-word timeout flags ``failed``.

    Each value travels as one 64-bit word (tag << 32) | bits(value): a reader that sees the barrier's tag
    in a word also sees its value (64-bit stores are single-copy atomic), so the data is its own barrier:
    one plain store, then volatile loads (L1 bypassed) until every word carries the tag, with no counter
    or fence. A program's words are interleaved (va[c], vb[c]) so one (NP, W, 2) load polls everything.
    Barrier k uses buffer k % 2: a program can write barrier k+2's words only after it has read every
    program's words of barrier k+1, which each program wrote after it had read barrier k's.
    The poll is bounded (``max_spin``): if the programs are not all resident it flags the missing words
    in ``failed`` (never waited for again) and stops waiting (the results are then wrong, and the
    launcher reports it) instead of hanging.
    """
    publish(sync_ptr, tag, k, va, vb, pid, NP, W)
    return gather(sync_ptr, tag, k, n_prog, failed, max_spin, NP, W)


@triton.jit
def publish(sync_ptr, tag, k, va, vb, pid, NP: tl.constexpr, W: tl.constexpr):
    """First half of exchange: store this program's tagged words for barrier k (returns at once)."""
    cols = tl.arange(0, W)
    e = tl.arange(0, 2)
    slot = sync_ptr + (k % 2) * (NP * 2 * W)
    words = (tag.to(tl.int64) << 32) | (tl.join(va, vb).to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
    tl.store(slot + pid * (2 * W) + 2 * cols[:, None] + e[None, :], words)  # (W, 2): va[c], vb[c] interleaved


@triton.jit
def _any(flags):
    """Whether any element of an (NP, W, 2) 0/1 tile is set (one block-wide reduction)."""
    return tl.max(tl.max(tl.max(flags, axis=2), axis=1), axis=0) > 0


@triton.jit
def _lacking(got, qmask, tag):
    """Per word: 1 where an (unmasked) exchange word does not carry ``tag`` yet."""
    return tl.where(qmask & ((got >> 32) != tag), 1, 0)


@triton.jit
def gather(sync_ptr, tag, k, n_prog, failed, max_spin, NP: tl.constexpr, W: tl.constexpr):
    """Second half of exchange: poll until every program's words of barrier k carry ``tag``; unpack.
    ``failed`` is per word (NP, W, 2): a word that timed out once is not waited for again."""
    got, qmask, failed, _ = _poll(sync_ptr, tag, k, n_prog, failed, max_spin, NP, W)
    a, b = _unpack(got, qmask)
    return a, b, failed


@triton.jit
def _poll(sync_ptr, tag, k, n_prog, failed, max_spin, NP: tl.constexpr, W: tl.constexpr):
    """The wait of gather: (the (NP, W, 2) words, their program mask, the updated timeout flags, the polls
    after the first load)."""
    cols = tl.arange(0, W)
    e = tl.arange(0, 2)
    q = tl.arange(0, NP)
    slot = sync_ptr + (k % 2) * (NP * 2 * W)
    offs = q[:, None, None] * (2 * W) + 2 * cols[None, :, None] + e[None, None, :]
    qmask = (q < n_prog)[:, None, None]
    got = tl.load(slot + offs, mask=qmask, other=0, volatile=True)
    spins = 0
    while _any(_lacking(got, qmask, tag) * (1 - failed)) & (spins < max_spin):
        got = tl.load(slot + offs, mask=qmask, other=0, volatile=True)
        spins += 1
    failed = failed | _lacking(got, qmask, tag)
    return got, qmask, failed, spins


@triton.jit
def _unpack(got, qmask):
    """The va and vb tiles (NP, W) of the words (rows of programs past n_prog 0)."""
    vals = tl.where(qmask, (got & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True), 0.0)
    a, b = tl.split(vals)
    return a, b


@triton.jit
def barriers_begin(state_ptr, TRAIN: tl.constexpr, NP: tl.constexpr, W: tl.constexpr):
    """Before the first exchange: (barrier count so far, per-word timeout flags)."""
    if TRAIN:
        base = tl.load(state_ptr)
    else:
        base = tl.zeros([], dtype=tl.int32)
    return base, tl.zeros([NP, W, 2], dtype=tl.int32)


@triton.jit
def barriers_end(state_ptr, base, n_bar, failed, pid, TRAIN: tl.constexpr):
    """After the last exchange: program 0 advances the barrier count (every program has read ``base`` by
    then), any program whose wait timed out raises the error flag."""
    if TRAIN:
        if pid == 0:
            tl.store(state_ptr, (base + n_bar) % 2147483646)
        if _any(failed):
            tl.store(state_ptr + 1, 1)


# ----------------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------------
def buffers(n_prog: int, width: int, device) -> dict:
    """The exchange words (2 buffers x NP programs x 2W, int64, tag 0 = nothing) and [barrier count,
    error flag] of a launch of ``n_prog`` exchanging programs; reused across launches (the count keeps
    tags fresh)."""
    NP = next_power_of_2(n_prog)
    return {"sync": torch.zeros(2 * NP * 2 * width, device=device, dtype=torch.int64),
            "state": torch.zeros(2, device=device, dtype=torch.int32), "_np": NP}


def check_sync(*bufs) -> None:
    """Raise if a launch gave up waiting for its programs in a grid-wide exchange (one host sync per
    buffer)."""
    for b in bufs:
        st = b.get("state") if isinstance(b, dict) else None
        if st is not None and int(st[1].item()):
            raise RuntimeError("a fused ResNet launch timed out in a grid-wide exchange (its programs were not "
                               "all resident at once, e.g. another kernel held the SMs); its results are invalid")


# ----------------------------------------------------------------------------------------------------
# The timed exchange (bench.resnet_numerics only). A kernel that calls this file's functions (imported by
# name) can be compiled again with :func:`timed`'s in their place (rebind), where gather, barriers_begin and
# barriers_end also count, per program, the nanoseconds spent waiting in exchanges and the polls issued
# (wait counter: ns * 2**20 + polls, int64, after the exchange words) and the kernel's duration (int32 ns
# modulo 2**32, after the state words). The counters are added with relaxed atomics, so a launch needs
# them zeroed (timed_buffers). The functions above have no such code.
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _gather_timed(sync_ptr, tag, k, n_prog, failed, max_spin, NP: tl.constexpr, W: tl.constexpr):
    """gather, adding its wait to this program's wait counter."""
    t0 = tl.extra.cuda.globaltimer()
    got, qmask, failed, spins = _poll(sync_ptr, tag, k, n_prog, failed, max_spin, NP, W)
    waited = ((tl.extra.cuda.globaltimer() - t0) << 20) + spins + 1
    tl.atomic_add(sync_ptr + 2 * NP * 2 * W + tl.program_id(0), waited, sem="relaxed")
    a, b = _unpack(got, qmask)
    return a, b, failed


@triton.jit
def _barriers_begin_timed(state_ptr, TRAIN: tl.constexpr, NP: tl.constexpr, W: tl.constexpr):
    """barriers_begin, then the start time subtracted from this program's duration counter."""
    base, failed = barriers_begin(state_ptr, TRAIN, NP, W)
    tl.atomic_add(state_ptr + 2 + tl.program_id(0), -tl.extra.cuda.globaltimer().to(tl.int32), sem="relaxed")
    return base, failed


@triton.jit
def _barriers_end_timed(state_ptr, base, n_bar, failed, pid, TRAIN: tl.constexpr):
    """barriers_end, then the end time added to this program's duration counter."""
    barriers_end(state_ptr, base, n_bar, failed, pid, TRAIN)
    tl.atomic_add(state_ptr + 2 + pid, tl.extra.cuda.globaltimer().to(tl.int32), sem="relaxed")


@functools.cache
def timed() -> types.ModuleType:
    """This module with gather, barriers_begin and barriers_end replaced by their timed versions (exchange
    recompiled against the timed gather)."""
    return rebind(sys.modules[__name__], "timed", gather=_gather_timed, barriers_begin=_barriers_begin_timed,
                  barriers_end=_barriers_end_timed)


def timed_buffers(n_prog: int, width: int, device) -> dict:
    """:func:`buffers` with zeroed counters for ``n_prog`` programs after the exchange and state words."""
    NP = next_power_of_2(n_prog)
    return {"sync": torch.zeros(2 * NP * 2 * width + NP, device=device, dtype=torch.int64),
            "state": torch.zeros(2 + NP, device=device, dtype=torch.int32), "_np": NP, "programs": n_prog}


def counters(buf: dict) -> torch.Tensor:
    """Per program of a timed launch on ``buf``: [ns waiting * 2**20 + polls, kernel ns] (int64; reads the
    device: one host sync)."""
    n, words = buf["programs"], buf["sync"].numel() - buf["_np"]
    wait = buf["sync"][words:words + n]
    return torch.stack([wait, buf["state"][2:2 + n].to(torch.int64)], dim=1).cpu()


def rebind(module: types.ModuleType, label: str, **names) -> types.ModuleType:
    """A copy of ``module`` in which ``names`` replace the module globals of those names, with every plain
    @triton.jit function defined in ``module`` (the replacements excepted) compiled again from its own
    source against the copy's globals. A kernel reaches its helpers through its globals when it is
    compiled, so the copy's kernels call the replacements; ``module`` is left as it is."""
    twin = types.ModuleType(f"{module.__name__}[{label}]")
    scope = twin.__dict__
    scope.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    scope.update(names)
    replaced = {id(v) for v in names.values()}
    for name, value in vars(module).items():
        fn = getattr(value, "fn", None)
        if (name in names or id(value) in replaced or not isinstance(value, KernelInterface)
                or not inspect.isfunction(fn) or fn.__module__ != module.__name__):
            continue
        copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
        copy.__annotations__, copy.__kwdefaults__ = fn.__annotations__, fn.__kwdefaults__  # tl.constexpr marks
        scope[name] = triton.jit(copy)
    return twin

