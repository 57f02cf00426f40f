"""AugMix and RandAugment in a real multi-worker DataLoader over PNG files on disk."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms as T

from augment import AugMix, RandAugment
from tests.augment._folder import LevelsDrawn, PngFolder

N_FILES = 8


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Eight copies of one non-square image: any difference in the outputs is randomness."""
    root = tmp_path_factory.mktemp("pngs")
    rs = np.random.default_rng(0)
    yy, xx = np.mgrid[0:27, 0:41]
    base = np.stack([xx * 6, yy * 9, (xx + yy) * 3], axis=-1) + rs.integers(0, 20, (27, 41, 3))
    img = Image.fromarray(base.clip(0, 255).astype(np.uint8))
    for i in range(N_FILES):
        img.save(root / f"{i:02d}.png")
    return root


def _run(
    folder: Path, transform, *, epochs: int = 1, compose: bool = True, **loader_kwargs
) -> list[list[bytes]]:
    pipeline = T.Compose([transform, T.PILToTensor()]) if compose else transform
    loader_kwargs.setdefault("multiprocessing_context", "fork")
    loader = DataLoader(PngFolder(folder, pipeline), batch_size=1, num_workers=2, **loader_kwargs)
    out = []
    for _ in range(epochs):
        batch_list = [batch[0] for batch in loader]
        assert all(b.shape == (3, 27, 41) and b.dtype == torch.uint8 for b in batch_list)
        out.append([b.numpy().tobytes() for b in batch_list])
    return out


TRANSFORMS = {
    "AugMix": lambda rng: AugMix(severity=5, rng=rng),
    "RandAugment": lambda rng: RandAugment(severity=9, depth=3, rng=rng),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_seeded_rng_distinct_per_worker_and_epoch_and_reproducible(folder, name) -> None:
    first = _run(folder, TRANSFORMS[name](random.Random(123)), epochs=2)
    # worker 0 loads items 0, 2, 4, ...; worker 1 items 1, 3, 5, ...: with one shared state they
    # would produce pairwise identical images
    assert len(set(first[0])) == N_FILES
    assert first[0] != first[1], "the next epoch's workers must not replay the first epoch"
    second = _run(folder, TRANSFORMS[name](random.Random(123)), epochs=2)
    assert second == first
    other = _run(folder, TRANSFORMS[name](random.Random(124)))
    assert other[0] != first[0]


@pytest.mark.parametrize("rng", [random.Random(1), np.random.default_rng(1), None])
def test_worker_streams_are_independent(rng) -> None:
    """Workers must not replay each other's draws, not even shifted by a few: the levels drawn
    in worker 0 (even items) and worker 1 (odd items) have no value in common."""
    data = LevelsDrawn(16, lambda ops: AugMix(severity=10, augmentation_set=ops, rng=rng))
    items = list(DataLoader(data, batch_size=None, num_workers=2, multiprocessing_context="fork"))
    drawn = [set(torch.cat(items[w::2]).tolist()) for w in (0, 1)]
    assert min(map(len, drawn)) >= 8 * 3  # at least one op per chain, three chains per item
    assert not drawn[0] & drawn[1]


def test_numpy_generator_is_reproducible_in_workers(folder) -> None:
    a = _run(folder, AugMix(rng=np.random.default_rng(5)))
    b = _run(folder, AugMix(rng=np.random.default_rng(5)))
    assert a == b and len(set(a[0])) == N_FILES


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_default_rng_distinct_per_worker_and_follows_torch_seed(folder, name) -> None:
    torch.manual_seed(0)
    first = _run(folder, TRANSFORMS[name](None), epochs=2)
    assert len(set(first[0])) == N_FILES
    assert first[0] != first[1]
    torch.manual_seed(0)
    assert _run(folder, TRANSFORMS[name](None), epochs=2) == first


@pytest.mark.slow
def test_spawned_workers_unpickle_distinct_reproducible_streams(folder) -> None:
    """Spawned workers unpickle the parent's unchanged state every epoch; the worker id and
    torch's per-epoch worker seed keep workers and epochs apart, reproducibly under a torch seed."""
    # no torchvision in the pickled pipeline: each spawned worker imports only torch and augment
    kwargs = {"multiprocessing_context": "spawn", "compose": False}
    torch.manual_seed(0)
    first = _run(folder, AugMix(rng=random.Random(7)), epochs=2, **kwargs)
    assert len(set(first[0])) == N_FILES and first[0] != first[1]
    torch.manual_seed(0)
    assert _run(folder, AugMix(rng=random.Random(7)), **kwargs) == first[:1]


def test_main_process_stream_is_the_users_rng(folder) -> None:
    """Outside workers, a seeded transform draws from the rng it was given (it advances)."""
    rng = random.Random(3)
    t = AugMix(rng=rng)
    img = Image.open(next(folder.glob("*.png"))).convert("RGB")
    state = rng.getstate()
    t(img)
    assert rng.getstate() != state
