"""The depth study's suites: ``depth`` (one training session per model) and ``steptime`` (one training step
per model and backend through the shared harness, after a loss-agreement check of the fused kernels
against eager)."""
from __future__ import annotations

import json

import torch

from bench.data import sgemm as sgemm_data
from models.deep_mlp import FusedTrainer, build_model, parse_name
from triton_kernels.runtime import INTERPRET, default_device

from .report import depth_rows
from .session import train_session
from .study import SEED_STEP_MS, SUITE, family_depths

LOSS_AGREEMENT = 1e-4
CHAOS_FACTOR = 3.0  # see loss_agreement


def suite_depth(args) -> list[dict]:
    summaries = [train_session(args, name, progress=not args.no_progress) for name in family_depths(args)]
    return depth_rows(summaries, args)


def step_fns(name, args, device):
    """Backend -> step(x, t) -> loss, each with its own copy of the same initial model."""

    def eager(compile_forward=False, dtype=torch.float32):
        m = build_model(name, width=args.width, seed=args.seed, device=device).to(dtype)
        if compile_forward:
            m.backend = "compile"
        opt = torch.optim.Adam(m.parameters(), lr=args.lr, weight_decay=args.weight_decay)

        def step(x, t):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(m(x.to(dtype)), t.to(dtype))
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    def triton():
        m = build_model(name, width=args.width, seed=args.seed, device=device)
        tr = FusedTrainer(m, lr=args.lr, weight_decay=args.weight_decay, precision=args.precision)
        return tr._step if not INTERPRET else tr.step

    return {"eager": eager, "compile": lambda: eager(True), "triton": triton,
            "eager64": lambda: eager(dtype=torch.float64)}


def batch_starts(n: int, B: int, steps: int) -> list[int]:
    """First row of each of ``steps`` consecutive training batches of B rows (wrapping round n rows): the
    order every loss comparison trains in."""
    return [(s * B) % max(n - B + 1, 1) for s in range(steps)]


def rel_diff(a: float, b: float) -> float:
    """|a - b| / |b|: a loss's relative distance from the reference loss b."""
    return abs(a - b) / max(abs(b), 1e-30)


def loss_agreement(name, args, device, data) -> dict:
    """Train the same model (seed, data, order) for --steps steps with eager fp32 and the fused kernels.

    Passes when the losses after the last step agree within LOSS_AGREEMENT (1e-4) relative. Where they do
    not, the same steps are run in float64 (the exact computation): a batch-norm ResNet amplifies fp32
    rounding as it trains (ReLU units near 0 flip, and BN couples every row), so two correct fp32 runs
    drift apart. The fused run then passes when its largest loss deviation from float64 over the run is
    within CHAOS_FACTOR x eager fp32's own (bench.resnet_numerics shows the drift step by step).
    Returns rel (fused vs eager fp32, last step), le, lt, status, note.
    """
    fns = step_fns(name, args, device)
    fe, ft = fns["eager"](), fns["triton"]()
    n = len(data.train)
    B = min(args.batch, n)
    batches = batch_starts(n, B, args.steps)
    le_hist, lt_hist = [], []
    for i in batches:
        x, t = data.train.x[i:i + B], data.train.y[i:i + B]
        le_hist.append(fe(x, t))
        lt_hist.append(ft(x, t))
    if hasattr(ft, "__self__"):
        ft.__self__.check()
    le_hist = [float(v) for v in le_hist]
    lt_hist = [float(v) for v in lt_hist]
    le, lt = le_hist[-1], lt_hist[-1]
    rel = rel_diff(lt, le)
    out = {"rel": rel, "le": le, "lt": lt, "status": "ok" if rel <= LOSS_AGREEMENT else "wrong",
           "note": f"eager {le:.7g} vs triton {lt:.7g}, tolerance {LOSS_AGREEMENT:g}"}
    if rel > LOSS_AGREEMENT:
        f64 = fns["eager64"]()
        l64 = [float(v) for v in [f64(data.train.x[i:i + B], data.train.y[i:i + B]) for i in batches]]
        dev_t = max(rel_diff(a, b) for a, b in zip(lt_hist, l64))
        dev_e = max(rel_diff(a, b) for a, b in zip(le_hist, l64))
        ok = dev_t <= max(LOSS_AGREEMENT, CHAOS_FACTOR * dev_e)
        out["status"] = "ok" if ok else "wrong"
        out["note"] += (f"; float64 run: largest deviation over {args.steps} steps triton {dev_t:.2e}, eager fp32 "
                        f"{dev_e:.2e} (pass: triton <= {CHAOS_FACTOR:g}x eager's: rounding-limited, "
                        f"{'holds' if ok else 'fails'})")
    return out


def suite_steptime(args) -> list[dict]:
    from .. import harness
    from .. import results

    device = default_device()
    default = "eager,triton" if INTERPRET else "eager,compile,triton,triton+graph"
    backends = [b.strip() for b in (args.backends or default).split(",") if b.strip()]
    data = sgemm_data.load(args.data, target=args.target, seed=args.seed, max_rows=args.max_rows, device=device)
    rows: list[dict] = []
    cfg = harness.RunConfig(backends=[b for b in backends], rounds=3 if torch.cuda.is_available() else 1,
                            target_ms=200.0, rep=2 if INTERPRET else None)
    for name in family_depths(args):  # agreement, then timing, then save: one model at a time
        cls, depth = parse_name(name)
        B = min(args.batch, len(data.train))
        params = {"model": cls.__name__, "depth": depth, "width": args.width, "batch": B,
                  "precision": args.precision}
        agree = loss_agreement(name, args, device, data)
        rel, status = agree["rel"], agree["status"]
        rows.append(results.make_row(SUITE, "loss_agreement", params, "float32", "triton",
                                     f"loss_rel_diff_{args.steps}_steps", rel, "", error_vs_fp64=None, status=status,
                                     note=agree["note"]))
        print(f"{name}: loss agreement after {args.steps} steps: rel diff {rel:.3g} ({status}) {agree['note']}",
              flush=True)
        fns = step_fns(name, args, device)
        built = {}
        for b in ("eager", "compile", "triton"):
            if b == "compile" and depth > args.compile_max_depth:
                continue
            if status == "wrong" and b == "triton":
                continue
            built[b] = _lazy(fns[b])
        W, L = args.width, depth
        flops = 3 * 2 * B * W * W * L  # forward + two backward GEMMs per layer
        case = harness.Case(
            suite=SUITE, name="train_step", params=params, dtype=torch.float32,
            inputs=lambda seed, dev, B=B: (data.train.x[:B].contiguous(), data.train.y[:B].contiguous()),
            fns=built, reference=None, flops=flops, bytes=0.0, kind="model", backward=True,
            graph_ok=True)
        rows += harness.run_cases([case], cfg)
        if not args.no_write:  # keep every finished model if the run is cut short
            results.write_rows(rows, args.out, SUITE, tag=args.suite)
    for r in rows:  # the seed's eager step time beside ours
        if r["case"] == "train_step" and r["metric"] == "time_ms" and r["backend"] == "eager":
            p = json.loads(r["params"])
            seed = SEED_STEP_MS.get(p["model"], {}).get(p["depth"])
            if seed:
                r["note"] = (r["note"] or "") + f"; H100 eager reference {seed} ms"
    return rows


def _lazy(factory):
    """Build the step function on first call (so unused backends cost nothing)."""
    state = {}

    def fn(*a):
        if "f" not in state:
            state["f"] = factory()
        return state["f"](*a)

    return fn

