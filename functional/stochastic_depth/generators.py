"""Where stochastic depth's random decisions come from: counter-based streams, one per block,
keyed by the model's seed (shared by every rank, or mixed with each rank's number), the block's
index and how many decisions it has drawn.

A decision is a pure function of ``(seed, rank or not, block index, draw number)``, computed
by :func:`draw_bits` with integer operations that mean the same on Python ints (the eager
``'block'`` decisions, drawn on the host) and on int64 tensors (the device decisions, eager or
compiled): no ``torch.Generator`` and no global random state, so ``torch.compile`` traces it
into one graph and the same draws come out eager or compiled. The only state to save is
therefore the seed and each block's draw counts, which the blocks put in their
``state_dict`` (see :meth:`StochasticBlock.get_extra_state`); a checkpoint saved on rank 0 and
loaded on every rank resumes every rank's own stream."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

_SEED_MASK = (1 << 63) - 1
_M32 = 0xFFFFFFFF
# Odd multipliers below 2**31: a 32-bit value times one stays below 2**63, so int64 tensor
# products never overflow (no reliance on wrap-around) and equal the Python ones.
_SPREAD = 0x6C8E9CF5
_MUL_1 = 0x5945B2AF
_MUL_2 = 0x792CA22B
_SALT_DOMAIN = 0x2545F4914F6CDD1D  # keeps the rank salts apart from the block keys


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


def _fmix32(x: Any) -> Any:
    """A bijective 32-bit finaliser (xor-shift, multiply, xor-shift, multiply, xor-shift) of
    ``x`` in [0, 2**32): an int, or an int64 tensor (all values stay non-negative, so ``>>``
    is a logical shift on both)."""
    x = x ^ (x >> 16)
    x = (x * _MUL_1) & _M32
    x = x ^ (x >> 15)
    x = (x * _MUL_2) & _M32
    return x ^ (x >> 16)


def _spread(count: Any, key_a: Any, key_b: Any) -> Any:
    """Draw number ``count`` of the stream ``(key_a, key_b)``, before the final mix: a
    bijection of ``count`` under ``key_a``, xored with ``key_b``, so that two streams whose
    first stages meet still differ (streams never repeat one another shifted)."""
    return ((((count & _M32) ^ key_a) * _SPREAD) & _M32) ^ key_b


def draw_bits(count: Any, key_a: Any, key_b: Any) -> Any:
    """32 random bits of draw number ``count`` of the stream keyed by the 32-bit ``key_a`` and
    ``key_b``: ints, or int64 tensors (then the result is one, with the same bits)."""
    return _fmix32(_spread(count, key_a, key_b))


def sample_bits(count: torch.Tensor, key_a: Any, key_b: Any, batch: int) -> torch.Tensor:
    """32 random bits for each sample ``0 .. batch - 1`` of draw number ``count`` (a 0-d int64
    tensor) of a stream; sample 0's are :func:`draw_bits`'."""
    spread = _spread(count, key_a, key_b)
    return _fmix32(spread ^ torch.arange(batch, device=spread.device))


class _DropGenerators:
    """The random streams one stochastic model draws its decisions from.

    ``shared=True``: the ``'block'`` streams are keyed by the seed alone, so ranks that run the
    same blocks in the same order draw the same decisions. ``shared=False``: keyed by (seed,
    rank). Per-sample decisions always use the rank's own streams (different samples on every
    rank). A block takes its keys once (:meth:`keys`, when converted or loaded): the rank is
    the one of that moment.
    """

    def __init__(self, seed: int, *, shared: bool) -> None:
        self.seed = seed
        self.shared = shared

    def __getstate__(self) -> dict[str, Any]:
        return {"seed": self.seed, "shared": self.shared}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Older pickles also carry ``_host`` and scratch generators: dropped.
        self.seed = state["seed"]
        self.shared = state["shared"]

    def keys(self, index: int) -> tuple[int, int, int, int]:
        """Block ``index``'s 32-bit stream keys ``(key_a, key_b, salt of 'block', salt of
        'sample')``: a stream's ``key_b`` is ``key_b ^ salt``.

        ``key_a`` and ``key_b`` depend on the seed and the block only, so they may live in a
        buffer that ``DistributedDataParallel`` overwrites with rank 0's; the salts (a hash of
        the seed and this rank; 0 for the shared ``'block'`` stream) stay Python ints.
        """
        key = _mix(self.seed, index)
        salt = _mix(self.seed ^ _SALT_DOMAIN, _rank()) & _M32
        return key & _M32, key >> 31 & _M32, 0 if self.shared else salt, salt
