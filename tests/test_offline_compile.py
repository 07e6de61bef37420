"""Every kernel compiles for sm_90 with the installed Triton (tests/offline_compile.py), and the recorder and
the reduction that choose what is compiled."""
import json
import os

import pytest
import torch

from triton_kernels import compile_pool, gemm, runtime

from . import offline_compile


def _specs():
    return json.loads(offline_compile.SPECS_FILE.read_text())


RECORDING = pytest.mark.skipif(bool(os.environ.get(offline_compile.RECORD_ENV)), reason="the specs are being recorded")


@RECORDING
def test_every_kernel_compiles_for_sm90():
    """Each recorded specialization and gemm_gluon's compile for sm_90, and every kernel of triton_kernels has
    at least one (a new kernel, or one whose arguments changed, asks for the specs to be recorded anew)."""
    pytest.importorskip("triton.backends.nvidia.compiler")
    specs = _specs() + offline_compile.gpu_only_specs()
    result = offline_compile.compile_all(specs, workers=min(8, compile_pool.cores()))
    assert not result["failures"], (f"Triton {result['triton']}: {len(result['failures'])} of {len(specs)} "
                                    "specializations do not compile for sm_90:\n" + "\n".join(result["failures"]))
    specified = {f"{s['module']}.{s['name']}" for s in specs}
    missing = sorted(set(offline_compile.defined_kernels()) - specified)
    assert not missing, f"kernels with no specialization: {missing}; record them ({offline_compile.REGENERATE})"


@pytest.mark.skipif(not runtime.INTERPRET, reason="records the interpreter's launches")
def test_recorder_gives_what_the_jit_specialises():
    a, b = torch.randn(33, 40), torch.randn(40, 17)
    bias = torch.randn(17)
    with offline_compile.Recorder() as recorder:
        gemm.gemm(a, b, bias, activation="relu")
    (spec,) = recorder.specs.values()
    assert spec["module"] == "triton_kernels.gemm_kernels" and spec["name"] == "_gemm_kernel"
    args = spec["args"]
    assert args["a_ptr"] == {"t": "ptr", "dtype": "float32", "div16": a.data_ptr() % 16 == 0}
    assert args["M"] == {"t": "int", "v": 33} and args["stride_am"] == {"t": "int", "v": 40}
    assert args["ACT"] == {"t": "constexpr", "v": "relu"} and args["HAS_BIAS"] == {"t": "constexpr", "v": True}
    assert set(spec["options"]) <= set(offline_compile.OPTIONS) and "num_warps" in spec["options"]


def test_reduction_covers_every_mode_with_the_smallest_tiles():
    def spec(act, block, dtype="float32", name="_gemm_kernel"):
        return {"module": "triton_kernels.gemm_kernels", "name": name, "options": {"num_warps": 4},
                "args": {"a_ptr": {"t": "ptr", "dtype": dtype, "div16": True},
                         "ACT": {"t": "constexpr", "v": act}, "BLOCK": {"t": "constexpr", "v": block}}}

    specs = [spec("relu", 64), spec("relu", 16), spec("gelu", 128), spec("none", 32, "float16"),
             spec("none", 32, name="_other_kernel"), dict(spec("relu", 8), module="tests.test_x")]
    chosen = offline_compile.reduce_specs(specs)
    by_name = [(s["name"], s["args"]["ACT"]["v"], s["args"]["BLOCK"]["v"]) for s in chosen]
    # relu and fp32 at the smallest relu tile, gelu (its only spec), then fp16 with "none"; the other kernel;
    # no kernel outside triton_kernels
    assert sorted(by_name) == sorted([("_gemm_kernel", "relu", 16), ("_gemm_kernel", "gelu", 128),
                                      ("_gemm_kernel", "none", 32), ("_other_kernel", "none", 32)])


@RECORDING
def test_committed_specs_are_reduced_and_name_real_kernels():
    specs = _specs()
    assert specs and all(s["module"].startswith("triton_kernels.") for s in specs)
    assert offline_compile.reduce_specs(specs) == specs  # as --record writes them: reducing again keeps them all
