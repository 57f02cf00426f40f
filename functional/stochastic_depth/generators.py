"""Where stochastic depth's random decisions come from: counter-based streams, one per block,
keyed by the model's seed (shared by every rank, or mixed with each rank's number), the block's
index and how many decisions it has drawn.

A decision is a pure function of ``(seed, rank or not, block index, draw number)``: the host
decisions hash it into a uniform directly, the device ones seed a scratch ``torch.Generator``
with it. The only state to save is therefore the seed and each block's draw count (three
integers, the same on every rank that runs the same steps), which the blocks put in their
``state_dict`` (see :meth:`StochasticBlock.get_extra_state`); a checkpoint saved on rank 0 and
loaded on every rank resumes every rank's own stream."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

_SEED_MASK = (1 << 63) - 1
_UNIFORM_SHIFT = 10  # 63-bit hashes -> 53-bit float mantissas
_UNIFORM_SCALE = 1.0 / (1 << 53)


def _rank() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def _mix(seed: int, rank: int) -> int:
    """A 63-bit hash of two integers (SplitMix64 finaliser of ``seed + golden · (rank + 1)``)."""
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
    """The random streams one stochastic model draws its decisions from.

    ``shared=True``: the ``'block'`` streams are keyed by the seed alone, so ranks that run the
    same blocks in the same order draw the same decisions. ``shared=False``: keyed by (seed,
    rank). Per-sample decisions always use the rank's own streams (different samples on every
    rank). The per-device ``torch.Generator`` objects are scratch space, reseeded before every
    draw: they hold no state, and copies and pickles leave them out.
    """

    def __init__(self, seed: int, *, shared: bool) -> None:
        self.seed = seed
        self.shared = shared
        self._generators: dict[str, torch.Generator] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"seed": self.seed, "shared": self.shared}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Older pickles also carry ``_host`` and generators keyed by (device, shared): dropped.
        self.seed = state["seed"]
        self.shared = state["shared"]
        self._generators = {}

    def key(self, index: int, draw: int, *, shared: bool) -> int:
        """The 63-bit key of draw number ``draw`` of block ``index``, on the shared stream or
        on this rank's own."""
        base = self.seed if shared and self.shared else _mix(self.seed, _rank())
        return _mix(_mix(base, index), draw)

    def uniform(self, index: int, draw: int) -> float:
        """A host uniform in [0, 1) (53 bits) for a ``'block'`` decision."""
        return (self.key(index, draw, shared=True) >> _UNIFORM_SHIFT) * _UNIFORM_SCALE

    def generator(
        self, device: torch.device, index: int, draw: int, *, shared: bool
    ) -> torch.Generator:
        """The scratch generator of ``device``, seeded for this draw."""
        generator = self._generators.get(str(device))
        if generator is None:
            generator = torch.Generator(device=device)
            self._generators[str(device)] = generator
        generator.manual_seed(self.key(index, draw, shared=shared))
        return generator
