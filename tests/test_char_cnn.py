"""The Char-CNN model, encoder, benchmark pieces and data-parallel inference: the paper's encoder and
initialisation, state_dicts identical across backends, both Triton paths and the Triton training path
against float64 at a short input length (CPU interpreter), training with resumable checkpoints, the
benchmark on a tiny model, and a 2-process gloo run whose gathered predictions equal a single-process
run; on the GPU the full model in bf16 on real AG News text, CUDA-graph capture and compile."""
import os
import socket

import pytest
import torch
from torch.nn import functional

from models.char_cnn import ALPHABET, LENGTH, PAD, CharCNN, encode, layer_lengths, one_hot
from triton_kernels.testing import assert_close, cudnn_tf32

from .conftest import DEVICE

TINY = {"length": 123, "channels": 4, "fc": 8}  # the shortest input every stage accepts


def _tiny(backend="eager", dropout=0.5, **kw):
    torch.manual_seed(0)
    return CharCNN(**{**TINY, **kw}, dropout=dropout, backend=backend).to(DEVICE)


def _random_indices(B, L, device=DEVICE):
    return torch.randint(0, PAD + 1, (B, L), device=device, dtype=torch.uint8)


# ----------------------------------------------------------------------------------------------- encoder
def test_encoder_reversed_lowercase_and_alphabet():
    assert len(ALPHABET) == 70 and PAD == 70
    idx = encode(["Ab c", "x" * 10 + "YZ"], length=6)
    assert idx.dtype == torch.uint8 and idx.shape == (2, 6)
    a, b, c = ALPHABET.index("a"), ALPHABET.index("b"), ALPHABET.index("c")
    assert idx[0].tolist() == [c, PAD, b, a, PAD, PAD]  # reversed, lower-cased, space = no character, padded
    y, z, x = ALPHABET.index("y"), ALPHABET.index("z"), ALPHABET.index("x")
    assert idx[1].tolist() == [z, y, x, x, x, x]  # the latest characters kept first, the rest cut
    idx = encode(["-\\né€"], length=5)  # '-' twice in the paper's list: its first index; AG News's \n
    assert idx[0].tolist() == [PAD, PAD, ALPHABET.index("\n"), ALPHABET.index("-"), PAD]
    assert ALPHABET.index("-") == 36 and ALPHABET[59] == "-"


def test_one_hot_and_lengths():
    idx = encode(["hello"], length=8)
    oh = one_hot(idx, torch.float32)
    assert oh.shape == (1, 70, 8) and oh.sum().item() == 5 and oh[0, :, 5:].sum().item() == 0
    n = layer_lengths(LENGTH)
    assert (n["conv1"], n["pool1"], n["pool2"], n["conv6"], n["pool6"]) == (1008, 336, 110, 102, 34)
    with pytest.raises(ValueError, match="too short"):
        CharCNN(length=122)


def test_paper_shapes_and_initialisation():
    torch.manual_seed(0)
    m = CharCNN()
    assert tuple(m.ln1.normalized_shape) == (256, 1008) and tuple(m.ln6.normalized_shape) == (256, 102)
    assert m.fc1.in_features == 8704 and m.fc3.out_features == 4 and m.conv1.in_channels == 70
    for t in (m.fc1.weight, m.conv2.weight):
        assert abs(t.std().item() - 0.05) < 1e-3 and abs(t.mean().item()) < 1e-3
    assert abs(m.fc1.bias.std().item() - 0.05) < 5e-3
    assert torch.equal(m.ln1.weight, torch.ones_like(m.ln1.weight)) and not m.ln6.bias.any()
    assert abs(m.flops_per_input() / 1e9 - 0.49) < 0.005 and abs(m.flops_per_input("dense") / 1e9 - 0.74) < 0.005


