"""Probe: does the persistent TMA GEMM kernel lose time in-kernel to its device-side tensor descriptors?

The production `_gemm_tma_kernel` builds its two descriptors in the kernel (tl.make_tensor_descriptor: each
program writes 2 x 128 bytes to global scratch and fences them before the first TMA load). A copy taking
host-side descriptors (TensorDescriptor arguments, encoded by the launcher) is timed against it on the
tuned plan's config for each shape, kernel time alone (GPU spin ahead of each call, L2 flushed), and as a
one-kernel CUDA graph replay (flushed), with cuBLAS (F.linear + activation / torch.mm) for reference.
Also: the host cost of encoding one descriptor (fill_tma_descriptor), what a host-side path would add.
"""
import json
import os
import statistics
import sys
import time

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from triton_kernels import gemm
from triton_kernels.gemm_kernels import _epilogue_tile, _tile_coords
from triton_kernels.runtime import cuda_time_ms


@triton.jit
def host_desc_kernel(
    a_desc, b_desc, c_ptr, bias_ptr, res_ptr, z_ptr,
    M, N, K, NUM_PROGS,
    stride_cm, stride_cn, stride_bias, stride_rm, stride_rn, stride_zm, stride_zn,
    A_T: tl.constexpr, B_T: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, SAVE_Z: tl.constexpr, ACT: tl.constexpr,
    PRECISION: tl.constexpr, INDEX_64: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PDL: tl.constexpr = False,
):
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    FLATTEN: tl.constexpr = (ACT != "gelu") and (c_ptr.dtype.element_ty.primitive_bitwidth == 16)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_PROGS, flatten=FLATTEN):
        pid_m, pid_n = _tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            if A_T:
                a = a_desc.load([off_k, off_m]).T
            else:
                a = a_desc.load([off_m, off_k])
            if B_T:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        _epilogue_tile(acc, off_m, off_n, M, N, c_ptr, bias_ptr, res_ptr, z_ptr, stride_cm, stride_cn,
                       stride_bias, stride_rm, stride_rn, stride_zm, stride_zn, HAS_BIAS, HAS_RES, SAVE_Z, ACT,
                       INDEX_64)


