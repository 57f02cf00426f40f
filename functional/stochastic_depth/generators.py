"""Where stochastic depth's random decisions come from: the per-model generators (a host stream
for ``'block'`` decisions, one generator per device for the rest), seeded once per model and
shared by every rank or mixed with each rank's number."""

from __future__ import annotations

import random

import torch
import torch.distributed as dist

_SEED_MASK = (1 << 63) - 1


def _rank() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def _mix(seed: int, rank: int) -> int:
    """A rank-specific seed (SplitMix64 finaliser of seed and rank)."""
    z = (seed + 0x9E3779B97F4A7C15 * (rank + 1)) & ((1 << 64) - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return (z ^ (z >> 31)) & _SEED_MASK


def _agreed_seed(seed: int | None) -> int:
    """``seed``, or one seed shared by every rank: rank 0's, broadcast once when distributed."""
    if seed is None:
        seed = _mix(torch.initial_seed(), 0x5D)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        device = torch.device("cpu")
        if dist.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        box = torch.tensor([seed], dtype=torch.int64, device=device)
        dist.broadcast(box, src=0)
        seed = int(box.item())
    return seed & _SEED_MASK


class _DropGenerators:
    """The generators one stochastic model draws its decisions from, one per device.

    ``shared=True``: seeded with the same seed on every rank, so ranks that run the same blocks
    in the same order draw the same decisions. ``shared=False``: seeded per rank. Block
    decisions come from the host stream :meth:`host`; per-sample decisions always use the
    rank-specific device stream (different samples on every rank), which never disturbs the
    shared one.
    """

    def __init__(self, seed: int, *, shared: bool) -> None:
        self.seed = seed
        self.shared = shared
        self._generators: dict[tuple[str, bool], torch.Generator] = {}
        self._host: random.Random | None = None

    def host(self) -> random.Random:
        """The stream of ``'block'`` decisions, drawn on the host (created lazily, after the
        process group exists, so that the rank is known)."""
        if self._host is None:
            self._host = random.Random(self.seed if self.shared else _mix(self.seed, _rank()))
        return self._host

    def get(self, device: torch.device, *, shared: bool) -> torch.Generator:
        """The generator of ``device``: the shared stream, or this rank's own."""
        key = (str(device), shared)
        generator = self._generators.get(key)
        if generator is None:
            generator = torch.Generator(device=device)
            generator.manual_seed(self.seed if shared else _mix(self.seed, _rank()))
            self._generators[key] = generator
        return generator