def test_state_dict_identical_across_backends():
    m = _tiny()
    ref = {k: v.clone() for k, v in m.state_dict().items()}
    for backend in ("compile", "triton", "triton-per-op", "eager"):
        m.backend = backend
        if backend.startswith("triton"):
            for allow, layout in ((False, (2, 1, 0)), (True, (0, 2, 1))):  # as conv1d's fp32 calls run: tf32 or not
                with cudnn_tf32(allow):
                    packed = m.packed_parameters()  # the inference copies the Triton paths read
                assert packed["conv2"].permute(*layout).is_contiguous(), allow
                assert torch.equal(packed["conv2"], m.conv2.weight)
                assert packed["conv1"].permute(2, 1, 0).is_contiguous()  # the gather layer's, at any precision
        sd = m.state_dict()
        assert sd.keys() == ref.keys() and all(torch.equal(sd[k], ref[k]) for k in ref), backend
    m2 = _tiny(backend="triton")  # the eager model's state_dict loads into a Triton-backend model as is
    m2.load_state_dict(ref)
    assert all(torch.equal(a, b) for a, b in zip(m2.state_dict().values(), ref.values()))
    with pytest.raises(ValueError, match="backend must be"):
        m.backend = "cuda"


# ------------------------------------------------------------------------------------ Triton paths vs fp64
def test_triton_paths_match_float64():
    """Fused and per-op inference (gather with LayerNorm statistics, pool epilogues, channels-last) against
    the float64 eager model; the packed copies follow an in-place weight update."""
    m = _tiny().eval()
    x = _random_indices(2, TINY["length"])
    ref = CharCNN(**TINY).double().eval()
    ref.load_state_dict(m.state_dict())
    with torch.no_grad():
        expect = ref.forward_eager(x.cpu())
        for backend in ("triton", "triton-per-op"):
            m.backend = backend
            assert_close(m(x), expect, torch.float32, name=backend)
        m.conv2.weight.mul_(1.5)  # the packed copy must be rebuilt
        ref.conv2.weight.mul_(1.5)
        assert_close(m(x), ref.forward_eager(x.cpu()), torch.float32, name="after an update")


def test_triton_training_path_gradients():
    """The differentiable Triton path (gather / conv1d / LayerNorm / linear forward and backward) gives the
    float64 eager gradients of every parameter (dropout off)."""
    m = _tiny(backend="triton", dropout=0.0).train()
    x = _random_indices(2, TINY["length"])
    y = torch.tensor([1, 3], device=DEVICE)
    functional.cross_entropy(m(x), y).backward()
    ref = CharCNN(**TINY, dropout=0.0).double()
    ref.load_state_dict(m.state_dict())
    functional.cross_entropy(ref(x.cpu()), y.cpu()).backward()
    grads = dict(ref.named_parameters())
    for name, p in m.named_parameters():
        assert_close(p.grad, grads[name].grad, torch.float32, name=name, scale=10)


def test_forward_errors():
    m = _tiny(backend="triton")
    with pytest.raises(ValueError, match="character indices"):
        m(torch.zeros(2, 70, TINY["length"]))
    with pytest.raises(ValueError, match="expected \\(B, 123\\)"):
        m(_random_indices(2, 50))


# ------------------------------------------------------------------------------------ training, benchmark
def test_train_checkpoint_resume_and_bench(tmp_path):
    """`train` for 1 epoch, then resumed to 2 (from the atomic checkpoint); the weights it saves feed the
    benchmark (eager on the tiny model, AG News eval rows)."""
    from bench import char_cnn

    pytest.importorskip("tqdm")
    try:
        char_cnn.load_text(None)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"AG News not available: {e}")
    w, ck = tmp_path / "w.pt", tmp_path / "ck.pt"
    common = ["--weights", str(w), "--checkpoint", str(ck), "--no-progress", "--no-write", "--train-limit", "6",
              "--eval-limit", "4", "--batch", "4"]
    assert char_cnn.main(["train", "--epochs", "1", *common]) == 0
    first = torch.load(ck, weights_only=False)
    assert first["epoch"] == 1 and len(first["log"]) == 1
    assert char_cnn.main(["train", "--epochs", "2", *common]) == 0
    second = torch.load(ck, weights_only=False)
    assert second["epoch"] == 2 and second["log"][0] == first["log"][0]
    blob = torch.load(w, weights_only=False)
    assert "trained on" in blob["provenance"]["how"] and "stored in bfloat16" in blob["provenance"]["how"]
    assert set(blob["state_dict"]) == set(CharCNN(**char_cnn.TINY_DIMS).state_dict())
    # saved in bf16 by default (the checkpoint keeps the fp32 numbers it resumes from), rounded once, to nearest
    assert all(v.dtype == torch.bfloat16 for v in blob["state_dict"].values())
    trained = second["model"]
    assert all(trained[k].dtype == torch.float32 and torch.equal(trained[k].bfloat16(), v)
               for k, v in blob["state_dict"].items())
    assert not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(SystemExit, match="another configuration"):
        char_cnn.main(["train", "--epochs", "3", *common, "--lr", "0.5"])
    rc = char_cnn.main(["--weights", str(w), "--backends", "eager", "--no-layers", "--repeat", "1", "--eval-rows", "4",
                        "--no-write"])
    assert rc == 0


