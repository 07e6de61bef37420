"""A run folder's analysis (this folder's, or the folder given as the argument, which holds the same two
backends' runs of the same recipe): the epoch at which test accuracy first reached 94 %, the training time to it, and
each backend's per-step training loss over the first 300 steps against eager's from
2026-11-27_08be298_resnet-cifar10-backends (same seed, data and recipe: same initial weights, batches and
augmentation; eager's code path did not change since); writes curves.png into that folder. Run from the
repository root: python results/NVIDIA_H100_80GB_HBM3/runs/2026-11-27_73e4186_resnet-cifar10/compare_curves.py [FOLDER]"""
import json
import sys
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
EAGER = Path(__file__).parent.parent / "2026-11-27_08be298_resnet-cifar10-backends" / "eager"
RUNS = {"triton_stepgraph": HERE / "triton_stepgraph", "compile_stepgraph": HERE / "compile_stepgraph",
        "eager (08be298)": EAGER}
FIRST = 300  # steps compared one by one (the warm-up is 388)
hist = {r: json.loads((path / "history.json").read_text()) for r, path in RUNS.items()}
loss = {r: np.array([x for h in hist[r] for x in h["step_losses"]]) for r in RUNS}
eager = loss["eager (08be298)"][:FIRST]
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
for r in RUNS:
    h, l = hist[r], loss[r]
    rel = np.abs(l[:FIRST] - eager) / eager
    epochs = [e["epoch_s"] for e in h]
    first = next(i for i, e in enumerate(h) if e.get("test_acc", 0) >= 94.0)
    print(f"{r:18s} steps 1-{FIRST} vs eager: mean rel diff {rel.mean():.4f}, max {rel.max():.4f} (step {rel.argmax() + 1}); "
          f"94 % after epoch {first + 1} ({h[first]['test_acc']:.2f} %), training {sum(epochs[:first + 1]):.1f} s, "
          f"wall {h[first]['wall_to_target_s']:.1f} s; epoch 1 {epochs[0]:.2f} s, median epoch after it "
          f"{np.median(epochs[1:]):.3f} s; final {h[-1]['test_acc']:.2f} %")
    axes[0].plot(np.arange(1, FIRST + 1), l[:FIRST], lw=0.8, label=r)
    axes[1].plot([e["epoch"] for e in h], [e["test_acc"] for e in h], lw=1, label=r)
axes[0].set(xlabel="step", ylabel="training loss", title=f"first {FIRST} steps (seed 0)")
axes[1].set(xlabel="epoch", ylabel="test accuracy (%)", ylim=(80, 96), title="test accuracy")
axes[1].axhline(94, color="grey", ls=":", lw=1)
for ax in axes:
    ax.legend(fontsize=8); ax.grid(alpha=0.3)
fig.savefig(HERE / "curves.png", dpi=90, bbox_inches="tight")
