"""The tile-order experiment's kernel variants (bench/bn_tile_order.py) against float64, and batch_norm back
on its own kernels afterwards."""
from bench import bn_tile_order
from triton_kernels import batchnorm, batchnorm_kernels

from .conftest import DEVICE


def test_variants_match_float64_and_restore():
    bn_tile_order.check(DEVICE)
    assert batchnorm._bn_stats_kernel is batchnorm_kernels._bn_stats_kernel
    assert batchnorm._bn_bwd_reduce_kernel is batchnorm_kernels._bn_bwd_reduce_kernel
    assert "cache_path" not in vars(batchnorm._tuners["stats"])
    assert "cache_path" not in vars(batchnorm._tuners["bwd_reduce"])
