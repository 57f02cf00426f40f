"""A PNG-folder dataset light enough to import in spawned DataLoader workers (no torchvision)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset


def to_tensor(img: Image.Image) -> torch.Tensor:
    """A PIL image as a (C, H, W) uint8 tensor."""
    a = np.array(img)
    return torch.from_numpy(a.reshape(*a.shape[:2], -1)).permute(2, 0, 1).contiguous()


class PngFolder(Dataset):
    """Every PNG of a folder, opened with PIL, passed through ``transform``, then to a tensor."""

    def __init__(self, root: Path, transform) -> None:
        self.files = sorted(Path(root).glob("*.png"))
        self.transform = transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        with Image.open(self.files[i]) as f:
            img = f.convert(f.mode)
        out = self.transform(img)
        return out if isinstance(out, torch.Tensor) else to_tensor(out)


class RecordLevels:
    """A set member that leaves the image as it is and remembers the levels it was given."""

    __name__ = "record_levels"

    def __init__(self) -> None:
        self.levels: list[float] = []

    def __call__(self, img: Image.Image, level: float) -> Image.Image:
        self.levels.append(level)
        return img


class LevelsDrawn(Dataset):
    """Item i: the levels ``make_transform(op)`` drew for one call (the randomness, laid bare)."""

    def __init__(self, n: int, make_transform) -> None:
        self.n = n
        self.record = RecordLevels()
        self.transform = make_transform([self.record])
        self.img = Image.new("L", (5, 3))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        self.record.levels.clear()
        self.transform(self.img)
        return torch.tensor(self.record.levels, dtype=torch.float64)
