"""The demo's data: Fashion-MNIST from IDX files, installed from Debian when it can be.

Fashion-MNIST (Xiao et al., 2017) is 70,000 28x28 greyscale photographs of clothing in 10
classes, 60,000 for training and 10,000 for testing. Debian ships it as the package
``dataset-fashion-mnist`` (IDX files, gzipped, under ``/usr/share/datasets/fashion-mnist/``).
Nothing is downloaded at run time: where the files are missing, :func:`ensure_fashion_mnist`
installs the package with ``apt-get`` when the process may (root, ``apt-get`` on the path), and
otherwise says the one command to run; :func:`load_data` then falls back to scikit-learn's
bundled digits, saying so.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as TF

DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")
PACKAGE = "dataset-fashion-mnist"
INSTALL_COMMAND = f"sudo apt-get install -y {PACKAGE}"
FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
VALIDATION_SEED = 1234  # fixes which training images are held out for validation
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


@dataclass
class Dataset:
    """Training, validation and test tensors: images float32 in [0, 1], (N, 1, H, W); labels
    int64. The validation images are held out of the training set (:meth:`hold_out`)."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    note: str = ""
    x_val: torch.Tensor = field(default_factory=lambda: torch.empty(0, 1, 28, 28))
    y_val: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))

    def hold_out(self, n_val: int, seed: int = VALIDATION_SEED) -> Dataset:
        """Move ``n_val`` training images, drawn by ``seed``, into the validation split.

        The draw depends only on ``seed`` and the training set, so the split is the same in
        every run, mode and size: every choice (ablation, recipe, hyperparameters) is made on
        these images, and the test set is read only by the final runs.
        """
        if not 0 < n_val < len(self.y_train):
            raise ValueError(f"n_val must be in (0, {len(self.y_train)}), got {n_val}")
        order = torch.randperm(len(self.y_train), generator=torch.Generator().manual_seed(seed))
        val, train = order[:n_val], order[n_val:].sort().values
        return replace(
            self,
            x_train=self.x_train[train],
            y_train=self.y_train[train],
            x_val=self.x_train[val],
            y_val=self.y_train[val],
        )

    def subset(self, n_train: int | None, n_test: int | None) -> Dataset:
        """The first ``n_train`` training and ``n_test`` test images (all when ``None``); the
        validation split is kept whole."""
        return replace(
            self,
            x_train=self.x_train[:n_train],
            y_train=self.y_train[:n_train],
            x_test=self.x_test[:n_test],
            y_test=self.y_test[:n_test],
        )

    def describe(self) -> str:
        h, w = self.x_train.shape[-2:]
        return (
            f"{self.name}: {len(self.y_train):,} training / {len(self.y_val):,} validation "
            f"(held out of the training set) / {len(self.y_test):,} test images, {h}x{w}"
        )


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (the MNIST format, gzipped when the name ends in ``.gz``) as an array.

    The header is two zero bytes, a type code, the number of dimensions ``d``, then ``d``
    big-endian 32-bit sizes; the data follow in C order.
    """
    raw = (gzip.open if path.suffix == ".gz" else open)(path, "rb").read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ValueError(f"{path} is not an IDX file (header {raw[:4]!r})")
    ndim = raw[3]
    shape = tuple(int(s) for s in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    count = int(np.prod(shape))
    offset = 4 + 4 * ndim
    if len(raw) != offset + count * dtype.itemsize:
        raise ValueError(f"{path}: {len(raw) - offset} data bytes for shape {shape} of {dtype}")
    return np.frombuffer(raw, dtype, count=count, offset=offset).reshape(shape)


def _find(directory: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def has_fashion_mnist(directory: Path) -> bool:
    return all(_find(directory, stem) is not None for stem in FILES.values())


def load_fashion_mnist(directory: Path) -> Dataset:
    """The four IDX files in ``directory`` (plain or ``.gz``) as a :class:`Dataset`."""
    arrays = {}
    for key, stem in FILES.items():
        path = _find(directory, stem)
        if path is None:
            raise FileNotFoundError(f"{directory} has no {stem} or {stem}.gz")
        arrays[key] = torch.from_numpy(read_idx(path).copy())
    for part in ("train", "test"):
        x, y = arrays[f"x_{part}"], arrays[f"y_{part}"]
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise ValueError(
                f"{directory}: {part} images {tuple(x.shape)}, labels {tuple(y.shape)}"
            )
    return Dataset(
        "Fashion-MNIST",
        arrays["x_train"].unsqueeze(1).float() / 255,
        arrays["y_train"].long(),
        arrays["x_test"].unsqueeze(1).float() / 255,
        arrays["y_test"].long(),
    )


def load_digits(size: int = 28, seed: int = 0) -> Dataset:
    """scikit-learn's 1,797 bundled 8x8 digits, upsampled to ``size``, split 50/50."""
    from sklearn.datasets import load_digits as sk_digits

    digits = sk_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = TF.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
    labels = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    test, train = order[: len(order) // 2], order[len(order) // 2 :]
    return Dataset("scikit-learn digits", images[train], labels[train], images[test], labels[test])


def _can_install() -> bool:
    geteuid = getattr(os, "geteuid", None)
    return geteuid is not None and geteuid() == 0 and shutil.which("apt-get") is not None


def _apt(*args: str) -> bool:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        done = subprocess.run(["apt-get", *args], env=env, capture_output=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def ensure_package(package: str, present: Callable[[], bool], what: str, *, install: bool) -> str:
    """Install the Debian ``package`` when ``present()`` is false and the process may (root,
    ``apt-get`` on the path); what happened, one sentence ("" when it was there).
    ``apt-get update`` runs only when a first install attempt fails."""
    command = f"sudo apt-get install -y {package}"
    if present():
        return ""
    if not install or not _can_install():
        return f"{what} is not installed; to use it, run: {command}"
    print(f"{what} is missing: apt-get install -y {package} ...", flush=True)
    if not _apt("install", "-y", package) and not (
        _apt("update") and _apt("install", "-y", package)
    ):
        return f"apt-get could not install {package}; to use it, run: {command}"
    if not present():
        return f"{package} is installed but {what} is still missing."
    return f"installed {package} with apt-get."


def ensure_fashion_mnist(directory: Path = DEFAULT_DIR, *, install: bool = True) -> str:
    """Make the Debian package's files present when they are missing and that is possible.

    Returns what happened, one sentence for the demo's output ("" when the files were there).
    Only the package's own directory is ever installed into.
    """
    if directory != DEFAULT_DIR and not has_fashion_mnist(directory):
        return f"{directory} holds no Fashion-MNIST IDX files."
    return ensure_package(
        PACKAGE, lambda: has_fashion_mnist(directory), "Fashion-MNIST", install=install
    )


def load_data(directory: Path = DEFAULT_DIR, *, install: bool = True) -> Dataset:
    """Fashion-MNIST from ``directory``, installed first if needed; else the bundled digits."""
    message = ensure_fashion_mnist(directory, install=install)
    if has_fashion_mnist(directory):
        data = load_fashion_mnist(directory)
        data.note = message
        return data
    data = load_digits()
    data.note = (
        f"{message} Falling back to scikit-learn's bundled digits (1,797 8x8 images, "
        "upsampled): a far smaller task, so its numbers say little about real training."
    )
    return data
