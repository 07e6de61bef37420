"""GEMM benchmark: Triton fused GEMM vs torch.matmul (cuBLAS), eager linear+bias+act, torch.compile.

    python -m bench.gemm [--quick] [--shapes 8192x8192x8192] [--dtype bfloat16] [--full] ...

--shapes builds exactly these matmuls (MxNxK, or N for N^3) in --dtype (default float32 in the CPU
interpreter, bfloat16 on a GPU). In the CPU interpreter the default is a set of tiny cases; --full
runs the GPU sizes there (an estimate is printed first).
"""
import sys

from .cases.gemm import cases
from .cli import main, run


def cli(argv=None) -> list[dict]:
    return main("gemm", cases, __doc__, argv, module="bench.gemm")


if __name__ == "__main__":
    sys.exit(run(cli))
