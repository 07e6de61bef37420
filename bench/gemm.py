"""GEMM benchmark: Triton fused GEMM vs torch.matmul (cuBLAS), eager linear+bias+act, torch.compile.

    python -m bench.gemm [--quick] [--shapes 8192x8192x8192] [--dtype bfloat16] ...
"""
from .cases.gemm import cases
from .cli import main

if __name__ == "__main__":
    main("gemm", cases, __doc__)
