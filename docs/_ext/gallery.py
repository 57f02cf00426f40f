"""Draw the gallery's figures at build time, from real images and the public API only.

The images are scikit-learn's two bundled sample photos (``load_sample_images()``: a temple in
China and a flower) and, where Debian's ``dataset-fashion-mnist`` is installed, Fashion-MNIST
test images (the demo's data): nothing is downloaded and nothing is drawn by hand. Every
figure uses fixed seeds and matplotlib's Agg backend, so two builds draw the same pictures.

The library calls behind each figure are the ``example_*`` functions below, and nothing else:
``docs/gallery/index.md`` shows each one beside its figure (``literalinclude`` with
``:pyobject:``), so the code on the page is the code that drew the picture. The rest of this
file only lays the results out. The PNG files, and a small thumbnail for each augmentation's
method card, go to ``docs/gallery/_generated/`` (git-ignored).

Run alone: ``python docs/_ext/gallery.py OUT_DIR``.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import torch
from PIL import Image

OUT_NAME = "_generated"


# ---------------------------------------------------------------------------------------------
# The examples: the library calls behind the figures, shown on the gallery page as they are.
# ---------------------------------------------------------------------------------------------


def example_augmix(img: Image.Image, severity: float, seed: int) -> Image.Image:
    """AugMix on one PIL image, as a ``torchvision.transforms.Compose`` step would call it."""
    import augment

    transform = augment.AugMix(severity=severity, rng=random.Random(seed))
    return transform(img)


def example_randaugment(img: Image.Image, severity: float, seed: int) -> Image.Image:
    """RandAugment on one PIL image: ``depth`` operations, each at level ``severity``."""
    import augment

    transform = augment.RandAugment(severity=severity, depth=2, rng=random.Random(seed))
    return transform(img)


def example_primitive(img: Image.Image, name: str, level: float, seed: int) -> Image.Image:
    """One operation of ``augment.augmentation_sets['all']`` at ``level`` (0 to 10).

    ``rng`` draws the direction of the operations that have one (rotate left or right, ...).
    """
    import augment

    operation = getattr(augment, name)  # augment.rotate, augment.solarize, ...
    return operation(img, level, rng=random.Random(seed))


def example_batched(batch: torch.Tensor) -> dict[str, torch.Tensor]:
    """A uint8 batch (N, C, H, W) through the batched transforms: one chain per sample."""
    import augment

    augmix = augment.BatchAugMix(severity=3, generator=torch.Generator().manual_seed(0))
    randaugment = augment.BatchRandAugment(severity=9, generator=torch.Generator().manual_seed(0))
    return {"BatchAugMix": augmix(batch), "BatchRandAugment": randaugment(batch)}


def example_batch_ops(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """MixUp, CutMix, Cutout, ColOut and blur on a float batch (N, C, H, W), labels 0..N-1."""
    import functional as F

    g = torch.Generator().manual_seed(0)
    y = torch.arange(len(x))
    perm = torch.roll(torch.arange(len(x)), -1)  # sample i is mixed with sample i + 1
    blurred = x
    for _ in range(4):
        blurred = F.blur_2d(blurred)
    return {
        "input": x,
        "mixup_batch, λ=0.3": F.mixup_batch(x, y, 0.3, n_classes=len(x), indices=perm)[0],
        "cutmix_batch": F.cutmix_batch(x, y, n_classes=len(x), indices=perm, generator=g)[0],
        "cutout, 2 holes of 0.3": F.cutout(x, 2, 0.3, per_sample=True, generator=g),
        "colout_batch (smaller)": F.colout_batch(x, 0.15, 0.15, generator=g),
        "blur_2d, 4 times": blurred,
        "blur_2d, stride 2": F.blur_2d(x, stride=2),
    }


def example_schedules(progress: float) -> dict[str, float]:
    """The schedules a loop reads at its progress in [0, 1] (defaults of each function)."""
    import functional as F

    return {
        "progressive_resizing_scale": F.progressive_resizing_scale(progress, 0.5, 0.2),
        "seq_length_warmup_length": F.seq_length_warmup_length(progress, 0.3, 8, 1024, 8),
        "stochastic_depth_drop_rate": F.stochastic_depth_drop_rate(progress, 0.2, 0.1),
    }


# ---------------------------------------------------------------------------------------------
# The images.
# ---------------------------------------------------------------------------------------------


def sample_photos(width: int = 240) -> list[Image.Image]:
    """scikit-learn's two sample photos (china.jpg, flower.jpg), scaled to ``width`` pixels."""
    from sklearn.datasets import load_sample_images

    photos = []
    for array in load_sample_images().images:
        img = Image.fromarray(np.asarray(array))
        height = round(img.height * width / img.width)
        photos.append(img.resize((width, height), Image.Resampling.BICUBIC))
    return photos