def test_train_recipe_options(tmp_path):
    """He init, cosine schedule, weight decay and the shift augmentation train and are named in the
    weights' provenance."""
    from bench import char_cnn

    pytest.importorskip("tqdm")
    try:
        char_cnn.load_text(None)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"AG News not available: {e}")
    w = tmp_path / "w.pt"
    argv = ["train", "--epochs", "1", "--weights", str(w), "--checkpoint", str(tmp_path / "ck.pt"), "--no-progress",
            "--no-write", "--train-limit", "4", "--eval-limit", "4", "--batch", "4", "--init", "he", "--schedule",
            "cosine", "--weight-decay", "0.01", "--shift", "5", "--save-dtype", "float32"]
    assert char_cnn.main(argv) == 0
    blob = torch.load(w, weights_only=False)
    how = blob["provenance"]["how"]
    assert "He init" in how and "cosine" in how and "weight decay 0.01" in how and "shift 0-5" in how
    assert "stored in" not in how and all(v.dtype == torch.float32 for v in blob["state_dict"].values())
    with pytest.raises(SystemExit):
        char_cnn.main([*argv, "--shift", "-1"])


def test_shifted_moves_rows_right_and_pads():
    from bench.char_cnn import shifted
    from models.char_cnn import PAD

    idx = torch.arange(1, 13, dtype=torch.uint8).reshape(2, 6)
    assert torch.equal(shifted(idx, 0, torch.Generator()), idx)
    out = shifted(idx, 3, torch.Generator().manual_seed(0))
    for row, src in zip(out, idx):
        k = int((row == PAD).sum())
        assert 0 <= k <= 3 and torch.equal(row[k:], src[:6 - k]) and bool((row[:k] == PAD).all())


def test_init_he_scales_by_fan_in():
    torch.manual_seed(0)
    m = CharCNN(length=123, channels=64, fc=256)
    m.init_he()
    for layer in (m.conv2, m.fc1):
        fan_in = layer.weight[0].numel()
        assert abs(layer.weight.std().item() / (2.0 / fan_in) ** 0.5 - 1) < 0.1
        assert not layer.bias.any()


# ------------------------------------------------------------------------------------ data parallel
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dp_worker(rank: int, world: int, port: int, argv: list) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    from bench import char_cnn_dp

    rc = char_cnn_dp.main(argv)
    if rc != 0:
        raise SystemExit(rc)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the gloo CPU run; GPUs use NCCL (issue: multi-GPU runs)")
