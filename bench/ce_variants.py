"""Time the variants of the fused cross-entropy kernel (triton_kernels/cross_entropy.py) side by side.

    python -m bench.ce_variants [--shapes 8192x32000] [--dtypes float32,bfloat16] [--variants a,b]
                                [--rep 60] [--op] [--graph] [--out DIR]

A variant is one launch Config of the kernel: chunk size BLOCK_V (or the whole row in registers), warps,
programs per SM, PREFETCH (ask L2 for the program's next row) and REG_DB (load chunk i + 1 into registers
before reducing chunk i). For every (shape, dtype, variant), first correctness: the gradient buffer is
poisoned with NaN, one call, then loss, gradient (‖g - g64‖ / ‖g64‖) and correct count against torch in
float64, on inputs where 30 % of the targets are the row's argmax (the tie search runs) and 1 % ignored.
Then time: `cross_entropy_forward` with that config (the fused kernel + the one-program finalize; the
gradient is complete: the backward only scales it, skipped on the device for `loss.backward()`), L2
flushed before each call, CUDA events, median / p20 / p80 of --rep calls. GB/s counts the minimum
traffic (logits read once, gradient written once) against the copy ceiling of results/<device>/
ceilings.json. --graph: also each dtype's fastest variant replayed from a CUDA graph (GPU time without
the host). --op: the registered op forward + backward as bench.ops times it (`cross_entropy` +
`torch.autograd.grad`, the tuner's choice; TRITON_PLAYGROUND_VERBOSE=1 prints every trial).
Predictions, written before the first run, are printed beside the measurements.

In the CPU interpreter the default is a dry run of the script at 8x5000 float32 (3 timed calls per
variant; no performance figure); --shapes there must finish in about a minute (else --full, which prints
an estimate first).
"""
from __future__ import annotations

import sys

import torch

from triton_kernels import cross_entropy as CE
from triton_kernels.runtime import INTERPRET, Config, default_device, next_power_of_2

from .cli import argument_parser, cpu_notice, guard_cpu, interpreter_seconds, parse_shapes, run
from .harness import load_ceilings, median, quantile, time_call
from .results import CPU_NOTE, make_row, write_rows

TOL = {torch.float32: 1e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}
GPU_DEFAULTS = {"shapes": "8192x32000", "dtypes": "float32,bfloat16", "rep": 60}
CPU_DEFAULTS = {"shapes": "8x5000", "dtypes": "float32", "rep": 3}  # a dry run of the script
ROW = "row"  # BLOCK_V = the row (next power of two): the whole row in registers


def _cfg(bv, warps, per_sm, pf=0, db=0, stages=1) -> Config:
    return Config({"BLOCK_V": bv, "PER_SM": per_sm, "PREFETCH": pf, "REG_DB": db}, warps, stages)


VARIANTS = {
    "chunk8k": _cfg(8192, 16, 1),                     # the first candidate before this study
    "chunk8k-pf": _cfg(8192, 16, 1, pf=1),
    "chunk8k-db": _cfg(8192, 16, 1, db=1),
    "chunk8k-pf-db": _cfg(8192, 16, 1, pf=1, db=1),
    "chunk4k-2sm-pf-db": _cfg(4096, 8, 2, pf=1, db=1),
    "chunk4k-2sm-st2": _cfg(4096, 8, 2, stages=2),   # a pipelined candidate of the previous study
    "row16w": _cfg(ROW, 16, 1),
    "row16w-pf": _cfg(ROW, 16, 1, pf=1),
    "row32w-pf": _cfg(ROW, 32, 1, pf=1),
}

# ms per forward call at 8192 x 32000, written before the first GPU run (fp32, bf16). Floor: 2.1 GB
# (fp32) / 1.05 GB (bf16) at 3019 GB/s = 0.70 / 0.35 ms.
PREDICTED = {
    "chunk8k": (1.25, 1.25),            # measured 1.336 / 1.354 through the harness before
    "chunk8k-pf": (0.95, 0.75),         # sweep-1 loads hit L2: per-chunk latency ~3x shorter
    "chunk8k-db": (1.10, 1.05),         # ptxas may reuse the current chunk's registers: partial overlap
    "chunk8k-pf-db": (0.90, 0.70),
    "chunk4k-2sm-pf-db": (0.95, 0.75),
    "chunk4k-2sm-st2": (1.30, 1.30),    # Triton does not pipeline loads that feed no dot: no change
    "row16w": (0.90, 0.60),             # one HBM read, no re-read; idle HBM while reducing
    "row16w-pf": (0.78, 0.42),          # next row streams into L2 during the reductions: near the floor
    "row32w-pf": (0.85, 0.45),          # spills (64-register cap)
}