def fashion_samples(n: int = 8, size: int = 84) -> list[Image.Image]:
    """The first test image of each of ``n`` Fashion-MNIST classes, grey ('L'), ``size`` pixels.

    Empty when Debian's ``dataset-fashion-mnist`` is not installed (the page then says so).
    """
    from benchmarks._demo_data import DEFAULT_DIR, has_fashion_mnist, load_fashion_mnist

    if not has_fashion_mnist(DEFAULT_DIR):
        return []
    data = load_fashion_mnist(DEFAULT_DIR)
    images = []
    for label in range(n):
        first = int(torch.nonzero(data.y_test == label)[0])
        array = (data.x_test[first, 0] * 255).round().to(torch.uint8).numpy()
        images.append(
            Image.fromarray(array, mode="L").resize((size, size), Image.Resampling.NEAREST)
        )
    return images


def square_crops(photos: Sequence[Image.Image], size: int = 128) -> torch.Tensor:
    """A uint8 batch (4, 3, size, size): two square crops of each photo."""
    crops = []
    for img in photos:
        big = img.resize((img.width * 2 * size // img.height, 2 * size), Image.Resampling.BICUBIC)
        for left in (big.width // 5, big.width // 2):
            box = (left, size // 2, left + size, size // 2 + size)
            crops.append(torch.from_numpy(np.array(big.crop(box))).permute(2, 0, 1))
    return torch.stack(crops)


def as_batch(images: Sequence[Image.Image]) -> torch.Tensor:
    """PIL images of one size and mode as a uint8 batch (N, C, H, W)."""
    arrays = [np.array(img) for img in images]
    batch = torch.from_numpy(np.stack(arrays))
    return batch.unsqueeze(1) if batch.ndim == 3 else batch.permute(0, 3, 1, 2)


# ---------------------------------------------------------------------------------------------
# The layout.
# ---------------------------------------------------------------------------------------------


def _show(ax: Any, img: Image.Image | torch.Tensor, title: str = "") -> None:
    if isinstance(img, torch.Tensor):
        img = img.detach().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).squeeze(-1).numpy()
    grey = (isinstance(img, Image.Image) and img.mode == "L") or np.asarray(img).ndim == 2
    ax.imshow(img, cmap="gray" if grey else None, vmin=0, vmax=255)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    if title:
        ax.set_title(title, fontsize=9)


def _grid(rows: int, cols: int, cell: float = 1.9, ratio: float = 0.7) -> tuple[Any, Any]:
    fig, axes = plt.subplots(rows, cols, figsize=(cols * cell, rows * cell * ratio + 0.3))
    return fig, np.asarray(axes).reshape(rows, cols)


def _save(fig: Any, out: Path, name: str, dpi: int = 90) -> Path:
    path = out / name
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _thumbnail(out: Path, card: str, images: Sequence[Image.Image | torch.Tensor]) -> Path:
    """A strip of a few results for the top of a method card: ``thumb_<card>.png``."""
    fig, axes = _grid(1, len(images), cell=1.3, ratio=1.0)
    for ax, img in zip(axes[0], images, strict=True):
        _show(ax, img)
    return _save(fig, out, f"thumb_{card}.png", dpi=80)


def severity_figure(out: Path, images: Sequence[Image.Image], which: str) -> list[Path]:
    """AugMix or RandAugment at several severities, two draws per image; and its thumbnail."""
    example = example_augmix if which == "augmix" else example_randaugment
    severities = (1, 3, 6, 10) if which == "augmix" else (1, 5, 9, 10)
    draws = 2
    fig, axes = _grid(len(images) * draws, len(severities) + 1)
    for p, img in enumerate(images):
        for d in range(draws):
            row = axes[p * draws + d]
            _show(row[0], img, "original" if p == d == 0 else "")
            for j, s in enumerate(severities):
                title = f"severity {s}" if p == d == 0 else ""
                _show(row[j + 1], example(img, s, 10 * p + d), title)
    thumb = [images[0]] + [example(images[0], severities[1], seed) for seed in range(3)]
    return [_save(fig, out, f"{which}_severities.png"), _thumbnail(out, which, thumb)]


def _other_direction(name: str, img: Image.Image) -> int:
    """A seed whose random direction differs from seed 0's (0 for operations without one)."""
    first = np.asarray(example_primitive(img, name, 10, 0))
    for seed in range(1, 64):
        if not np.array_equal(first, np.asarray(example_primitive(img, name, 10, seed))):
            return seed
    return 0


def primitives_figure(out: Path, img: Image.Image) -> Path:
    """Operations without a direction at levels 0 to 10; the others from 10 one way to 10 the other."""
    import augment

    names = [operation.__name__ for operation in augment.augmentation_sets["all"]]
    levels = (0, 2.5, 5, 7.5, 10)
    fig, axes = _grid(len(names), len(levels), cell=1.6)
    for i, name in enumerate(names):
        other = _other_direction(name, img)
        if other == 0:
            cells = [(level, 0, f"level {level}") for level in levels]
        else:
            cells = [(10, 0, "10, one way"), (5, 0, "5"), (0, 0, "0")]
            cells += [(5, other, "5"), (10, other, "10, other way")]
        for j, (level, seed, title) in enumerate(cells):
            _show(axes[i, j], example_primitive(img, name, level, seed))
            axes[i, j].set_title(title, fontsize=8)
        axes[i, 0].set_ylabel(name, fontsize=9, rotation=0, ha="right", va="center")
    return _save(fig, out, "primitives.png")


def batched_figure(out: Path, photo: Image.Image) -> list[Path]:
    """One photo repeated 8 times through the batched transforms: 8 different draws."""
    x = as_batch([photo] * 8)
    results = example_batched(x)
    fig, axes = _grid(2 * len(results), 4, cell=2.2, ratio=0.75)
    for i, (label, y) in enumerate(results.items()):
        for j in range(8):
            _show(axes[2 * i + j // 4, j % 4], y[j], f"{label}, sample {j}")
    thumb = [results["BatchAugMix"][j] for j in range(2)]
    thumb += [results["BatchRandAugment"][j] for j in range(2)]
    return [_save(fig, out, "batched.png"), _thumbnail(out, "batched_augment", thumb)]


_OP_CARDS = {
    "mixup": "mixup_batch, λ=0.3",
    "cutmix": "cutmix_batch",
    "cutout": "cutout, 2 holes of 0.3",
    "colout": "colout_batch (smaller)",
}


def batch_ops_figure(out: Path, batch: torch.Tensor, name: str) -> list[Path]:
    """Every row of ``example_batch_ops`` on one batch; thumbnails of the four label ops."""
    rows = example_batch_ops(batch.float())
    n = len(batch)
    fig, axes = _grid(len(rows), n, cell=1.6, ratio=1.0)
    for i, (label, images) in enumerate(rows.items()):
        for j in range(n):
            _show(axes[i, j], images[j], f"sample {j}" if i == 0 else "")
        axes[i, 0].set_ylabel(label, fontsize=8)
    paths = [_save(fig, out, f"{name}.png")]
    if name == "batch_ops":
        paths += [_thumbnail(out, card, list(rows[row][:3])) for card, row in _OP_CARDS.items()]
    return paths


def _absent_figure(out: Path, name: str) -> Path:
    fig, ax = plt.subplots(figsize=(6, 1.2))
    ax.axis("off")
    ax.text(
        0.5,
        0.5,
        "Fashion-MNIST is not installed on the machine that built this page:\n"
        "apt-get install dataset-fashion-mnist",
        ha="center",
        va="center",
        fontsize=10,
    )
    return _save(fig, out, f"{name}.png")


def fashion_figure(out: Path, images: Sequence[Image.Image]) -> list[Path]:
    """Fashion-MNIST: AugMix and RandAugment on grey images, and the batch ops on eight of them."""
    if not images:  # the page still builds: each figure says what is missing and how to add it
        return [_absent_figure(out, name) for name in ("fashion_augment", "fashion_batch_ops")]
    rows = {
        "original": list(images),
        "AugMix, severity 3": [example_augmix(img, 3, k) for k, img in enumerate(images)],
        "RandAugment, severity 9": [example_randaugment(img, 9, k) for k, img in enumerate(images)],
    }
    fig, axes = _grid(len(rows), len(images), cell=1.3, ratio=1.0)
    for i, (label, row) in enumerate(rows.items()):
        for j, img in enumerate(row):
            _show(axes[i, j], img)
        axes[i, 0].set_ylabel(label, fontsize=8)
    ops = batch_ops_figure(out, as_batch(images[:4]), "fashion_batch_ops")
    return [_save(fig, out, "fashion_augment.png"), *ops]


def schedules_figure(out: Path) -> Path:
    """The schedules of ``example_schedules`` against progress, and EMA weights against age."""
    import functional as F

    progress = np.linspace(0.0, 1.0, 401)
    curves = [example_schedules(float(p)) for p in progress]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    labels = {
        "progressive_resizing_scale": "scale",
        "seq_length_warmup_length": "sequence length",
        "stochastic_depth_drop_rate": "drop rate",
    }
    for ax, (name, ylabel) in zip(axes.flat, labels.items(), strict=False):
        ax.plot(progress, [curve[name] for curve in curves])
        ax.set(title=name, xlabel="training progress", ylabel=ylabel)
    ax = axes[1, 1]
    age = np.arange(0, 601)
    for half_life in (25, 100, 250):
        s = F.ema_smoothing(half_life)
        ax.plot(age, (1 - s) * s**age, label=f"half_life={half_life} (smoothing {s:.4f})")
    ax.set(
        title="compute_ema with ema_smoothing(half_life)",
        xlabel="age of an update (steps)",
        ylabel="weight in the average",
    )
    ax.legend(fontsize=8)
    return _save(fig, out, "schedules.png")


def generate(out: Path) -> list[Path]:
    """Draw every figure and thumbnail into ``out``; returns the files written."""
    torch.manual_seed(0)  # nothing should use it: every draw below has its own seed
    out.mkdir(parents=True, exist_ok=True)
    photos = sample_photos()
    fashion = fashion_samples()
    return [
        *severity_figure(out, photos + fashion[:1], "augmix"),
        *severity_figure(out, photos + fashion[:1], "randaugment"),
        primitives_figure(out, photos[1].resize((180, 120))),
        *batched_figure(out, photos[0].resize((144, 96))),
        *batch_ops_figure(out, square_crops(photos), "batch_ops"),
        *fashion_figure(out, fashion),
        schedules_figure(out),
    ]


def _on_builder_inited(app: Any) -> None:
    from sphinx.util import logging

    start = time.perf_counter()
    files = generate(Path(app.srcdir) / "gallery" / OUT_NAME)
    logging.getLogger(__name__).info(
        f"gallery: {len(files)} figures in {time.perf_counter() - start:.1f} s"
    )


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _on_builder_inited)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
    for path in generate(Path(sys.argv[1])):
        print(path)