def graph_of(fn):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def case(name, M, N, K, act, bias, a_kmajor=False, b_kmajor=True, dtype=torch.bfloat16):
    """C (M, N) = act(A @ B + bias); B K-major is nn.Linear's weight.t()."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((K, M) if a_kmajor else (M, K), device="cuda", dtype=dtype, generator=g) / K ** 0.5
    a = a.t() if a_kmajor else a
    b = torch.randn((N, K) if b_kmajor else (K, N), device="cuda", dtype=dtype, generator=g)
    b = b.t() if b_kmajor else b
    bvec = torch.randn(N, device="cuda", dtype=dtype, generator=g) if bias else None
    c = torch.empty((M, N), device="cuda", dtype=dtype)
    plan = gemm.find_plan(a, b, c, bvec, None, None, act, "ieee", False)
    if not plan.programs or plan.split_k > 1 or plan.relayout or plan.a_copy:
        return {"case": name, "skipped": f"plan is not the plain TMA kernel: {plan}"}
    ce, opts = dict(plan.kernel.constexprs), dict(plan.kernel.options)
    BM, BN, BK = ce["BLOCK_M"], ce["BLOCK_N"], ce["BLOCK_K"]
    a_desc = (TensorDescriptor.from_tensor(a.t(), [BK, BM]) if plan.a_t else TensorDescriptor.from_tensor(a, [BM, BK]))
    b_desc = (TensorDescriptor.from_tensor(b.t(), [BN, BK]) if plan.b_t else TensorDescriptor.from_tensor(b, [BK, BN]))
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    progs = min(tiles, plan.programs)
    c2 = torch.empty_like(c)
    strides = dict(stride_cm=c.stride(0), stride_cn=c.stride(1), stride_bias=bvec.stride(0) if bias else 0,
                   stride_rm=0, stride_rn=0, stride_zm=0, stride_zn=0)

    def device_side():
        gemm._launch_plan(plan, a, b, c, bvec, None, None, M, N, K)

    def host_side():
        host_desc_kernel[(progs,)](a_desc, b_desc, c2, bvec if bias else c2, c2, c2, M, N, K, progs, **strides,
                                   **ce, **opts)

    ref_act = {"none": lambda t: t, "relu": torch.relu}[act]
    if b_kmajor and not a_kmajor:
        w = b.t()
        def cublas():
            return ref_act(torch.nn.functional.linear(a, w, bvec))
    else:
        def cublas():
            return ref_act(torch.mm(a, b) + bvec if bias else torch.mm(a, b))
    c.fill_(float("nan")); c2.fill_(float("nan"))
    device_side(); host_side()
    torch.cuda.synchronize()
    same = bool(torch.equal(c, c2))
    err = float((c.float() - cublas().float()).abs().max())
    fns = {"device_desc": device_side, "host_desc": host_side, "cublas": cublas}
    graphs = {k + "+graph": graph_of(f) for k, f in fns.items()}
    kernel_t = {k: [] for k in fns}
    graph_t = {k: [] for k in graphs}
    for _ in range(8):  # interleaved rounds
        for k, f in fns.items():
            kernel_t[k] += cuda_time_ms(f, warmup=2, rep=40, flush_l2=True, lead_ms=0.05)
        for k, f in graphs.items():
            graph_t[k] += cuda_time_ms(f, warmup=2, rep=40, flush_l2=True, lead_ms=0.05)
    med = {k: statistics.median(v) * 1e3 for k, v in {**kernel_t, **graph_t}.items()}
    out = {"case": name, "M": M, "N": N, "K": K, "act": act, "bias": bias, "a_t": plan.a_t, "b_t": plan.b_t,
           "config": {**ce, **opts}, "programs": progs, "tiles": tiles, "bitwise_equal": same,
           "max_abs_diff_vs_cublas": err, "median_us": {k: round(v, 2) for k, v in med.items()}}
    out["host_over_device"] = round(med["device_desc"] / med["host_desc"], 4)
    out["host_over_device_graph"] = round(med["device_desc+graph"] / med["host_desc+graph"], 4)
    print(json.dumps(out), flush=True)
    return out


def encode_cost():
    """Host cost of one descriptor encode as Triton's launcher does it (fill_tma_descriptor), microseconds."""
    utils = triton.runtime.driver.active.utils
    x = torch.empty((4096, 8704), device="cuda", dtype=torch.bfloat16)
    args = (x.data_ptr(), 128, 2, 10, [64, 64], [4096, 8704], [8704, 1], 0)
    try:
        utils.fill_tma_descriptor(*args)
    except Exception as e:  # noqa: BLE001
        return {"error": repr(e)}
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        utils.fill_tma_descriptor(*args)
    return {"fill_tma_descriptor_us": round((time.perf_counter() - t0) / n * 1e6, 3)}


if __name__ == "__main__":
    results = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
               "encode": encode_cost(), "cases": []}
    print(json.dumps(results["encode"]), flush=True)
    cases = [
        ("fc1_fwd", 512, 1024, 8704, "relu", True),
        ("fc2_fwd", 512, 1024, 1024, "relu", True),
        ("linear4096_fwd", 4096, 1024, 8704, "relu", True),
        ("sq512", 512, 512, 512, "none", False, False, False),
        ("sq1024", 1024, 1024, 1024, "none", False, False, False),
        ("sq2048", 2048, 2048, 2048, "none", False, False, False),
        ("fc1_dx", 512, 8704, 1024, "none", False, False, False),      # dZ @ W
        ("fc1_dw", 1024, 8704, 512, "none", False, True, False),       # dZ^T @ x
        ("fc2_dx", 512, 1024, 1024, "none", False, False, False),
    ]
    for spec in cases:
        try:
            results["cases"].append(case(*spec))
        except Exception as e:  # noqa: BLE001
            results["cases"].append({"case": spec[0], "error": repr(e)})
            print(spec[0], "error", repr(e), flush=True)
    path = os.path.join(os.environ.get("OUT", "."), "hostdesc.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
