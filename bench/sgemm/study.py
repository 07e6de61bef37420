"""What the SGEMM depth study is: its results suite, model families and depths, the seed study's figures
it is compared with, and the models a suite run trains."""
from __future__ import annotations

SUITE = "sgemm"
DEPTHS = (10, 24, 50, 100, 200, 600, 1000)
STUDY_MODELS = ("GloNet", "ResNetMLP", "MLP")

# The seed study's figures (200 epochs, width 16): test MSE per depth and training time (s).
SEED_MSE = {"GloNet": {d: "0.021-0.022" for d in DEPTHS}, "ResNetMLP": {10: "0.018", 1000: "0.048"}}
SEED_TIME_S = {"GloNet": {1000: 289.0}, "ResNetMLP": {1000: 675.0}}
SEED_STEP_MS = {"GloNet": {1000: 228.0}, "ResNetMLP": {1000: 405.0}}  # eager, one H100 today


def family_depths(args) -> list[str]:
    """The models a suite run trains: every --models family at every --depths depth (ResNet-MLP: even
    depths only, two layers per block)."""
    out = []
    for fam in args.models:
        for d in args.depths:
            if fam.lower().startswith("resnet") and d % 2:
                continue
            out.append(f"{fam}{d}")
    return out

