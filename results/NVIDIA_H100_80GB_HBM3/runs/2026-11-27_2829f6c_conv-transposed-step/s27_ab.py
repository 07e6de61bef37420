"""A/B of the transposed conv in the ResNet Triton backend: `python s27_ab.py before|after ARGS...` runs
bench.resnet with the 512-channel layers on cuDNN (before: TRITON_CONV_SHAPES as it was) or on the Triton
transposed kernel (after: as committed)."""
import sys

import models.resnet as resnet_model

if sys.argv[1] == "before":
    resnet_model.TRITON_CONV_SHAPES = frozenset({(3, 1, 3, 64)})
import bench.resnet  # noqa: E402

sys.exit(bench.resnet.main(sys.argv[2:]))