# The registered op forward + backward (ms), written before the second run, after the first showed the op
# path 0.33 ms (fp32) / 0.5-0.9 ms (bf16) above the kernel: autograd materialized a zero gradient for the
# (M, V) gradient output (now off) and the host path (~0.13 ms here without launches) may exceed the
# bf16 kernel on the GPU machine's CPU.
OP_PREDICTED = {(8192, 32000, "float32"): 0.82, (8192, 32000, "bfloat16"): 0.55}


def host_us(fn, n: int = 50) -> tuple[float, float]:
    """Host time per call (µs) of n back-to-back calls without waiting for the GPU (enqueue only), and
    the wall time per call including the final synchronize: when the first is the larger share, the
    host, not the GPU, sets the pace."""
    import time

    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6


def _resolve(cfg: Config, V: int) -> Config | None:
    if cfg.kwargs["BLOCK_V"] != ROW:
        return cfg if cfg.kwargs["BLOCK_V"] < next_power_of_2(V) else None  # chunked: needs > 1 chunk
    bv = next_power_of_2(V)
    if bv > CE.MAX_REG_ROW_V or bv // (32 * cfg.num_warps) > 64:
        return None
    return Config(dict(cfg.kwargs, BLOCK_V=bv), cfg.num_warps, cfg.num_stages)


def make_inputs(M: int, V: int, dtype: torch.dtype, seed: int = 0):
    dev = default_device()
    g = torch.Generator(device=dev).manual_seed(seed)
    x = (torch.randn(M, V, device=dev, generator=g) * 2).to(dtype)
    t = torch.randint(0, V, (M,), device=dev, generator=g)
    pick = torch.rand(M, device=dev, generator=g)
    t = torch.where(pick < 0.3, x.float().argmax(1), t)        # the target is (a) maximum
    t[pick > 0.99] = -100                                        # ignored rows
    return x, t


def reference(x: torch.Tensor, t: torch.Tensor):
    """Mean loss, its gradient and the correct count in float64 (torch's definitions)."""
    x64 = x.double()
    valid = t != -100
    ts = t.clamp(min=0)
    lse = torch.logsumexp(x64, 1)
    n = valid.sum()
    loss = ((lse - x64.gather(1, ts[:, None])[:, 0]) * valid).sum() / n
    grad = torch.exp(x64 - lse[:, None])
    del x64
    grad[torch.arange(len(t), device=t.device), ts] -= 1.0
    grad *= (valid.double() / n)[:, None]
    correct = ((x.float().argmax(1) == t) & valid).sum()  # first maximum, as torch.argmax
    return loss.item(), grad, int(correct)


def check(x, t, cfg, ref) -> dict:
    """One poisoned call: relative errors of loss and gradient, the correct count, whether poisoned."""
    loss_ref, grad_ref, correct_ref = ref
    junk = torch.full_like(x, float("nan"))
    ptr = junk.data_ptr()
    del junk
    loss, correct, grad = CE.cross_entropy_forward(x, t, config=cfg)
    err_loss = abs(loss.item() - loss_ref) / abs(loss_ref)
    err_grad = ((grad.double() - grad_ref).norm() / grad_ref.norm()).item()
    ok = (err_loss <= TOL[x.dtype] and err_grad <= TOL[x.dtype] and int(correct) == correct_ref
          and bool(torch.isfinite(grad).all()))
    return {"err_loss": err_loss, "err_grad": err_grad, "correct": int(correct), "correct_ref": correct_ref,
            "poisoned": grad.data_ptr() == ptr, "ok": ok}


def timed(fn, rep: int) -> tuple[float, float, float]:
    """Median, p20, p80 (ms) of rep calls after 3 warm-up calls, L2 flushed before each (CUDA events)."""
    for _ in range(3):
        fn()
    ms = time_call(fn, rep, flush=True)
    return median(ms), quantile(ms, 0.2), quantile(ms, 0.8)