def test_data_parallel_two_gloo_processes(tmp_path):
    """torch.distributed with 2 gloo processes, two batch sizes in one launch: root scatters shards, both
    compute, root gathers (overlapped and not); the gathered predictions equal a single-process run of the
    same model on the same inputs."""
    import torch.multiprocessing as mp

    from bench import char_cnn_dp

    dump = tmp_path / "dp.pt"
    argv = ["--tiny", "--synthetic", "--batch", "2,3", "--shards", "3", "--rounds", "1", "--no-write",
            "--dump", str(dump)]
    mp.start_processes(dp_worker, args=(2, _free_port(), argv), nprocs=2, join=True, start_method="spawn")
    got = torch.load(dump, weights_only=False)
    assert got["gathered"].shape == (3 * 2 * 3, 4)
    model, _ = char_cnn_dp.make_model(char_cnn_dp.parse_args(argv), torch.device("cpu"))
    with torch.no_grad():
        single = model.forward_eager(got["indices"])
    assert torch.equal(got["gathered"].argmax(1), single.argmax(1))
    assert torch.allclose(got["gathered"], single, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------- GPU
def gpu_full_model_bf16() -> None:
    """The full model, bf16 Triton (fused and per-op) vs eager fp32 on real AG News text: argmax agreement
    and logit error; CUDA-graph capture of the fused forward."""
    from bench import char_cnn
    from bench.harness import CudaGraphed

    torch.backends.cudnn.allow_tf32 = False
    try:
        texts = char_cnn.load_text(None)["eval_texts"][:256]
        x = encode(texts).cuda()
    except Exception:  # noqa: BLE001 - no data on this box: random text
        x = _random_indices(256, LENGTH, device="cuda")
    torch.manual_seed(0)
    ref = CharCNN().cuda().eval()
    m = CharCNN().cuda().eval()
    m.load_state_dict(ref.state_dict())
    m.to(torch.bfloat16)
    with torch.no_grad():
        expect = ref(x).double()
        for backend in ("triton", "triton-per-op"):
            m.backend = backend
            out = m(x)
            assert_close(out.float(), expect, torch.bfloat16, name=backend, scale=2)
            assert (out.float().argmax(1) == expect.argmax(1)).float().mean() >= 0.98
        m.backend = "triton"
        graphed = CudaGraphed(lambda t: m(t), (x,))
        assert torch.equal(graphed(x), m(x))


@pytest.mark.gpu
def test_gpu_full_model_bf16(isolated):
    isolated("tests.test_char_cnn:gpu_full_model_bf16")


def gpu_training_step_and_compile() -> None:
    """One Triton-backend training step on the full model matches a float64 eager step's gradients, and
    the compile backend runs. (cuDNN's TF32 off, which the triton model's convolutions follow as nn.Conv1d's
    do: with TF32 either one's gradients are 1e-2 to 7e-2 away from float64 on this case.)"""
    torch.manual_seed(0)
    m = CharCNN(dropout=0.0, backend="triton").cuda()
    ref = CharCNN(dropout=0.0).cuda()
    ref.load_state_dict(m.state_dict())
    ref64 = CharCNN(dropout=0.0).cuda().double()
    ref64.load_state_dict(m.state_dict())
    x = _random_indices(16, LENGTH, device="cuda")
    y = torch.randint(0, 4, (16,), device="cuda")
    with cudnn_tf32(False):
        functional.cross_entropy(m(x), y).backward()
    functional.cross_entropy(ref64(x), y).backward()
    for (name, p), q in zip(m.named_parameters(), ref64.parameters()):
        assert_close(p.grad, q.grad, torch.float32, tf32=True, name=name, scale=10)
    torch._dynamo.reset()
    ref.backend = "compile"
    with torch.no_grad():
        assert_close(ref.eval()(x), m.eval().forward_eager(x).double(), torch.float32, tf32=True)


@pytest.mark.gpu
def test_gpu_training_step_and_compile(isolated):
    isolated("tests.test_char_cnn:gpu_training_step_and_compile")


def gpu_triton_model_under_compile() -> None:
    """The triton model under torch.compile: a training step's gradients and the eval logits equal the
    uncompiled triton model's (its ops are registered torch ops, traced with their kernels)."""
    torch.manual_seed(0)
    m = CharCNN(dropout=0.0, backend="triton").cuda()
    x = _random_indices(16, LENGTH, device="cuda")
    y = torch.randint(0, 4, (16,), device="cuda")
    torch._dynamo.reset()
    compiled = torch.compile(m)
    grads = []
    for fn in (m, compiled):
        m.zero_grad(set_to_none=True)
        functional.cross_entropy(fn(x), y).backward()
        grads.append([p.grad.clone() for p in m.parameters()])
    for (name, _), eager, comp in zip(m.named_parameters(), *grads):
        assert_close(comp, eager.double(), torch.float32, tf32=True, name=name, scale=10)
    m.eval()
    with torch.no_grad():
        assert_close(compiled(x), m(x).double(), torch.float32, tf32=True)


@pytest.mark.gpu
def test_gpu_triton_model_under_compile(isolated):
    isolated("tests.test_char_cnn:gpu_triton_model_under_compile")
