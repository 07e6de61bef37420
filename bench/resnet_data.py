"""CIFAR-10 data for bench.resnet: the per-epoch plan, a GPU-resident path and a DataLoader path.

The plan of epoch e is a pure function of (seed, e): a permutation of the training set and, per image
(indexed by its row, not its position in a batch), a random crop offset (pad 4, crop 32: 0..8 in x and
y) and a horizontal flip. Step s of the epoch trains on the global batch perm[s*B : (s+1)*B] (the last
partial batch is dropped); rank r of a DDP run takes rows [r*b, (r+1)*b) of it, b = B / world. So a
run resumed at (epoch, step) sees exactly the batches and augmentations of an uninterrupted run, and
two ranks together see exactly what one process sees with the global batch.

GpuLoader       every training image stays on the device as uint8 (zero-padded to 40x40 once); a batch
                is one gather (crop + flip folded into the index) and one normalisation kernel.
make_cpu_loader a torch DataLoader whose workers build each batch image by image in numpy (pad, crop,
                flip, scale, normalise), as a torchvision transform pipeline would; ``workers`` is the
                knob the worker sweep turns.
"""
from __future__ import annotations

import dataclasses
from typing import Iterator, Optional

import numpy as np
import torch

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
PAD = 4


@dataclasses.dataclass
class Data:
    """uint8 images (N, 3, 32, 32), int64 labels; ``name`` is "cifar10" or "synthetic" (goes into rows)."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    name: str
    source: str = ""


def load(data: Optional[str] = None, synthetic: bool = False, train_limit: Optional[int] = None,
         test_limit: Optional[int] = None) -> Data:
    """Real CIFAR-10 (bench.data.cifar10: python / binary batches or the WebP shards; ``data`` = a
    directory or None for the default search) or random images of the same shapes (``synthetic``).
    The rows of the WebP shards are sorted by class, so both splits are put in a fixed random order
    (seed 0, the same for every run) before any limit is applied."""
    from bench.data import cifar10

    if synthetic:
        train, test = cifar10.synthetic(train_limit or 50000, seed=1), cifar10.synthetic(test_limit or 10000, seed=2)
        return Data(train.images, train.labels, test.images, test.labels, "synthetic", "random uint8 images")
    ds = cifar10.load(data, layout="NCHW")
    rng = np.random.default_rng(0)
    out = []
    for split, limit in ((ds.train, train_limit), (ds.test, test_limit)):
        order = rng.permutation(len(split))[: limit or len(split)]
        out += [np.ascontiguousarray(split.images[order]), split.labels[order].astype(np.int64)]
    return Data(*out, name="cifar10", source=f"{ds.format} files in {ds.path}")


# --------------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class EpochPlan:
    perm: torch.Tensor     # (N,) int64: the epoch's order
    crops: torch.Tensor    # (N, 2) int64 in 0..2*PAD: (y, x) offsets into the padded image, by row
    flips: torch.Tensor    # (N,) bool, by row


def epoch_plan(n: int, seed: int, epoch: int, augment: bool = True) -> EpochPlan:
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n, generator=g)
    if augment:
        crops = torch.randint(0, 2 * PAD + 1, (n, 2), generator=g)
        flips = torch.randint(0, 2, (n,), generator=g).bool()
    else:
        crops, flips = torch.full((n, 2), PAD, dtype=torch.int64), torch.zeros(n, dtype=torch.bool)
    return EpochPlan(perm, crops, flips)


def steps_per_epoch(n: int, global_batch: int) -> int:
    return n // global_batch


def batch_rows(plan: EpochPlan, step: int, global_batch: int, rank: int, world: int) -> torch.Tensor:
    """The dataset rows of this rank's part of global batch ``step``."""
    local = global_batch // world
    start = step * global_batch + rank * local
    return plan.perm[start:start + local]


# --------------------------------------------------------------------------------------------------
# GPU-resident path
# --------------------------------------------------------------------------------------------------
def mean_std(device) -> tuple[torch.Tensor, torch.Tensor]:
    """The normalisation constants on ``device``, scaled to uint8 pixel values, (1, 3, 1, 1) each."""
    return (torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255,
            torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255)


def normalise(images_u8: torch.Tensor, channels_last: bool = True, constants=None) -> torch.Tensor:
    """uint8 (B, 3, H, W) -> float32 (x / 255 - mean) / std, channels_last when asked. ``constants``:
    :func:`mean_std` made once (building them per batch would copy from the host every step)."""
    mean, std = constants if constants is not None else mean_std(images_u8.device)
    x = (images_u8.float() - mean) / std
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