def main(argv=None) -> int:
    ap = argument_parser("bench.ce_variants", __doc__)
    ap.add_argument("--shapes", default=None, help=f"MxV[,...] (default {GPU_DEFAULTS['shapes']}; CPU interpreter "
                                                   f"{CPU_DEFAULTS['shapes']})")
    ap.add_argument("--dtypes", default=None, help=f"default {GPU_DEFAULTS['dtypes']} (CPU interpreter: "
                                                   f"{CPU_DEFAULTS['dtypes']})")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--rep", type=int, default=None, help=f"timed calls per variant (default {GPU_DEFAULTS['rep']}; "
                                                          f"CPU interpreter {CPU_DEFAULTS['rep']})")
    ap.add_argument("--op", action="store_true", help="also time the registered op forward+backward (tuned)")
    ap.add_argument("--graph", action="store_true", help="also time each dtype's fastest variant from a CUDA graph")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    tiny = INTERPRET and not args.full
    explicit = args.shapes is not None
    for k, v in (CPU_DEFAULTS if tiny else GPU_DEFAULTS).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        ap.error(f"--variants: unknown {','.join(unknown)}; known: {','.join(VARIANTS)}")
    try:
        dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    except AttributeError:
        ap.error(f"--dtypes: expected e.g. float32,bfloat16, got {args.dtypes!r}")
    shapes = parse_shapes(args.shapes)
    if any(len(s) != 2 for s in shapes):
        ap.error("--shapes: each shape is MxV")
    if INTERPRET:
        what = f"{args.shapes} {args.dtypes}, {len(args.variants.split(','))} variants"
        if explicit or args.full:
            est = interpreter_seconds(nbytes=sum(2 * m * v * 4 for m, v in shapes),
                                      calls=len(dtypes) * len(VARIANTS) * (args.rep + 4))
            guard_cpu(est, what, args.full, "bench.ce_variants")
        if not args.full:
            cpu_notice("bench.ce_variants", f"a dry run of the script at {what}, {args.rep} timed calls each")
    ceil = load_ceilings() or {}
    copy_gbps = ceil.get("copy_gbps") or 3019.0
    rows, table = [], []

    def add(case, params, dtype, backend, metric, value, unit, p20=None, p80=None, err=None, status="ok", note=""):
        rows.append(make_row("ce_variants", case, params, dtype, backend, metric, value, unit, p20, p80, err,
                             status, note))

    for M, V in shapes:
        shape = f"{M}x{V}"
        for dtype in dtypes:
            dname = str(dtype).replace("torch.", "")
            x, t = make_inputs(M, V, dtype)
            ref = reference(x, t)
            nbytes = 2 * M * V * x.element_size()
            params = {"M": M, "V": V}
            best = None
            for name in args.variants.split(","):
                cfg = _resolve(VARIANTS[name], V)
                if cfg is None:
                    continue
                try:
                    c = check(x, t, cfg, ref)
                except Exception as e:  # compile failure, out of resources: a row, then go on
                    print(f"{shape} {dname} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                    add("cross_entropy_fwd", params, dtype, "triton:" + name, "time_ms", None, "ms",
                        status="error", note=f"{type(e).__name__}: {str(e)[:200]}")
                    continue
                med, p20, p80 = timed(lambda: CE.cross_entropy_forward(x, t, config=cfg), args.rep)
                gbps = nbytes / med / 1e6
                pred = PREDICTED.get(name, (None, None))[0 if dtype == torch.float32 else 1] \
                    if (M, V) == (8192, 32000) else None
                status = "ok" if c["ok"] else "wrong"
                note = (f"{cfg}; err_loss {c['err_loss']:.1e}; correct {c['correct']}/{c['correct_ref']}; "
                        f"poisoned {c['poisoned']}; predicted {pred} ms")
                add("cross_entropy_fwd", params, dtype, "triton:" + name, "time_ms", med, "ms", p20, p80,
                    c["err_grad"], status, note)
                add("cross_entropy_fwd", params, dtype, "triton:" + name, "gbps", gbps, "GB/s", err=c["err_grad"],
                    status=status)
                table.append((shape, dname, name, med, p20, p80, gbps, 100 * gbps / copy_gbps, pred,
                              c["err_grad"], c["err_loss"], f"{c['correct']}/{c['correct_ref']}", c["poisoned"],
                              status))
                print(f"{shape} {dname:8s} {name:18s} {med:.4f} ms [{p20:.4f}, {p80:.4f}] {gbps:6.0f} GB/s "
                      f"pred {pred}  grad err {c['err_grad']:.1e}  {status}", flush=True)
                if c["ok"] and (best is None or med < best[1]):
                    best = (name, med, cfg)
            if args.graph and best is not None and not INTERPRET:
                cfg = best[2]
                CE.cross_entropy_forward(x, t, config=cfg)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    CE.cross_entropy_forward(x, t, config=cfg)
                med, p20, p80 = timed(graph.replay, args.rep)
                gbps = nbytes / med / 1e6
                add("cross_entropy_fwd", params, dtype, "triton+graph:" + best[0], "time_ms", med, "ms", p20, p80)
                table.append((shape, dname, best[0] + "+graph", med, p20, p80, gbps, 100 * gbps / copy_gbps, None,
                              None, None, "", "", "ok"))
                print(f"{shape} {dname:8s} {best[0] + '+graph':18s} {med:.4f} ms {gbps:6.0f} GB/s", flush=True)
                del graph
            if args.op:
                xr = x.detach().clone().requires_grad_()

                def fwdbwd():
                    loss = CE.cross_entropy(xr, t, check_target=False)
                    return loss, torch.autograd.grad(loss, xr)[0]

                loss, g = fwdbwd()  # tunes (first call)
                err_grad = ((g.double() - ref[1]).norm() / ref[1].norm()).item()
                status = "ok" if err_grad <= TOL[dtype] and abs(loss.item() - ref[0]) <= TOL[dtype] * abs(ref[0]) \
                    else "wrong"
                del g
                med, p20, p80 = timed(fwdbwd, args.rep)
                gbps = nbytes / med / 1e6
                key_cfg = list(CE._tuner._memory.values())[-1] if CE._tuner._memory else "untuned"
                pred = OP_PREDICTED.get((M, V, dname))
                enq, wall = host_us(fwdbwd) if not INTERPRET else (0.0, 0.0)
                add("cross_entropy_fwdbwd", params, dtype, "triton", "time_ms", med, "ms", p20, p80, err_grad, status,
                    f"op forward + autograd.grad, tuned: {key_cfg}; predicted {pred} ms; host enqueue "
                    f"{enq:.0f} us/call, back-to-back wall {wall:.0f} us/call")
                add("cross_entropy_fwdbwd", params, dtype, "triton", "host_enqueue_us", enq, "us")
                table.append((shape, dname, "op fwd+bwd (tuned)", med, p20, p80, gbps, 100 * gbps / copy_gbps, pred,
                              err_grad, None, "", "", status))
                print(f"{shape} {dname:8s} op fwd+bwd tuned -> {key_cfg}: {med:.4f} ms [{p20:.4f}, {p80:.4f}] "
                      f"{gbps:6.0f} GB/s grad err {err_grad:.1e} {status}; host enqueue {enq:.0f} us/call, "
                      f"back-to-back wall {wall:.0f} us/call", flush=True)
                if not INTERPRET:  # where the host time goes: the forward alone, and the launcher alone
                    xd = x.detach()
                    for what, fn in (("op forward", lambda: CE.cross_entropy(xr, t, check_target=False)),
                                     ("cross_entropy_forward", lambda: CE.cross_entropy_forward(xd, t))):
                        enq, wall = host_us(fn)
                        print(f"{shape} {dname:8s} host: {what:22s} enqueue {enq:.0f} us/call, wall {wall:.0f} us/call",
                              flush=True)
            x = t = ref = xr = None  # free before the next dtype
            if not INTERPRET:
                torch.cuda.empty_cache()

    if args.out is not None or rows:
        path = write_rows(rows, args.out, "ce_variants")
        print(f"rows: {path}")
    hdr = (f"{'shape':11s} {'dtype':8s} {'variant':20s} {'ms':>7s} {'p20':>7s} {'p80':>7s} {'GB/s':>6s} "
           f"{'%copy':>5s} {'pred':>5s} {'grad err':>8s} {'correct':>11s} poisoned status")
    if INTERPRET:
        print(f"({CPU_NOTE}: every time and rate below)")
    print(hdr)
    for r in table:
        pred = f"{r[8]:.2f}" if r[8] is not None else "-"
        ge = f"{r[9]:.1e}" if r[9] is not None else "-"
        print(f"{r[0]:11s} {r[1]:8s} {r[2]:20s} {r[3]:7.4f} {r[4]:7.4f} {r[5]:7.4f} {r[6]:6.0f} {r[7]:5.1f} "
              f"{pred:>5s} {ge:>8s} {r[11]:>11s} {str(r[12]):8s} {r[13]}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
