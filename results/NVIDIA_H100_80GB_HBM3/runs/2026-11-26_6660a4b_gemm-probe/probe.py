"""Issue 22 probe: why the losing GEMM cases lose. One H100 run (<= ~5 min), or --cpu-smoke (interpreter).

    PYTHONPATH=. python3 .cache/exp/gemm22/probe.py [--cpu-smoke] [--only A,B,C,D]

Every variant is checked against float64 before it is timed. Times: CUDA events around one call with the
L2 flushed before it, median of REP (the harness's time_ms); host_us: wall time of the Python call alone
(the GPU kept busy by the flush, so nothing waits on it); graph: the same call captured in a CUDA graph
and replayed (GPU time without the host path). The autotune cache is a fresh temp dir: every key is tuned
in this run with the current spaces, and each tuned key's top-3 trials are printed.

Sections
  A  fwd+bwd linear (512 / 4096 relu, 4096 gelu): event / host / graph time, ours vs eager; per-kernel GPU
     time (torch.profiler); the plan each GEMM of the backward took; cProfile of our 512 fwd+bwd host path
  B  the backward GEMMs of 4096x8704->1024 alone: dA = dZ @ W, dW^T = X^T @ dZ, ours (tuned, forced) vs
     torch.mm; GELU forward with / without the Z store; act-backward pass relu vs gelu
  C  fp32: tf32 and ieee 4096^3 with forced configs (the new 4-byte tiles), the relayout copy alone,
     tuned picks at 1024 / 2048 / 8192 (tf32) and 8192 (ieee)
  D  small / skinny: 512x8704->1024 fwd (split-K vs not), 512x1024->4, bf16 512^3 / 1024^3
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--cpu-smoke", action="store_true")
ap.add_argument("--only", default="A,B,C,D")
ARGS = ap.parse_args()
SMOKE = ARGS.cpu_smoke
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"
os.environ["TRITON_PLAYGROUND_CACHE"] = tempfile.mkdtemp(prefix="gemm22-autotune-")
os.environ.setdefault("TRITON_PLAYGROUND_AUTOTUNE", "1")

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from triton_kernels import gemm as G  # noqa: E402
from triton_kernels import runtime  # noqa: E402
from triton_kernels.runtime import Config  # noqa: E402
from triton_kernels.testing import rel_err, tolerance  # noqa: E402

DEV = "cpu" if SMOKE else "cuda"
REP = 3 if SMOKE else 25
T0 = time.perf_counter()
ROWS: list[tuple] = []
BF16 = torch.float16 if SMOKE else torch.bfloat16  # the interpreter has no bf16 dot


def log(*a):
    print(f"[{time.perf_counter() - T0:6.1f}s]", *a, flush=True)


def sz(n):  # shapes shrink for the smoke run
    return max(8, n // 64) if SMOKE else n


# ---------------------------------------------------------------------------------------------------
# timing helpers
# ---------------------------------------------------------------------------------------------------
def event_ms(fn, rep=REP):
    if SMOKE:
        t = time.perf_counter()
        for _ in range(rep):
            fn()
        return (time.perf_counter() - t) / rep * 1e3
    ts = runtime.cuda_time_ms(fn, warmup=3, rep=rep, flush_l2=True)
    return sorted(ts)[len(ts) // 2]


_FLUSH = None


def host_us(fn, rep=REP):
    """Wall time of the Python call, the GPU busy with an L2 flush meanwhile (so launches never wait)."""
    global _FLUSH
    out = []
    for _ in range(rep):
        if not SMOKE:
            if _FLUSH is None:
                _FLUSH = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
            torch.cuda.synchronize()
            _FLUSH.zero_()
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    if not SMOKE:
        torch.cuda.synchronize()
    return sorted(out)[len(out) // 2]


def graph_ms(fn):
    if SMOKE:
        return float("nan")
    try:
        g, _ = runtime.capture_graph(fn)
        return event_ms(g.replay)
    except Exception as e:  # noqa: BLE001
        log("graph capture failed:", type(e).__name__, str(e)[:120])
        return float("nan")


def check(name, out, ref, dtype, tf32=False, scale=1.0):
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    tol = scale * tolerance(dtype, tf32=tf32)
    errs = [rel_err(o, r) for o, r in zip(outs, refs)]
    ok = all(e <= tol for e in errs)
    if not ok:
        log(f"!! {name}: rel_err {['%.2e' % e for e in errs]} > {tol:.1e}")
    return max(errs), ok


def row(section, case, variant, ms=float("nan"), err=float("nan"), ok=True, host=float("nan"), graph=float("nan"),
        ref_ms=float("nan"), note=""):
    ROWS.append((section, case, variant, ms, ref_ms, host, graph, err, ok, note))
    ratio = ref_ms / ms if ms == ms and ref_ms == ref_ms and ms > 0 else float("nan")
    log(f"{section} {case:28s} {variant:44s} {ms:9.4f} ms  eager {ref_ms:9.4f}  x{ratio:5.2f}  host {host:7.1f} us"
        f"  graph {graph:8.4f}  err {err:.1e} {'ok' if ok else 'BAD'} {note}")


def cfg(bm, bn, bk, w, s, group=8, **extra):
    return Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group, **extra}, w, s)


def cfg_str(c):
    if c is None:
        return "-"
    k = c.kwargs
    tag = ("TMA" + ("+relayout" if k.get("B_RELAYOUT") else "")) if k.get("TMA") else (
        f"splitK{k['SPLIT_K']}" if k.get("SPLIT_K") else "ptr")
    return f"{tag} {k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']} w{c.num_warps} s{c.num_stages}"


def plan_str(p):
    name = getattr(p.kernel.kernel, "__name__", "?")
    return (f"{name.replace('_gemm_', '').replace('_kernel', '')} {p.block_m}x{p.block_n}"
            + (f" split{p.split_k}" if p.split_k > 1 else "") + (f" A_T" if p.a_t else "") + (" B_T" if p.b_t else "")
            + (" relayout" if p.relayout else "") + (f" progs{p.programs}" if p.programs else ""))


_SEEN_TRIALS: set = set()


def print_new_tunings():
    """Top-3 trials of every key tuned since the last call (the tuner's own timings)."""
    tuner = runtime.ALL_TUNERS["gemm"]
    for k, trials in tuner.trials.items():
        if k in _SEEN_TRIALS:
            continue
        _SEEN_TRIALS.add(k)
        good = sorted((t for t in trials if t.get("ms")), key=lambda t: t["ms"])
        fails = sum(1 for t in trials if not t.get("ms"))
        top = ", ".join(f"{cfg_str(Config.from_json(t['config']))}={t['ms']:.4f}" for t in good[:3])
        log(f"   tuned {k} ({len(trials)} tried, {fails} failed): {top}")


# ---------------------------------------------------------------------------------------------------
# A. fwd+bwd
# ---------------------------------------------------------------------------------------------------
def linear_inputs(M, K, N, dtype, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(M, K, device=DEV, dtype=dtype, generator=g).requires_grad_()
    w = (torch.randn(N, K, device=DEV, dtype=dtype, generator=g) / K ** 0.5).requires_grad_()
    b = torch.randn(N, device=DEV, dtype=dtype, generator=g).requires_grad_()
    gy = torch.randn(M, N, device=DEV, dtype=dtype, generator=g)
    return x, w, b, gy


ACT = {"relu": torch.relu, "gelu": F.gelu, "none": lambda z: z}


def fwdbwd_fns(x, w, b, gy, act):
    def ours():
        y = G.linear(x, w, b, activation=act)
        return (y, *torch.autograd.grad(y, (x, w, b), gy))

    def eager():
        y = ACT[act](F.linear(x, w, b))
        return (y, *torch.autograd.grad(y, (x, w, b), gy))

    def reference():
        x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
        z = F.linear(x64, w64, b64)
        if act == "relu":
            y = z * (F.linear(x.detach(), w.detach(), b.detach()) > 0).double()
        else:
            y = ACT[act](z)
        return (y.detach(), *torch.autograd.grad(y, (x64, w64, b64), gy.double()))
    return ours, eager, reference


def kernel_breakdown(fn, label, calls=10):
    if SMOKE:
        return
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    parts = []
    total = 0.0
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = getattr(e, "cuda_time_total", 0.0)
        if t <= 0 or e.key.startswith("cudaDeviceSynchronize"):
            continue
        us = t / calls
        total += us
        parts.append((us, e.key[:48], e.count // calls))
    parts.sort(reverse=True)
    log(f"   kernels of {label} (GPU us per call, total {total:.1f}): "
        + "; ".join(f"{k} x{c} {us:.1f}" for us, k, c in parts[:9]))


def section_a():
    for M, act in ((512, "relu"), (4096, "relu"), (4096, "gelu")):
        M_, K, N = sz(M), sz(8704), sz(1024)
        x, w, b, gy = linear_inputs(M_, K, N, BF16)
        ours, eager, reference = fwdbwd_fns(x, w, b, gy, act)
        ref = reference()
        before = set(G._PLANS)
        out = ours()
        err, ok = check(f"fwdbwd {M} {act}", out, ref, BF16)
        new_plans = [(k, G._PLANS[k]) for k in G._PLANS if k not in before]
        for k, p in new_plans:
            log(f"   plan M,N,K<=2^{k[0]},2^{k[1]},2^{k[2]} a_unit={k[8]} b_unit={k[9]} save_z={k[12]}: {plan_str(p)}")
        print_new_tunings()
        e_ms, o_ms = event_ms(eager), event_ms(ours)
        case = f"linear_{act} fwdbwd {M}x8704->1024"
        row("A", case, "ours (tuned)", o_ms, err, ok, host_us(ours), graph_ms(ours), e_ms)
        row("A", case, "eager", e_ms, check("eager", eager(), ref, BF16)[0], True, host_us(eager), graph_ms(eager), e_ms)
        with torch.no_grad():
            fo = lambda: G.linear(x, w, b, activation=act)  # noqa: E731
            fe = lambda: ACT[act](F.linear(x, w, b))  # noqa: E731
            fref = ref[0]
            row("A", case, "forward only, ours", event_ms(fo), check("fwd", fo(), fref, BF16)[0], True, host_us(fo),
                ref_ms=event_ms(fe))
        kernel_breakdown(ours, f"ours {case}")
        kernel_breakdown(eager, f"eager {case}")
        if M == 512:  # the host path: where our call's time goes
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(50 if not SMOKE else 2):
                ours()
            pr.disable()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
            lines = [ln for ln in s.getvalue().splitlines() if ln.strip()][-14:]
            log("   cProfile (50 calls, tottime):\n      " + "\n      ".join(lines))
        # a Python autograd.Function that does nothing: the floor of any Python-level fwd+bwd
        class Nop(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a, w_):
                return a.new_empty((a.shape[0], w_.shape[0]))

            @staticmethod
            def backward(ctx, g):
                return g.new_empty((g.shape[0], K)), g.new_empty((N, K))
        nop = lambda: torch.autograd.grad(Nop.apply(x, w), (x, w), gy)  # noqa: E731
        if M == 512:
            row("A", "python Function floor", "empty autograd.Function fwd+bwd", event_ms(nop), host=host_us(nop))


# ---------------------------------------------------------------------------------------------------
# B. the backward GEMMs alone (4096 x 8704 -> 1024), GELU forward with Z, act-backward pass
# ---------------------------------------------------------------------------------------------------
def gemm_variants(label, a, b, configs, ref_ms_fn=None):
    ref = a.double() @ b.double()
    e_ms = event_ms(ref_ms_fn) if ref_ms_fn else float("nan")
    out = G.gemm_forward(a, b)[0]
    err, ok = check(label, out, ref, a.dtype)
    row("B", label, "ours (tuned)", event_ms(lambda: G.gemm_forward(a, b)), err, ok, ref_ms=e_ms)
    print_new_tunings()
    for c in configs:
        try:
            out = G.gemm_forward(a, b, config=c)[0]
        except Exception as e:  # noqa: BLE001
            row("B", label, cfg_str(c), note=f"failed {type(e).__name__}: {str(e)[:60]}")
            continue
        err, ok = check(label + cfg_str(c), out, ref, a.dtype)
        row("B", label, cfg_str(c), event_ms(lambda: G.gemm_forward(a, b, config=c)), err, ok, ref_ms=e_ms)


def section_b():
    M, K, N = sz(4096), sz(8704), sz(1024)
    g = torch.Generator(device=DEV).manual_seed(1)
    x = torch.randn(M, K, device=DEV, dtype=BF16, generator=g)
    w = torch.randn(N, K, device=DEV, dtype=BF16, generator=g) / K ** 0.5
    dz = torch.randn(M, N, device=DEV, dtype=BF16, generator=g)
    big = [] if SMOKE else None
    tma = lambda *a, **k: cfg(*a, TMA=1, **k)  # noqa: E731
    cands = big if big is not None else [tma(128, 256, 64, 8, 3), tma(128, 256, 64, 8, 4), tma(256, 128, 64, 8, 3),
                                         cfg(128, 256, 64, 8, 3), cfg(256, 128, 64, 8, 3), cfg(128, 128, 64, 8, 4),
                                         tma(128, 128, 64, 8, 4)]
    if SMOKE:
        cands = [cfg(32, 32, 32, 4, 1)]
    # dA = dZ @ W  (M x K out, K = N here), W row-major
    gemm_variants("dA=dZ@W 4096x8704 k1024", dz, w, cands, (lambda: torch.mm(dz, w)))
    # dW^T = X^T @ dZ (8704 x 1024, k = 4096), X^T a column-major view
    gemm_variants("dWt=X^T@dZ 8704x1024 k4096", x.t(), dz, cands, (lambda: torch.mm(x.t(), dz)))
    # the same product as dW = dZ^T @ X (1024 x 8704): the other orientation of the tile grid
    gemm_variants("dW=dZ^T@X 1024x8704 k4096", dz.t(), x, cands, (lambda: torch.mm(dz.t(), x)))

    # GELU forward with and without the Z store (same forced config), and the act-backward pass
    bias = torch.randn(N, device=DEV, dtype=BF16, generator=g)
    wt = w.t()
    ref = (x.double() @ wt.double() + bias.double())
    fc = cfg(32, 32, 32, 4, 1) if SMOKE else cfg(128, 256, 64, 8, 4, TMA=1)
    for act in ("relu", "gelu"):
        yref = ACT[act](ref)
        for save in (False, True):
            f = lambda: G.gemm_forward(x, wt, bias, activation=act, save_preact=save, config=fc)  # noqa: E731
            err, ok = check("gelu fwd", f()[0], yref, BF16)
            row("B", f"fwd {act} 4096 {cfg_str(fc)}", f"save_z={save}", event_ms(f), err, ok)
        f = lambda: G.gemm_forward(x, wt, bias, activation=act, save_preact=act == "gelu")  # noqa: E731
        err, ok = check("fwd tuned", f()[0], yref, BF16)
        row("B", f"fwd {act} 4096 tuned", f"save_z={act == 'gelu'}", event_ms(f), err, ok)
        print_new_tunings()
    z = (x @ wt + bias)
    c = torch.relu(z)
    dc = torch.randn(M, N, device=DEV, dtype=BF16, generator=g)
    for act, saved, zio in (("relu", c, True), ("gelu", z, False)):
        f = lambda: G.act_backward(dc, saved, act, z_is_output=zio, need_dbias=True, dbias_dtype=BF16)  # noqa: E731
        dz_, db = f()
        z64 = z.double()
        d = dc.double() * ((z64 > 0).double() if act == "relu" else torch.func.grad(
            lambda t: F.gelu(t).sum())(z64))
        err, ok = check("act bwd", (dz_, db), (d, d.sum(0)), BF16)
        row("B", f"act_backward {act} {M}x{N}", "dz + dbias", event_ms(f), err, ok, host=host_us(f))


# ---------------------------------------------------------------------------------------------------
# C. fp32: tf32 and ieee
# ---------------------------------------------------------------------------------------------------
def section_c():
    from autotune import spaces
    n = sz(4096)
    g = torch.Generator(device=DEV).manual_seed(2)
    a = torch.randn(n, n, device=DEV, generator=g)
    b = torch.randn(n, n, device=DEV, generator=g)
    ref = a.double() @ b.double()

    def cublas(tf32):
        def f():
            torch.backends.cuda.matmul.allow_tf32 = tf32
            return torch.matmul(a, b)
        return f
    # the relayout copy alone (inside every B_RELAYOUT config's time)
    row("C", f"relayout copy {n}^2 fp32", "b.t().contiguous().t()", event_ms(lambda: b.t().contiguous().t()))
    for prec in ("tf32", "ieee"):
        e_ms = event_ms(cublas(prec == "tf32")) if not SMOKE else float("nan")
        torch.backends.cuda.matmul.allow_tf32 = False
        f = lambda: G.gemm_forward(a, b, precision=prec)  # noqa: E731
        err, ok = check(prec, f()[0], ref, torch.float32, tf32=prec == "tf32", scale=3.0)
        row("C", f"{prec} {n}^3", "ours (tuned)", event_ms(f), err, ok, ref_ms=e_ms)
        print_new_tunings()
        if SMOKE:
            configs = [cfg(32, 32, 32, 4, 1)]
        else:
            cands = spaces.candidates("gemm", M=n, N=n, K=n, dtype="float32", tma=True, relayout=True)
            want_tma = prec == "tf32"
            configs = [c for c in cands if bool(c.kwargs.get("TMA")) == want_tma and not c.kwargs.get("SPLIT_K")]
        for c in configs:
            f = lambda: G.gemm_forward(a, b, precision=prec, config=c)  # noqa: E731
            try:
                out = f()[0]
            except Exception as e:  # noqa: BLE001
                row("C", f"{prec} {n}^3", cfg_str(c), note=f"failed {type(e).__name__}: {str(e)[:60]}")
                continue
            err, ok = check(prec + cfg_str(c), out, ref, torch.float32, tf32=prec == "tf32", scale=3.0)
            row("C", f"{prec} {n}^3", cfg_str(c), event_ms(f, rep=10 if prec == "ieee" else REP), err, ok, ref_ms=e_ms)
    # tuned picks at the other sizes
    for m, prec in ((1024, "tf32"), (2048, "tf32"), (8192, "tf32"), (8192, "ieee")):
        m = sz(m)
        a2 = torch.randn(m, m, device=DEV, generator=g)
        b2 = torch.randn(m, m, device=DEV, generator=g)
        e_ms = float("nan")
        if not SMOKE:
            torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
            e_ms = event_ms(lambda: torch.matmul(a2, b2), rep=10)
            torch.backends.cuda.matmul.allow_tf32 = False
        f = lambda: G.gemm_forward(a2, b2, precision=prec)  # noqa: E731
        out = f()[0]
        r2 = a2.double() @ b2.double()
        err, ok = check(prec, out, r2, torch.float32, tf32=prec == "tf32", scale=3.0)
        row("C", f"{prec} {m}^3", "ours (tuned)", event_ms(f, rep=10), err, ok, ref_ms=e_ms)
        print_new_tunings()


# ---------------------------------------------------------------------------------------------------
# D. small / skinny
# ---------------------------------------------------------------------------------------------------
def section_d():
    g = torch.Generator(device=DEV).manual_seed(3)
    for M, K, N, act, dtype in ((512, 8704, 1024, "relu", BF16), (512, 1024, 4, "none", BF16)):
        M_, K_, N_ = sz(M), sz(K), (N if N < 16 else sz(N))
        x = torch.randn(M_, K_, device=DEV, dtype=dtype, generator=g)
        w = torch.randn(N_, K_, device=DEV, dtype=dtype, generator=g) / K_ ** 0.5
        b = torch.randn(N_, device=DEV, dtype=dtype, generator=g)
        ref = ACT[act](x.double() @ w.double().t() + b.double())
        e_ms = event_ms(lambda: ACT[act](F.linear(x, w, b)))
        f = lambda: G.linear(x, w, b, activation=act)  # noqa: E731
        err, ok = check("small", f(), ref, dtype)
        case = f"linear_{act} {M}x{K}->{N}"
        row("D", case, "ours (tuned)", event_ms(f), err, ok, host_us(f), graph_ms(f), e_ms)
        row("D", case, "eager", e_ms, host=host_us(lambda: ACT[act](F.linear(x, w, b))),
            graph=graph_ms(lambda: ACT[act](F.linear(x, w, b))), ref_ms=e_ms)
        print_new_tunings()
        if SMOKE:
            forced = [cfg(32, 32, 32, 4, 1, SPLIT_K=2)]
        elif N >= 64:
            forced = [cfg(128, 128, 64, 8, 4, TMA=1), cfg(64, 128, 64, 4, 4, TMA=1), cfg(128, 64, 64, 4, 4, TMA=1),
                      cfg(64, 128, 64, 4, 4), cfg(64, 128, 64, 4, 4, SPLIT_K=4), cfg(128, 128, 64, 8, 3, SPLIT_K=2),
                      cfg(128, 128, 64, 8, 4, TMA=1, B_RELAYOUT=1), cfg(64, 64, 64, 4, 4, SPLIT_K=4)]
        else:
            forced = [cfg(64, 32, 32, 4, 4), cfg(16, 32, 64, 2, 3), cfg(64, 32, 64, 4, 3, SPLIT_K=4),
                      cfg(32, 32, 64, 2, 3, SPLIT_K=8), cfg(64, 16, 128, 4, 3, SPLIT_K=8), cfg(32, 16, 128, 2, 3, SPLIT_K=4)]
        xw = w.t()
        for c in forced:
            f = lambda: G.gemm_forward(x, xw, b, activation=act, config=c)  # noqa: E731
            try:
                err, ok = check(case + cfg_str(c), f()[0], ref, dtype)
            except Exception as e:  # noqa: BLE001
                row("D", case, cfg_str(c), note=f"failed {type(e).__name__}: {str(e)[:60]}")
                continue
            row("D", case, cfg_str(c), event_ms(f), err, ok, host_us(f), ref_ms=e_ms)
    for n in (512, 1024):
        n_ = sz(n)
        a = torch.randn(n_, n_, device=DEV, dtype=BF16, generator=g)
        b = torch.randn(n_, n_, device=DEV, dtype=BF16, generator=g)
        f = lambda: G.gemm_forward(a, b)  # noqa: E731
        err, ok = check("sq", f()[0], a.double() @ b.double(), BF16)
        e_ms = event_ms(lambda: torch.matmul(a, b))
        row("D", f"gemm bf16 {n}^3", "ours (tuned)", event_ms(f), err, ok, host_us(f), graph_ms(f), e_ms)
        row("D", f"gemm bf16 {n}^3", "eager", e_ms, host=host_us(lambda: torch.matmul(a, b)),
            graph=graph_ms(lambda: torch.matmul(a, b)), ref_ms=e_ms)
        print_new_tunings()


def main():
    log(f"device {torch.cuda.get_device_name() if not SMOKE else 'cpu (interpreter)'}; torch {torch.__version__}; "
        f"cache {os.environ['TRITON_PLAYGROUND_CACHE']}")
    sections = {"A": section_a, "B": section_b, "C": section_c, "D": section_d}
    for s in ARGS.only.split(","):
        t = time.perf_counter()
        try:
            sections[s]()
        except Exception as e:  # noqa: BLE001  (a failing section must not hide the others)
            import traceback
            log(f"section {s} FAILED: {type(e).__name__}: {e}")
            traceback.print_exc()
        log(f"section {s} took {time.perf_counter() - t:.1f}s")
    print("\n== summary (ms: event time, L2 flushed, median; x: eager/ours; host: Python call us; graph: replay ms) ==")
    print(f"{'sec':3s} {'case':32s} {'variant':44s} {'ms':>9s} {'eager':>9s} {'x':>5s} {'host_us':>8s} {'graph':>8s} "
          f"{'err':>8s} ok")
    for sec, case, var, ms, ref_ms, host, graph, err, ok, note in ROWS:
        ratio = ref_ms / ms if (ms == ms and ref_ms == ref_ms and ms > 0) else float("nan")
        print(f"{sec:3s} {case[:32]:32s} {var[:44]:44s} {ms:9.4f} {ref_ms:9.4f} {ratio:5.2f} {host:8.1f} {graph:8.4f} "
              f"{err:8.1e} {'ok' if ok else 'BAD'} {note}")
    print(f"total {time.perf_counter() - T0:.0f}s")


if __name__ == "__main__":
    main()
