import os
import zlib

import pytest
import torch

# Tests check correctness: never spend time autotuning (each key would compile every config).
# The tuning itself is tested explicitly (test_runtime.py, test_gemm.py::test_gpu_autotune_persists).
os.environ.setdefault("TRITON_PLAYGROUND_AUTOTUNE", "0")

import triton_kernels  # noqa: E402,F401  (switches Triton to the interpreter on CPU before anything imports it)

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"


def pytest_addoption(parser):
    parser.addoption("--shard", default=None, metavar="K/N",
                     help="run only every N-th selected test, starting at the K-th (1-based): N processes "
                          "with K = 1..N split one file's tests between them")


@pytest.hookimpl(trylast=True)  # after -m / -k deselection, so the shards split what is actually run
def pytest_collection_modifyitems(config, items):
    shard = config.getoption("--shard")
    if shard:
        k, n = (int(v) for v in shard.split("/"))
        if not 1 <= k <= n:
            raise pytest.UsageError(f"--shard {shard}: need 1 <= K <= N")
        keep = items[k - 1::n]
        kept = set(map(id, keep))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep
    if GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed(request):
    # Random inputs differ from test to test but are reproducible from the test's name (Python's own
    # str hash changes between processes, which made failures unreproducible). TEST_SEED=<n> draws a
    # fresh set everywhere.
    base = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed((base ^ int(os.environ.get("TEST_SEED", "0"))) % (2**31))
    yield


@pytest.fixture(autouse=True)
def _mutation_analysis(request):
    """Every test fails if torch.compile gave up analysing which arguments a traced kernel writes (unless
    marked ``mutation_analysis_gives_up``: the test of that check)."""
    from .isolated import MutationAnalysisWatch

    with MutationAnalysisWatch() as watch:
        yield
    if request.node.get_closest_marker("mutation_analysis_gives_up") is None:
        watch.check()


@pytest.fixture
def device():
    return DEVICE


@pytest.fixture
def isolated(request):
    """``isolated("tests.test_x:fn", *args)``: run a case in the worker process of tests/isolated.py
    (a device fault then fails this test only), seeded like the test itself."""
    from .isolated import run_isolated

    seed = (zlib.crc32(request.node.nodeid.encode()) ^ int(os.environ.get("TEST_SEED", "0"))) % (2**31)
    return lambda target, *args, **kwargs: run_isolated(target, *args, seed=seed, **kwargs)
