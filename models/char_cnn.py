"""The small character-level CNN of Zhang, Zhao & LeCun (2015) for AG News, as the seed study ran it
(with a LayerNorm after the first and the sixth convolution), and its text encoder.

Encoder (the paper's quantisation): the text is lower-cased; each character of the 70-character alphabet
below becomes its index, any other character (the space included) the index PAD = 70, an all-zero
one-hot column. Quantisation is reversed: position j holds the (j+1)-th character from the end, so the
latest characters sit at the start; the first ``length`` (1014) such characters are kept, the rest of a
short text is PAD. AG News writes a newline as the two characters backslash-n; the encoder turns them
back into the newline of the alphabet. The alphabet is the paper's list, 70 entries, in which "-"
appears twice: "-" maps to its first position, so one-hot row 59 is always zero (as in the paper's
70-row input).

Network (length 1014, channels 256, fc 1024, 4 classes):
    conv1 70->256 k7 -> LayerNorm([256, 1008]) -> ReLU -> MaxPool1d(3)      -> (256, 336)
    conv2 256->256 k7 -> ReLU -> MaxPool1d(3)                                -> (256, 110)
    conv3, conv4, conv5 256->256 k3 -> ReLU                                  -> (256, 104)
    conv6 256->256 k3 -> LayerNorm([256, 102]) -> ReLU -> MaxPool1d(3)      -> (256, 34)
    flatten 8704 -> fc1 1024 -> ReLU -> Dropout(0.5) -> fc2 1024 -> ReLU -> Dropout(0.5) -> fc3 4
Initialisation as the paper's small model: every conv / linear weight and bias drawn from N(0, 0.05^2)
(LayerNorm, not in the paper: weight 1, bias 0).

Backends switch only the forward; the parameters are the same torch.nn modules, so the state_dict is
identical across backends:
    eager          torch.nn ops on the channels-first one-hot (B, 70, L) (built from indices if given)
    compile        torch.compile(the eager forward, dynamic=False)
    triton         fused Triton inference on channels-last activations, from uint8 indices:
                   block 1 = LayerNorm statistics from the weight's moment tables (no gather) + one
                   gather/LayerNorm/ReLU/MaxPool pass (the (B, 1008, 256) conv output never reaches memory);
                   conv2 + ReLU, then MaxPool; conv3-5 with bias+ReLU epilogues; conv6, then
                   LayerNorm/ReLU/MaxPool written channels-first; the three linears through the fused GEMM
                   (bias+ReLU epilogue)
    triton-per-op  one Triton kernel per op of the paper: the gather conv1 (stored), LayerNorm->ReLU->
                   MaxPool, conv (+bias+ReLU), MaxPool, ... (no cross-op fusion beyond the epilogues)
With a gradient needed (training) both Triton backends run the differentiable ops: conv1d_gather and
conv1d (Triton forward and backward), Triton LayerNorm and linear, torch's relu / max_pool1d / dropout.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.nn import functional
from torch import nn

ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-,;.!?:'\"/\\|_@#$%^&*~`+-=<>()[]{}\n"
ALPHABET_SIZE = len(ALPHABET)  # 70
PAD = ALPHABET_SIZE            # index of "no character"
LENGTH = 1014
BACKENDS = ("eager", "compile", "triton", "triton-per-op")
POOL = 3

_LUT = np.full(128, PAD, dtype=np.uint8)
for _i, _ch in reversed(list(enumerate(ALPHABET))):  # a repeated character keeps its first index
    _LUT[ord(_ch)] = _i


def encode(texts: Sequence[str], length: int = LENGTH) -> torch.Tensor:
    """(N, length) uint8 character indices of ``texts`` (see the module docstring)."""
    if length < 1:
        raise ValueError(f"length must be positive, got {length}")
    out = np.full((len(texts), length), PAD, dtype=np.uint8)
    for row, text in enumerate(texts):
        s = text.replace("\\n", "\n").lower()[::-1][:length]
        codes = np.frombuffer(s.encode("utf-32-le"), dtype=np.uint32)
        out[row, :len(codes)] = np.where(codes < 128, _LUT[np.minimum(codes, 127)], PAD)
    return torch.from_numpy(out)


def one_hot(indices: torch.Tensor, dtype: torch.dtype = torch.float32, alphabet_size: int = ALPHABET_SIZE
            ) -> torch.Tensor:
    """The paper's input: (N, alphabet_size, L) with a 1 at [n, indices[n, l], l] (none for PAD)."""
    rows = torch.arange(alphabet_size, device=indices.device)
    return (indices.long()[:, None, :] == rows[None, :, None]).to(dtype)


