import os

import pytest
import torch

# Tests check correctness: never spend time autotuning (each key would compile every config).
# The tuning itself is tested explicitly (test_runtime.py, test_gemm.py::test_gpu_autotune_persists).
os.environ.setdefault("TRITON_PLAYGROUND_AUTOTUNE", "0")

import triton_kernels  # noqa: E402,F401  (switches Triton to the interpreter on CPU before anything imports it)

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"


def pytest_collection_modifyitems(config, items):
    if GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    # fresh random inputs per test, but reproducible from the test's name
    torch.manual_seed(hash(os.environ.get("PYTEST_CURRENT_TEST", "")) % (2**31))
    yield


@pytest.fixture
def device():
    return DEVICE