class GpuLoader:
    """Every training image on ``device`` (uint8, zero-padded to 40x40); batches built on the device."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, global_batch: int, seed: int, device,
                 rank: int = 0, world: int = 1, augment: bool = True, channels_last: bool = True) -> None:
        if global_batch % world:
            raise ValueError(f"--batch-size {global_batch} is not a multiple of the {world} processes")
        self.n, self.global_batch, self.seed = len(images), global_batch, seed
        self.rank, self.world, self.augment, self.channels_last = rank, world, augment, channels_last
        self.device = torch.device(device)
        padded = np.zeros((len(images), 3, 32 + 2 * PAD, 32 + 2 * PAD), dtype=np.uint8)
        padded[:, :, PAD:PAD + 32, PAD:PAD + 32] = images
        self.padded = torch.from_numpy(padded).to(self.device)
        self.labels = torch.from_numpy(np.asarray(labels, dtype=np.int64)).to(self.device)
        side = 32 + 2 * PAD
        ar = torch.arange(32, device=self.device)
        self._channel = (torch.arange(3, device=self.device) * side * side).view(1, 3, 1, 1)
        self._ar, self._rev, self._side = ar, 31 - ar, side
        self._constants = mean_std(self.device)
        self.steps = steps_per_epoch(self.n, global_batch)
        self._plan_epoch, self._plan = None, None

    def plan(self, epoch: int) -> EpochPlan:
        if self._plan_epoch != epoch:
            p = epoch_plan(self.n, self.seed, epoch, self.augment)
            self._plan = EpochPlan(p.perm.to(self.device), p.crops.to(self.device), p.flips.to(self.device))
            self._plan_epoch = epoch
        return self._plan

    def batch(self, epoch: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(x float32 normalised, y) of this rank's part of global batch ``step`` of ``epoch``."""
        plan = self.plan(epoch)
        rows = batch_rows(plan, step, self.global_batch, self.rank, self.world)
        crops, flips = plan.crops[rows], plan.flips[rows]
        ys = (crops[:, 0:1] + self._ar).view(-1, 1, 32, 1)
        xs = (crops[:, 1:2] + torch.where(flips[:, None], self._rev, self._ar)).view(-1, 1, 1, 32)
        index = rows.view(-1, 1, 1, 1) * (3 * self._side * self._side) + self._channel + ys * self._side + xs
        images = self.padded.view(-1)[index.view(-1)].view(-1, 3, 32, 32)
        return normalise(images, self.channels_last, self._constants), self.labels[rows]

    def epoch(self, epoch: int, start_step: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for step in range(start_step, self.steps):
            yield self.batch(epoch, step)


# --------------------------------------------------------------------------------------------------
# DataLoader path (CPU workers)
# --------------------------------------------------------------------------------------------------
class PlannedBatch(list):
    """The dataset rows of one batch, with their crop offsets and flips (sent to a worker as the index)."""

    def __init__(self, rows, crops, flips) -> None:
        super().__init__(rows)
        self.crops, self.flips = crops, flips

    def __reduce__(self):
        return (PlannedBatch, (list(self), self.crops, self.flips))


class PlannedBatchSampler:
    """Yields this rank's PlannedBatch of every step of the current epoch from ``start_step`` on;
    ``set_epoch(epoch, start_step)`` before each pass (the DistributedSampler contract, resumable)."""

    def __init__(self, n: int, global_batch: int, seed: int, rank: int = 0, world: int = 1,
                 augment: bool = True) -> None:
        if global_batch % world:
            raise ValueError(f"--batch-size {global_batch} is not a multiple of the {world} processes")
        self.n, self.global_batch, self.seed, self.rank, self.world = n, global_batch, seed, rank, world
        self.augment = augment
        self.steps = steps_per_epoch(n, global_batch)
        self.epoch_index, self.start_step = 0, 0

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        self.epoch_index, self.start_step = epoch, start_step

    def __len__(self) -> int:
        return self.steps - self.start_step

    def __iter__(self):
        plan = epoch_plan(self.n, self.seed, self.epoch_index, self.augment)
        for step in range(self.start_step, self.steps):
            rows = batch_rows(plan, step, self.global_batch, self.rank, self.world)
            yield PlannedBatch(rows.tolist(), plan.crops[rows].numpy(), plan.flips[rows].numpy())


class AugmentedImages(torch.utils.data.Dataset):
    """uint8 images; ``__getitems__(PlannedBatch)`` -> (x float32 (B, 3, 32, 32) normalised, y int64),
    built image by image: pad, crop, flip, scale, normalise."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        self.images, self.labels = images, np.asarray(labels, dtype=np.int64)
        self.mean = np.asarray(MEAN, np.float32).reshape(3, 1, 1)
        self.std = np.asarray(STD, np.float32).reshape(3, 1, 1)

    def __len__(self) -> int:
        return len(self.images)

    def __getitems__(self, batch: PlannedBatch):
        out = np.empty((len(batch), 3, 32, 32), dtype=np.float32)
        for j, row in enumerate(batch):
            img = np.pad(self.images[row], ((0, 0), (PAD, PAD), (PAD, PAD)))
            y0, x0 = batch.crops[j]
            img = img[:, y0:y0 + 32, x0:x0 + 32]
            if batch.flips[j]:
                img = img[:, :, ::-1]
            out[j] = (img.astype(np.float32) / 255.0 - self.mean) / self.std
        return torch.from_numpy(out), torch.from_numpy(self.labels[list(batch)])


def _as_is(batch):
    return batch


def make_cpu_loader(images: np.ndarray, labels: np.ndarray, sampler: PlannedBatchSampler, workers: int,
                    pin_memory: bool) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(AugmentedImages(images, labels), batch_sampler=sampler, num_workers=workers,
                                       collate_fn=_as_is, pin_memory=pin_memory, persistent_workers=workers > 0,
                                       prefetch_factor=4 if workers > 0 else None)


def test_tensors(data: Data, device, rank: int = 0, world: int = 1, channels_last: bool = True):
    """This rank's shard (every world-th row) of the test set on ``device``: (x normalised, y)."""
    images = torch.from_numpy(data.test_images[rank::world]).to(device)
    return normalise(images, channels_last), torch.from_numpy(data.test_labels[rank::world]).to(device)
