"""SGD training of softmax regression (a single linear layer + softmax cross-entropy), fused in ONE kernel.

Math, for the batch rows i = perm[s*B : s*B + n] of step s (n = B, or fewer for the last batch):
    z_i   = W x_i + b                          W (C, K), b (C,), x_i (K,)      (C <= 16 classes)
    p_i   = softmax(z_i),  loss_i = logsumexp(z_i) - z_i[y_i],  correct_i = [argmax z_i == y_i]
    dz_i  = (p_i - onehot(y_i)) / n            (gradient of the batch-mean loss)
    dW    = sum_i dz_i x_i^T,   db = sum_i dz_i
    W    -= lr * dW,            b -= lr * db
Running sums of loss_i and correct_i stay on the device; the host reads them when it wants to.

Why one kernel, split over K. At batch 128 a step moves 401 KB of X and does ~2 MFLOP: nothing for an
H100, so a step is pure latency (dependent loads, launches, cross-program reductions). The kernel
`_sr_train_kernel` runs `n_run` consecutive steps (1 for a step, all of them for an epoch) with a grid of
S = cdiv(K, BLOCK_K) programs, S <= the SM count so that all are resident at once. Program s owns the
K slice [s*BLOCK_K, (s+1)*BLOCK_K): its slice of W^T (BLOCK_K x 16) lives in registers for the whole
run, and every step it
  1. gathers X[batch rows, slice] (BLOCK_B x BLOCK_K, through perm: no shuffled copy of X; prefetched
     during the previous step, since it does not depend on W) and forms the partial logits
     Z_s = X_slice W_slice^T (BLOCK_B x 16, tl.dot);
  2. adds Z_s to a shared accumulator with one int64 atomic per element, packed as
     (Z_s * 2^32 as an integer) * 256 + 1: the value in the high 56 bits, a count of contributions in
     the low 8. Integer addition is associative, so the sum is exact and independent of the order in
     which programs arrive (bitwise reproducible, unlike fp32 atomics), with an absolute resolution of
     S * 2^-32 on the logits (|partial logits| must stay below 2^22);
  3. polls the accumulator (volatile loads, L1 bypassed) until every element's count says that all S
     programs have added theirs: the data is its own barrier, with no fence, flag or counter, and one
     L2 round trip when the others are already done;
  4. computes softmax, loss, correct count and dz for the whole batch from the full Z (redundantly in
     every program: 2K exps, cheaper than another exchange), and updates its own W slice in
     registers, W_s^T -= lr * X_slice^T dz (tl.dot), and its copy of b (identical in every program:
     same Z, same arithmetic).
The accumulators are never cleared: step i uses buffer i % 2, and each program subtracts what the
buffer held before (two's-complement wrap-around keeps the difference exact). Two buffers suffice: a
program can add step i+2's partial to buffer i % 2 only once every program has added step i+1's,
i.e. once every program has finished reading step i. A launch takes its starting values from a
snapshot the previous launch left (program 0 writes it last), not from the buffers themselves, to which
programs that start early may already have added. The step index lives in device memory, so the
same launch (or graph replay) serves every step and nothing needs a host sync.

In the CPU interpreter programs run one after another, so there the kernel runs with one program
(BLOCK_K >= K; the count is then complete at once). The poll loop is bounded: should the programs ever
not be co-resident, the kernel sets an error flag instead of hanging, and :meth:`FusedSGDStep.read_stats`
raises.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import triton
import triton.language as tl

from .runtime import is_fake as _is_fake, launch as _launch
from .runtime import INTERPRET, Autotuner, Config, bucket, check_tensor, register_tuner

BLOCK_C = 16  # classes padded to the smallest tl.dot tile
MAX_BATCH = 1024  # the whole batch is one register tile of each program
FIX_SCALE = tl.constexpr(2.0 ** 32)  # fixed-point scale of the cross-program logit sums (|z| must stay below 2^31)
MAX_SPIN = 1 << 20  # polls before giving up (~1 s; only if the programs were not co-resident)
X_DTYPES = (torch.float32, torch.uint8)
INDEX_DTYPES = (torch.int32, torch.int64)
PRECISIONS = ("ieee", "tf32")


# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _batch_rows(perm_ptr, s, valid, N, B, offs_b):
    """Step s's batch: dataset row indices perm[s*B + r] (int64), row mask, row count (0 if not valid)."""
    start = s.to(tl.int64) * B
    left = N - start
    n_rows = tl.where(left < B, left, B).to(tl.int32)  # the last batch of an epoch may be partial
    n_rows = tl.where(valid, n_rows, 0)  # valid: this step is part of the run
    row_ok = offs_b < n_rows
    idx = tl.load(perm_ptr + start + offs_b, mask=row_ok, other=0).to(tl.int64)
    return idx, row_ok, n_rows


