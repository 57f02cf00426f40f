"""The language-model study's text: the Python documentation's reStructuredText sources, as bytes.

Debian's ``python3.11-doc`` ships the sources of the Python 3.11 documentation under
``/usr/share/doc/python3.11/html/_sources/`` (about 500 files, 11 MB of English prose and code).
Nothing is downloaded at run time: where they are missing, :func:`ensure_python_doc` installs the
package with ``apt-get`` when the process may (root, ``apt-get`` on the path), and otherwise says
the one command to run.

Tokens are bytes (a vocabulary of 256), so no tokenizer file is needed and bits per byte is the
loss in bits. The files are split, whole, into training, validation and test sets by a fixed
seeded permutation of their sorted paths (80/10/10 of the files), so that the split is the same
on every machine holding the same package.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ._demo_data import ensure_package

DEFAULT_DIR = Path("/usr/share/doc/python3.11/html/_sources")
PACKAGE = "python3.11-doc"
INSTALL_COMMAND = f"sudo apt-get install -y {PACKAGE}"
SPLIT_SEED = 0
FRACTIONS = (0.8, 0.1)  # training, validation; the rest is the test set


@dataclass
class Text:
    """The three splits as 1-D uint8 tensors of bytes (files joined end to end)."""

    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor
    files: tuple[int, int, int]

    def describe(self) -> str:
        sizes = ", ".join(
            f"{name} {n} files / {len(t) / 1e6:.2f} MB"
            for name, n, t in zip(
                ("train", "val", "test"), self.files, (self.train, self.val, self.test), strict=True
            )
        )
        return f"Python 3.11 documentation sources (bytes as tokens): {sizes}"


def has_python_doc(directory: Path = DEFAULT_DIR) -> bool:
    return directory.is_dir() and any(directory.rglob("*.txt"))


def ensure_python_doc(directory: Path = DEFAULT_DIR, *, install: bool = True) -> str:
    """Install the package when the sources are missing and that is possible; what happened."""
    if directory != DEFAULT_DIR and not has_python_doc(directory):
        return f"{directory} holds no documentation sources."
    return ensure_package(
        PACKAGE,
        lambda: has_python_doc(directory),
        "the Python documentation sources",
        install=install,
    )


def load_text(directory: Path = DEFAULT_DIR, *, install: bool = True) -> Text:
    """The sources split by file; ``FileNotFoundError`` (saying the command) when absent."""
    note = ensure_python_doc(directory, install=install)
    if not has_python_doc(directory):
        raise FileNotFoundError(note)
    paths = sorted(directory.rglob("*.txt"))
    order = torch.randperm(len(paths), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_train = round(FRACTIONS[0] * len(paths))
    n_val = round(FRACTIONS[1] * len(paths))
    parts = (order[:n_train], order[n_train : n_train + n_val], order[n_train + n_val :])

    def join(indices: torch.Tensor) -> torch.Tensor:
        raw = b"".join(paths[i].read_bytes() for i in sorted(indices.tolist()))
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8)

    train, val, test = (join(p) for p in parts)
    return Text(train, val, test, (len(parts[0]), len(parts[1]), len(parts[2])))