def layer_lengths(length: int) -> dict[str, int]:
    """Sequence length after each stage for an input of ``length`` characters."""
    n = {"conv1": length - 6}
    n["pool1"] = n["conv1"] // POOL
    n["conv2"] = n["pool1"] - 6
    n["pool2"] = n["conv2"] // POOL
    n["conv3"] = n["pool2"] - 2
    n["conv4"] = n["conv3"] - 2
    n["conv5"] = n["conv4"] - 2
    n["conv6"] = n["conv5"] - 2
    n["pool6"] = n["conv6"] // POOL
    return n


class CharCNN(nn.Module):
    """The small Char-CNN (see the module docstring). Input: (B, length) character indices (uint8 /
    int), or for the eager / compile backends the one-hot (B, alphabet_size, length). Output: logits
    (B, num_classes) in the parameters' dtype.

    The smaller ``length`` / ``channels`` / ``fc`` exist for tests (the interpreter); length >= 123 keeps
    every stage non-empty.
    """

    def __init__(self, num_classes: int = 4, length: int = LENGTH, alphabet_size: int = ALPHABET_SIZE,
                 channels: int = 256, fc: int = 1024, dropout: float = 0.5, init_std: float = 0.05,
                 backend: str = "eager", eps: float = 1e-5) -> None:
        super().__init__()
        n = layer_lengths(length)
        if n["pool6"] < 1:
            raise ValueError(f"length {length} is too short for the network (the last pooled length would be "
                             f"{n['pool6']}); use length >= 123")
        self.length, self.alphabet_size, self.channels = length, alphabet_size, channels
        self.lengths = n
        self.conv1 = nn.Conv1d(alphabet_size, channels, 7)
        self.ln1 = nn.LayerNorm([channels, n["conv1"]], eps=eps)
        self.conv2 = nn.Conv1d(channels, channels, 7)
        self.conv3 = nn.Conv1d(channels, channels, 3)
        self.conv4 = nn.Conv1d(channels, channels, 3)
        self.conv5 = nn.Conv1d(channels, channels, 3)
        self.conv6 = nn.Conv1d(channels, channels, 3)
        self.ln6 = nn.LayerNorm([channels, n["conv6"]], eps=eps)
        self.fc1 = nn.Linear(channels * n["pool6"], fc)
        self.fc2 = nn.Linear(fc, fc)
        self.fc3 = nn.Linear(fc, num_classes)
        self.dropout = nn.Dropout(dropout)
        self.init_weights(init_std)
        self.backend = backend
        self._compiled = None
        self._packed_key = None
        self._packed: dict[str, Any] = {}

    # -- setup ----------------------------------------------------------------------------------------
    def init_weights(self, std: float = 0.05, generator: torch.Generator | None = None) -> None:
        """The paper's Gaussian initialisation of every conv / linear weight and bias (LayerNorm: 1, 0)."""
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (nn.Conv1d, nn.Linear)):
                    m.weight.normal_(0.0, std, generator=generator)
                    m.bias.normal_(0.0, std, generator=generator)
                elif isinstance(m, nn.LayerNorm):
                    m.weight.fill_(1.0)
                    m.bias.zero_()

    def init_he(self, generator: torch.Generator | None = None) -> None:
        """He (Kaiming) normal initialisation, std sqrt(2 / fan_in), of every conv / linear weight; biases
        zero (LayerNorm: 1, 0). Not the paper's; a training option (bench.char_cnn train --init he)."""
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (nn.Conv1d, nn.Linear)):
                    fan_in = m.weight[0].numel()
                    m.weight.normal_(0.0, (2.0 / fan_in) ** 0.5, generator=generator)
                    m.bias.zero_()
                elif isinstance(m, nn.LayerNorm):
                    m.weight.fill_(1.0)
                    m.bias.zero_()

    @property
    def backend(self) -> str:
        return self._backend

    @backend.setter
    def backend(self, value: str) -> None:
        if value not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {value!r}")
        self._backend = value

    def convs(self) -> list[nn.Conv1d]:
        return [self.conv1, self.conv2, self.conv3, self.conv4, self.conv5, self.conv6]

    # -- forward --------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.backend == "eager":
            return self.forward_eager(x)
        if self.backend == "compile":
            if self._compiled is None:
                self._compiled = torch.compile(self.forward_eager, dynamic=False)
            return self._compiled(x)
        if x.is_floating_point():
            raise ValueError(f"x must hold character indices (B, L) for the {self.backend} backend, got a "
                             f"{x.dtype} tensor of shape {tuple(x.shape)}")
        self._check_indices(x)
        if torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()):
            return self.forward_triton_train(x)
        h = x
        for _, block in self.blocks(self.backend):
            h = block(h)
        return h

    def _check_indices(self, x: torch.Tensor) -> None:
        if x.ndim != 2 or x.shape[1] != self.length:
            raise ValueError(f"x has shape {tuple(x.shape)}, expected (B, {self.length}) character indices")

    def forward_eager(self, x: torch.Tensor) -> torch.Tensor:
        """torch.nn on the channels-first one-hot; indices are one-hot encoded first."""
        if not x.is_floating_point():
            self._check_indices(x)
            x = one_hot(x, self.conv1.weight.dtype, self.alphabet_size)
        h = x
        for _, block in self.blocks("eager"):
            h = block(h)
        return h

    def blocks(self, mode: str) -> list[tuple[str, Callable[[torch.Tensor], torch.Tensor]]]:
        """The forward as named stages (the per-layer latency breakdown times each one on its own input):
        block1 .. block6 (conv with what follows it up to the next conv), fc1, fc2, fc3. mode: "eager"
        (channels-first), "triton" or "triton-per-op" (channels-last, inference; the stages read the
        packed parameters as they are when blocks() is called: call it again after an update)."""
        if mode == "eager":
            return self._eager_blocks()
        if mode in ("triton", "triton-per-op"):
            return self._triton_blocks(fused=mode == "triton")
        raise ValueError(f"mode must be eager, triton or triton-per-op, got {mode!r}")

    def _eager_blocks(self):
        def pool_relu(h):
            return functional.max_pool1d(functional.relu(h), POOL, POOL)

        def fc(layer, act):
            return lambda h: self.dropout(functional.relu(layer(h))) if act else layer(h)

        return [
            ("block1", lambda h: pool_relu(self.ln1(self.conv1(h)))),
            ("block2", lambda h: pool_relu(self.conv2(h))),
            ("block3", lambda h: functional.relu(self.conv3(h))),
            ("block4", lambda h: functional.relu(self.conv4(h))),
            ("block5", lambda h: functional.relu(self.conv5(h))),
            ("block6", lambda h: pool_relu(self.ln6(self.conv6(h))).flatten(1)),
            ("fc1", fc(self.fc1, True)), ("fc2", fc(self.fc2, True)), ("fc3", fc(self.fc3, False)),
        ]

    def _triton_blocks(self, fused: bool):
        from triton_kernels import conv1d
        from triton_kernels import conv1d_gather
        from triton_kernels.gemm import linear

        p = self.packed_parameters()  # once per blocks() call: the check walks every parameter
        bias = {i: m.bias for i, m in enumerate(self.convs(), 1)}
        eps1, eps6 = self.ln1.eps, self.ln6.eps

        def conv(i, act, pool=1):
            return lambda h: conv1d.conv1d(h, p[f"conv{i}"], bias[i], act, pool)

        if fused:
            block1 = lambda h: conv1d_gather.conv1d_gather_ln_relu_pool(
                h, p["conv1"], bias[1], p["ln1.weight"], p["ln1.bias"], eps1, POOL, moments=p["conv1.moments"])
        else:
            block1 = lambda h: conv1d_gather.layer_norm_relu_maxpool_cl(
                conv1d_gather.conv1d_gather(h, p["conv1"], bias[1]), p["ln1.weight"], p["ln1.bias"],
                eps1, POOL)
        # conv2 then MaxPool in both: conv2 with the pool in its epilogue measured slower on the H100
        # (0.389 against 0.349 ms at batch 512, results/NOTES.md)
        block2 = lambda h: conv1d.max_pool1d_cl(conv(2, "relu")(h), POOL)

        def block6(h):
            h = conv1d_gather.layer_norm_relu_maxpool_cl(conv(6, "none")(h), p["ln6.weight"],
                                                         p["ln6.bias"], eps6, POOL, channels_first=True)
            return h.reshape(h.shape[0], -1)  # channels-first, as torch flattens

        def fc(layer, act):
            return lambda h: linear(h, layer.weight, layer.bias, "relu" if act else "none")

        return [("block1", block1), ("block2", block2), ("block3", conv(3, "relu")), ("block4", conv(4, "relu")),
                ("block5", conv(5, "relu")), ("block6", block6), ("fc1", fc(self.fc1, True)),
                ("fc2", fc(self.fc2, True)), ("fc3", fc(self.fc3, False))]

    def packed_parameters(self) -> dict[str, Any]:
        """Inference copies of the conv weights laid out for conv1d's kernel at the precision its fp32 calls run
        (`conv1d.pack_weight`: (k, C_in, C_out) in memory, or (C_out, k, C_in) at tf32; the gather layer's
        always the first) and of the LayerNorm parameters laid out (L, C) (same shapes and values as the
        parameters), and the first layer's moment tables (its LayerNorm statistics), rebuilt when a parameter
        changes (its version counter or storage) or the precision does. The state_dict never holds them.
        While torch.compile traces, they are built in the graph (a few copies per call): a traced data pointer
        cannot be compared with the cached one."""
        from triton_kernels.runtime import torch_conv_precision

        precision = torch_conv_precision(self.conv2.weight)
        if torch.compiler.is_compiling():
            return self._pack(precision)
        params = [m.weight for m in self.convs()] + [self.conv1.bias, self.ln1.weight, self.ln1.bias, self.ln6.weight,
                                                     self.ln6.bias]
        key = tuple((t.data_ptr(), t._version, t.dtype) for t in params) + (precision,)
        if key != self._packed_key:
            self._packed, self._packed_key = self._pack(precision), key
        return self._packed

    def _pack(self, precision: str) -> dict[str, Any]:
        from triton_kernels.conv1d import pack_weight
        from triton_kernels.conv1d_gather import gather_moment_tables

        with torch.no_grad():
            packed = {f"conv{i + 1}": pack_weight(m.weight, precision if i else "ieee")
                      for i, m in enumerate(self.convs())}
            packed["conv1.moments"] = gather_moment_tables(self.conv1.weight, self.conv1.bias)
            for name in ("ln1", "ln6"):
                ln = getattr(self, name)
                packed[f"{name}.weight"] = ln.weight.t().contiguous().t()
                packed[f"{name}.bias"] = ln.bias.t().contiguous().t()
        return packed

    def forward_triton_train(self, x: torch.Tensor) -> torch.Tensor:
        """The differentiable Triton path (training): Triton conv / LayerNorm / linear forward and backward,
        torch relu, max_pool1d and dropout, channels-last activations."""
        from triton_kernels import conv1d
        from triton_kernels import conv1d_gather
        from triton_kernels.gemm import linear
        from triton_kernels.layernorm import layer_norm

        def pool(h):  # (B, L, C) -> (B, L // 3, C)
            return functional.max_pool1d(h.transpose(1, 2), POOL, POOL).transpose(1, 2)

        def ln(h, mod):  # LayerNorm([C, L]) of a channels-last h: normalise over (L, C) with transposed affine
            return layer_norm(h, tuple(h.shape[1:]), mod.weight.t(), mod.bias.t(), mod.eps)

        def conv(h, m, act):
            return conv1d.conv1d(h, conv1d.pack_weight(m.weight), m.bias, act)

        h = conv1d_gather.conv1d_gather(x, conv1d.pack_weight(self.conv1.weight), self.conv1.bias)
        h = pool(functional.relu(ln(h, self.ln1)))
        h = pool(conv(h, self.conv2, "relu"))
        for m in (self.conv3, self.conv4, self.conv5):
            h = conv(h, m, "relu")
        h = pool(functional.relu(ln(conv(h, self.conv6, "none"), self.ln6)))
        h = h.transpose(1, 2).reshape(h.shape[0], -1)
        h = self.dropout(linear(h, self.fc1.weight, self.fc1.bias, "relu"))
        h = self.dropout(linear(h, self.fc2.weight, self.fc2.bias, "relu"))
        return linear(h, self.fc3.weight, self.fc3.bias)

    # -- counts ---------------------------------------------------------------------------------------
    def flops_per_input(self, first_layer: str = "gather") -> float:
        """Arithmetic per input: 2 * MACs of every conv and linear; the first conv as a gather counts its
        adds (k * C_out per position) or, with first_layer="dense", 2 * MACs of the one-hot conv. LayerNorm,
        ReLU and pooling (a few operations per activation) are left out."""
        total = sum(self.block_flops().values())
        if first_layer == "dense":
            total += 2 * self.lengths["conv1"] * self.channels * self.alphabet_size * 7 - self.block_flops()["block1"]
        return float(total)

    def block_flops(self) -> dict[str, float]:
        """flops_per_input split over the stages of :meth:`blocks` (block 1 with the gather count)."""
        n, c = self.lengths, self.channels
        out = {"block1": float(n["conv1"] * c * 7), "block2": 2.0 * n["conv2"] * c * c * 7}
        for i in (3, 4, 5, 6):
            out[f"block{i}"] = 2.0 * n[f"conv{i}"] * c * c * 3
        for i, fc in enumerate((self.fc1, self.fc2, self.fc3), 1):
            out[f"fc{i}"] = 2.0 * fc.in_features * fc.out_features
        return out

    def activation_bytes_per_input(self, element_size: int = 2) -> float:
        """Bytes of every stage's output for one input (conv outputs, pooled outputs, fc outputs), the
        size of the activations a layer-by-layer forward writes once and reads once."""
        n = self.lengths
        elems = self.channels * sum(n[k] for k in ("conv1", "pool1", "conv2", "pool2", "conv3", "conv4", "conv5",
                                                   "conv6", "pool6"))
        elems += self.fc1.out_features + self.fc2.out_features + self.fc3.out_features
        return float(elems * element_size)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

