"""Named GEMM shape sets for sweeps and the landscape data set (M x N x K).

    square    cubes 256 .. 4096
    skinny    one or two small dims (tall-skinny, short-wide, small K)
    studies   the GEMMs of the playground's studies (bench/cases/gemm.py): the linear+bias+ReLU layer,
              MNIST softmax regression, the SGEMM depth study's widths, Char-CNN's FC layers, ResNet's head
    random    log-uniform dims in [64, 8192], multiples of 16 ("random:24" for 24 shapes, "random:24:7"
              with seed 7; default 16 shapes, seed 0)

``--shapes`` takes these names and explicit shapes mixed: ``--shapes square,studies,random:8,1000x1000x1000``.
"""
from __future__ import annotations

import math
import random

GEMM_SETS: dict[str, list[tuple[int, int, int]]] = {
    "square": [(n, n, n) for n in (256, 512, 1024, 2048, 3072, 4096)],
    "skinny": [(8192, 128, 4096), (128, 8192, 4096), (4096, 4096, 128), (64, 4096, 4096), (4096, 64, 4096),
               (16384, 256, 1024), (1024, 16384, 256), (2048, 2048, 16384)],
    "studies": [(4096, 1024, 8704), (128, 10, 784), (1024, 16, 16), (1024, 64, 64), (512, 1024, 8704),
                (512, 1024, 1024), (512, 4, 1024), (512, 10, 512)],
}


def random_shapes(n: int = 16, seed: int = 0, lo: int = 64, hi: int = 8192) -> list[tuple[int, int, int]]:
    """n shapes with every dim log-uniform in [lo, hi], rounded to a multiple of 16."""
    rng = random.Random(seed)

    def dim() -> int:
        return max(16, int(round(math.exp(rng.uniform(math.log(lo), math.log(hi))) / 16)) * 16)

    return [(dim(), dim(), dim()) for _ in range(n)]


def gemm_shapes(spec: str) -> list[tuple[int, int, int]]:
    """The shapes a --shapes value names (set names and MxNxK shapes, comma-separated), in order, once each."""
    out: list[tuple[int, int, int]] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        name, *args = item.split(":")
        if name in GEMM_SETS and not args:
            out += GEMM_SETS[name]
        elif name == "random":
            try:
                n = int(args[0]) if args else 16
                seed = int(args[1]) if len(args) > 1 else 0
            except ValueError:
                raise ValueError(f"--shapes: random takes random[:count[:seed]], got {item!r}") from None
            out += random_shapes(n, seed)
        else:
            try:
                dims = tuple(int(x) for x in item.lower().split("x"))
            except ValueError:
                dims = ()
            if len(dims) != 3 or min(dims) < 1:
                raise ValueError(f"--shapes: {item!r} is neither MxNxK nor a set ({', '.join(sorted(GEMM_SETS))}, "
                                 "random[:count[:seed]])")
            out.append(dims)
    return list(dict.fromkeys(out))