@triton.jit
def _batch_data(x_ptr, y_ptr, idx, row_ok, x_scale, stride_xn, stride_xk, offs_k, k_ok, X_IS_U8: tl.constexpr):
    """X[idx, slice] (BLOCK_B x BLOCK_K fp32) and the labels y[idx]."""
    label = tl.load(y_ptr + idx, mask=row_ok, other=0).to(tl.int32)
    x = tl.load(x_ptr + idx[:, None] * stride_xn + offs_k[None, :] * stride_xk,
                mask=row_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
    if X_IS_U8:
        x = (x * x_scale).to(tl.float32)
    return x, label


@triton.jit
def _sr_train_kernel(
    x_ptr, y_ptr, perm_ptr, w_ptr, b_ptr,
    state_ptr, zacc_ptr, zsnap_ptr, loss_sum_ptr, correct_sum_ptr,
    N, K, C, B, n_epoch_steps, n_run, lr, x_scale, max_spin,
    stride_xn, stride_xk, stride_wc, stride_wk,
    X_IS_U8: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """n_run SGD steps from the device step counter; program s owns W[:, s*BLOCK_K : (s+1)*BLOCK_K].

    x_ptr: (N, K) fp32 (or uint8, scaled by x_scale) dataset, y_ptr: (N,) labels, perm_ptr: (N,) order,
    w_ptr: (C, K) fp32, b_ptr: (C,) fp32 (both updated in place),
    state_ptr: (2,) int32 [step within the epoch, error flag],
    zacc_ptr: (2, BLOCK_B, BLOCK_C) int64 packed logit accumulators (never cleared),
    zsnap_ptr: (2, BLOCK_B, BLOCK_C) int64: what the accumulators held at the end of the last launch,
    loss_sum_ptr: (1,) fp32, correct_sum_ptr: (1,) int32 running sums.
    """
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    step0 = tl.load(state_ptr)

    offs_b = tl.arange(0, BLOCK_B)
    offs_c = tl.arange(0, BLOCK_C)
    offs_k = pid * BLOCK_K + tl.arange(0, BLOCK_K)
    c_ok = offs_c < C
    k_ok = offs_k < K
    # this program's slice of W^T (BLOCK_K x BLOCK_C) and the bias: registers for the whole run
    wt_ptrs = w_ptr + offs_c[None, :] * stride_wc + offs_k[:, None] * stride_wk
    wt_mask = c_ok[None, :] & k_ok[:, None]
    wt = tl.load(wt_ptrs, mask=wt_mask, other=0.0)
    bias = tl.load(b_ptr + offs_c, mask=c_ok, other=0.0)
    # step i adds to buffer i % 2 and takes the difference from what that buffer held before. The
    # starting values come from the snapshot the last launch left (the buffers themselves may already
    # hold this launch's first contributions of programs that started earlier)
    z_offs = offs_b[:, None] * BLOCK_C + offs_c[None, :]
    base = tl.load(zsnap_ptr + z_offs)
    base_next = tl.load(zsnap_ptr + BLOCK_B * BLOCK_C + z_offs)
    failed = step0 * 0  # 1 once a wait timed out: later steps then do not wait either
    loss_run = tl.load(loss_sum_ptr)  # running sums continued step by step: the same rounding however
    correct_run = tl.load(correct_sum_ptr)  # the steps are split into launches

    # software pipeline: the rows of step i+1 and the indices of step i+2 are in flight during step i
    idx, row_ok, n_rows = _batch_rows(perm_ptr, step0, n_run > 0, N, B, offs_b)
    x, label = _batch_data(x_ptr, y_ptr, idx, row_ok, x_scale, stride_xn, stride_xk, offs_k, k_ok, X_IS_U8)
    idx_n, row_ok_n, n_rows_n = _batch_rows(perm_ptr, (step0 + 1) % n_epoch_steps, n_run > 1, N, B, offs_b)
    for i in range(0, n_run):
        s = (step0 + i) % n_epoch_steps
        zbuf = zacc_ptr + (i % 2) * (BLOCK_B * BLOCK_C) + z_offs
        zmask = row_ok[:, None] & c_ok[None, :]
        # 1-2. partial logits of this K slice, packed with a count of 1, into the shared accumulator
        zp = tl.dot(x, wt, input_precision=PRECISION)
        tl.atomic_add(zbuf, (zp * FIX_SCALE).to(tl.int64) * 256 + 1, mask=zmask, sem="relaxed", scope="gpu")
        # issue the next step's loads (they do not depend on W) before waiting for the other programs
        x_n, label_n = _batch_data(x_ptr, y_ptr, idx_n, row_ok_n, x_scale, stride_xn, stride_xk, offs_k, k_ok,
                                   X_IS_U8)
        idx_nn, row_ok_nn, n_rows_nn = _batch_rows(perm_ptr, (s + 2) % n_epoch_steps, i + 2 < n_run, N, B, offs_b)
        # 3. wait until every element of the batch holds all n_programs contributions (bounded)
        tot = tl.load(zbuf, volatile=True)
        missing = tl.sum(tl.where(zmask & (((tot - base) & 255) != n_programs), 1, 0))
        spins = 0
        while (missing > 0) & (spins < max_spin) & (failed == 0):
            tot = tl.load(zbuf, volatile=True)
            missing = tl.sum(tl.where(zmask & (((tot - base) & 255) != n_programs), 1, 0))
            spins += 1
        if missing > 0:  # the programs were not all resident: flag it, and never wait again
            tl.store(state_ptr + 1, 1)
            failed = failed + 1
        # 4. full logits -> softmax cross-entropy, correct count, dz (fp32, the whole batch)
        z = ((tot - base) >> 8).to(tl.float32) * (1.0 / FIX_SCALE)
        base, base_next = base_next, tot
        z = tl.where(c_ok[None, :], z + bias[None, :], float("-inf"))
        m = tl.max(z, axis=1)
        e = tl.exp(z - m[:, None])
        ssum = tl.sum(e, axis=1)
        onehot = offs_c[None, :] == label[:, None]
        z_y = tl.sum(tl.where(onehot, z, 0.0), axis=1)
        loss_run += tl.sum(tl.where(row_ok, m + tl.log(ssum) - z_y, 0.0), axis=0)
        correct_run += tl.sum(((tl.argmax(z, axis=1) == label) & row_ok).to(tl.int32), axis=0)
        dz = (e / ssum[:, None] - onehot.to(tl.float32)) * (1.0 / tl.maximum(n_rows, 1).to(tl.float32))
        dz = tl.where(zmask, dz, 0.0)
        # SGD on this program's slice (and its copy of b)
        wt -= (lr * tl.dot(tl.trans(x), dz, input_precision=PRECISION)).to(tl.float32)
        bias -= (lr * tl.sum(dz, axis=0)).to(tl.float32)
        x, label, row_ok, n_rows = x_n, label_n, row_ok_n, n_rows_n
        idx_n, row_ok_n, n_rows_n = idx_nn, row_ok_nn, n_rows_nn

    tl.store(wt_ptrs, wt, mask=wt_mask)
    if pid == 0:  # every program read step0 and the snapshot before its first contribution, which
        # program 0 has seen complete; the buffers' final values: base = buffer n_run % 2, base_next the other
        tl.store(zsnap_ptr + (n_run % 2) * (BLOCK_B * BLOCK_C) + z_offs, base)
        tl.store(zsnap_ptr + ((n_run + 1) % 2) * (BLOCK_B * BLOCK_C) + z_offs, base_next)
        tl.store(b_ptr + offs_c, bias, mask=c_ok)
        tl.store(state_ptr, (step0 + n_run) % n_epoch_steps)
        tl.store(loss_sum_ptr, loss_run)
        tl.store(correct_sum_ptr, correct_run)


# ----------------------------------------------------------------------------------------------------
# Autotuning space: K slice per program (S = cdiv(K, BLOCK_K) programs) and warps.
# At batch 128, K = 784 on an H100: BLOCK_K 16 -> 49 programs, each 128x16x16 FMAs twice per step and
# 8 KB of X; 32 -> 25 programs; 64 -> 13. Fewer programs: fewer atomics, more arithmetic per program.
# ----------------------------------------------------------------------------------------------------
def _cfg(bk, warps):
    return Config({"BLOCK_K": bk}, warps, 1)


STEP_CONFIGS = [_cfg(16, 8), _cfg(16, 4), _cfg(16, 16), _cfg(32, 8), _cfg(32, 4), _cfg(64, 8), _cfg(64, 16)]
INTERPRET_CONFIG = _cfg(0, 4)  # BLOCK_K 0: one program over all of K (the interpreter runs programs in turn)
_tuner = register_tuner(Autotuner("softmax_regression_train", _sr_train_kernel, STEP_CONFIGS,
                                  interpret_config=INTERPRET_CONFIG))


def _sm_count(device) -> int:
    if INTERPRET or torch.device(device).type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def block_k_for(cfg: Config, K: int, device) -> int:
    """The K slice of one program: the config's, widened so that the grid fits on the SMs at once
    (one program in the interpreter, where programs run one after another)."""
    if INTERPRET or cfg.kwargs["BLOCK_K"] == 0:
        return max(16, triton.next_power_of_2(K))
    return max(cfg.kwargs["BLOCK_K"], triton.next_power_of_2(triton.cdiv(K, _sm_count(device))))


def block_b_for(batch_size: int) -> int:
    return max(16, triton.next_power_of_2(batch_size))


# ----------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------
def validate(weight, bias, x, y, perm, batch_size, lr, precision="ieee") -> None:
    """Check every argument of a step; raises ValueError naming the argument (no launch happens)."""
    check_tensor("weight", weight, ndim=2, dtypes=(torch.float32,))
    dev = weight.device
    check_tensor("bias", bias, ndim=1, dtypes=(torch.float32,), device=dev)
    check_tensor("x", x, ndim=2, dtypes=X_DTYPES, device=dev)
    check_tensor("y", y, ndim=1, dtypes=INDEX_DTYPES, device=dev)
    check_tensor("perm", perm, ndim=1, dtypes=INDEX_DTYPES, device=dev)
    C, K = weight.shape
    if not 1 <= C <= BLOCK_C:
        raise ValueError(f"weight has {C} classes (rows); this kernel supports 1..{BLOCK_C}")
    if K < 1:
        raise ValueError(f"weight has {K} features; need at least 1")
    if bias.shape[0] != C:
        raise ValueError(f"bias has {bias.shape[0]} elements, expected {C} (weight {tuple(weight.shape)})")
    if not bias.is_contiguous():
        raise ValueError("bias must be contiguous")
    if x.shape[1] != K:
        raise ValueError(f"x has {x.shape[1]} features but weight expects {K}")
    N = x.shape[0]
    if N < 1:
        raise ValueError("x is empty: need at least one example")
    if y.shape[0] != N:
        raise ValueError(f"y has {y.shape[0]} labels but x has {N} rows")
    if perm.shape[0] != N or not perm.is_contiguous():
        raise ValueError(f"perm must be a contiguous permutation of the {N} rows of x, got shape {tuple(perm.shape)}")
    if not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH:
        raise ValueError(f"batch_size must be an int in 1..{MAX_BATCH} (the batch is one register tile), "
                         f"got {batch_size!r}")
    if not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")


@dataclasses.dataclass
class StepBuffers:
    """Static device state of the fused training (allocated once, zeroed; nothing is allocated per step)."""

    state: torch.Tensor         # (2,) int32: [step within the epoch, error flag]
    loss_sum: torch.Tensor      # (1,) fp32: running sum of per-example losses
    correct_sum: torch.Tensor   # (1,) int32: running count of correct predictions
    zacc: torch.Tensor          # (2, BLOCK_B, 16) int64: packed logit accumulators (value * 256 + count)
    zsnap: torch.Tensor         # (2, BLOCK_B, 16) int64: their values at the end of the last launch

    @classmethod
    def allocate(cls, batch_size: int, device) -> "StepBuffers":
        i32 = dict(device=device, dtype=torch.int32)
        return cls(torch.zeros(2, **i32), torch.zeros(1, device=device, dtype=torch.float32),
                   torch.zeros(1, **i32), torch.zeros(2, block_b_for(batch_size), BLOCK_C, device=device,
                                                      dtype=torch.int64),
                   torch.zeros(2, block_b_for(batch_size), BLOCK_C, device=device, dtype=torch.int64))

    @property
    def step(self) -> torch.Tensor:
        """(1,) view of the step counter."""
        return self.state[:1]

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def clone(self) -> "StepBuffers":
        return StepBuffers(*(t.clone() for t in self.tensors()))

    def check(self) -> None:
        """Raise if a wait for the other programs ever timed out (that launch's results are unreliable)."""
        if int(self.state[1].item()):
            raise RuntimeError("fused softmax-regression step: the wait for the other programs timed out "
                               "(programs not co-resident?); the weights are unreliable")


def launch(weight, bias, x, y, perm, buf: StepBuffers, batch_size: int, lr: float, cfg: Config,
           precision: str = "ieee", n_run: int = 1, *, block_k: Optional[int] = None,
           max_spin: int = MAX_SPIN) -> None:
    """Launch the kernel for ``n_run`` consecutive steps (no validation, no allocation, no host sync).
    ``block_k`` overrides the K slice per program (S = cdiv(K, block_k) programs must be co-resident)."""
    N, K = x.shape
    C = weight.shape[0]
    bk = block_k or block_k_for(cfg, K, x.device)
    _launch(_sr_train_kernel, (triton.cdiv(K, bk),),
            x, y, perm, weight, bias, buf.state, buf.zacc, buf.zsnap, buf.loss_sum, buf.correct_sum,
            N, K, C, batch_size, triton.cdiv(N, batch_size), n_run, float(lr), 1.0 / 255.0, max_spin,
            x.stride(0), x.stride(1), weight.stride(0), weight.stride(1),
            X_IS_U8=x.dtype == torch.uint8, PRECISION=precision,
            BLOCK_B=block_b_for(batch_size), BLOCK_K=bk, BLOCK_C=BLOCK_C,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def launch_step(weight, bias, x, y, perm, buf: StepBuffers, batch_size: int, lr: float, cfg: Config,
                precision: str = "ieee") -> None:
    """One step: one kernel launch."""
    launch(weight, bias, x, y, perm, buf, batch_size, lr, cfg, precision, n_run=1)


def pick_config(weight, bias, x, y, perm, batch_size: int, lr: float, precision: str = "ieee") -> Config:
    """The tuned config for this shape; tuning runs on clones, so the real weights are untouched."""
    if INTERPRET:
        return INTERPRET_CONFIG
    key = (bucket(batch_size), x.shape[1], weight.shape[0], str(x.dtype), precision)
    scratch = None

    def run(cfg: Config):
        nonlocal scratch
        if scratch is None:
            scratch = (weight.detach().clone(), bias.detach().clone(), StepBuffers.allocate(batch_size, x.device))
        w, b, buf = scratch  # timed on a run of steps: the steady state of both per-step and epoch launches
        n_run = min(32, triton.cdiv(x.shape[0], batch_size))
        launch(w, b, x, y, perm, buf, batch_size, 1e-6, cfg, precision, n_run=n_run)

    return _tuner.pick(key, run, STEP_CONFIGS, tracing=_is_fake(weight, x))


class FusedSGDStep:
    """Fused softmax-regression SGD training on (x, y), batches drawn through ``perm``.

    Validates once at construction and owns static buffers, so :meth:`step` (one step) and
    :meth:`epoch` (every step of an epoch, in one persistent launch) each launch exactly one kernel,
    with no allocation and no host synchronisation: safe to capture in a CUDA graph. Loss / accuracy
    sums stay on the device until :meth:`read_stats`.

        trainer = FusedSGDStep(model.weight, model.bias, x_gpu, y_gpu, batch_size=128, lr=0.1)
        trainer.set_perm(torch.randperm(len(x)))
        trainer.epoch()
        loss_sum, correct = trainer.read_stats()
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                 batch_size: int, lr: float, *, perm: Optional[torch.Tensor] = None, precision: str = "ieee",
                 config: Optional[Config] = None) -> None:
        weight, bias = weight.data if isinstance(weight, torch.nn.Parameter) else weight, \
            bias.data if isinstance(bias, torch.nn.Parameter) else bias
        if perm is None:
            perm = torch.arange(x.shape[0] if isinstance(x, torch.Tensor) and x.ndim >= 1 else 0,
                                dtype=torch.int32, device=getattr(x, "device", None))
        validate(weight, bias, x, y, perm, batch_size, lr, precision)
        self.weight, self.bias, self.x, self.y = weight, bias, x, y
        self.perm = perm.clone()  # static buffer: set_perm copies into it
        self.batch_size, self.lr, self.precision = batch_size, float(lr), precision
        self.n_steps = triton.cdiv(x.shape[0], batch_size)
        self.buf = StepBuffers.allocate(batch_size, x.device)
        self.config = config or pick_config(weight, bias, x, y, self.perm, batch_size, lr, precision)

    @property
    def programs(self) -> int:
        """Programs per launch (= K slices)."""
        K = self.x.shape[1]
        return triton.cdiv(K, block_k_for(self.config, K, self.x.device))

    def set_perm(self, perm: torch.Tensor) -> None:
        """Copy a new batch order into the static permutation buffer (e.g. once per epoch)."""
        check_tensor("perm", perm, ndim=1, dtypes=INDEX_DTYPES)
        if perm.shape != self.perm.shape:
            raise ValueError(f"perm has shape {tuple(perm.shape)}, expected {tuple(self.perm.shape)}")
        self.perm.copy_(perm, non_blocking=True)

    def _launch(self, n_run: int) -> None:
        launch(self.weight, self.bias, self.x, self.y, self.perm, self.buf, self.batch_size, self.lr,
               self.config, self.precision, n_run=n_run)

    def step(self) -> None:
        """One SGD step (one kernel launch)."""
        self._launch(1)

    def steps(self, n: int) -> None:
        """n consecutive SGD steps in one launch (wrapping into the next epoch's order if n runs past it)."""
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        self._launch(n)

    def epoch(self) -> None:
        """The remaining steps of the epoch (all of them from a fresh epoch) in one persistent launch.
        Launched from a step counter that is not at 0, the device decides nothing: n_steps steps run."""
        self._launch(self.n_steps)

    def epoch_stepwise(self) -> None:
        """An epoch as n_steps single-step launches (the same arithmetic as :meth:`epoch`)."""
        for _ in range(self.n_steps):
            self._launch(1)

    def read_stats(self, reset: bool = True) -> tuple[float, int]:
        """(sum of per-example losses, number correct) since the last reset; one host sync."""
        self.buf.check()
        loss, correct = float(self.buf.loss_sum.item()), int(self.buf.correct_sum.item())
        if reset:
            self.reset_stats()
        return loss, correct

    def reset_stats(self) -> None:
        self.buf.loss_sum.zero_()
        self.buf.correct_sum.zero_()


# ----------------------------------------------------------------------------------------------------
# torch op registration (so torch.compile(fullgraph=True) traces through a training step)
# ----------------------------------------------------------------------------------------------------
@torch.library.triton_op("tk::softmax_regression_sgd_step",
                         mutates_args=("weight", "bias", "state", "loss_sum", "correct_sum", "zacc", "zsnap"))
def _sgd_step_op(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, perm: torch.Tensor,
                 state: torch.Tensor, loss_sum: torch.Tensor, correct_sum: torch.Tensor, zacc: torch.Tensor,
                 zsnap: torch.Tensor, batch_size: int, lr: float, precision: str) -> None:
    buf = StepBuffers(state, loss_sum, correct_sum, zacc, zsnap)
    cfg = pick_config(weight, bias, x, y, perm, batch_size, lr, precision)
    launch_step(weight, bias, x, y, perm, buf, batch_size, lr, cfg, precision)


def sgd_step(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, perm: torch.Tensor,
             buf: StepBuffers, batch_size: int, lr: float, precision: str = "ieee") -> None:
    """One validated fused SGD step as a torch op (updates weight, bias and ``buf`` in place)."""
    validate(weight, bias, x, y, perm, batch_size, lr, precision)
    if tuple(buf.zacc.shape) != (2, block_b_for(batch_size), BLOCK_C):
        raise ValueError(f"buf was allocated for another batch size: zacc {tuple(buf.zacc.shape)}")
    torch.ops.tk.softmax_regression_sgd_step(weight, bias, x, y, perm, *buf.tensors(), batch_size,
                                             float(lr), precision)
