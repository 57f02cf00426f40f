"""Randomness of the ``augment`` package: per-call random sources, transforms' streams, draws.

Every public callable takes ``rng: random.Random | numpy.random.Generator | None``.
Internally every draw goes through a :class:`random.Random` interface (Python's scalar draws
are ~10x cheaper than NumPy's), obtained per call by :func:`call_source`:

* ``random.Random``: used directly (it advances, like a ``torch.Generator``);
* ``numpy.random.Generator``: the call's uniform floats are drawn from it in blocks;
* ``None``: the floats come, in blocks, from torch's global generator, as torchvision's
  random transforms draw theirs. ``torch.manual_seed`` therefore makes a run reproducible, and
  every ``DataLoader`` worker (which torch seeds with ``base_seed + worker_id``, anew every
  epoch) gets its own randomness.

Transforms hold their ``rng`` in an :class:`RngStream`, which keeps seeded runs reproducible and
distinct across processes: the first call in a new process (a forked or spawned ``DataLoader``
worker) replaces the inherited state with a stream derived from it and the worker's id, and the
parent draws once from the stream at every ``os.fork`` so that the workers of the next epoch start
elsewhere.
"""

from __future__ import annotations

import math
import os
import random
import weakref
from collections.abc import Callable
from typing import Any, TypeAlias

import numpy as np
import torch

from augment._args import check_rng

__all__ = ["NO_DRAWS", "RngLike", "RngStream", "beta", "call_source", "dirichlet", "sign"]

RngLike: TypeAlias = random.Random | np.random.Generator | None

_SEED_BOUND = 2**63

_BLOCK = 32  # floats fetched per refill: one AugMix call draws about 20-30


class _BlockDraws(random.Random):
    """A ``random.Random`` whose ``random()`` serves floats fetched in blocks from ``refill``.

    Every derived draw (``uniform``, ``randrange``, ``gammavariate``...) goes through
    ``random()``, so one torch or NumPy call feeds a whole AugMix call; the Mersenne Twister
    state is never seeded or used (seeding it costs more than the augmentation of a small image).
    """

    def __init__(self, refill: Callable[[], list[float]]) -> None:  # no super().__init__: no seed
        self._refill = refill
        self._buf = refill()
        self._i = 0

    def seed(self, *args: object, **kwargs: object) -> None:
        pass

    def random(self) -> float:
        i = self._i
        if i == len(self._buf):
            self._buf = self._refill()
            i = 0
        self._i = i + 1
        return self._buf[i]


def _torch_block() -> list[float]:
    return torch.rand(_BLOCK, dtype=torch.float64).tolist()


def call_source(rng: RngLike) -> random.Random:
    """The ``random.Random`` one call draws from (see the module docstring)."""
    if isinstance(rng, random.Random):
        return rng
    if rng is None:
        return _BlockDraws(_torch_block)
    return _BlockDraws(lambda: rng.random(_BLOCK).tolist())


def sign(src: random.Random) -> float:
    """A fair random sign, -1.0 or 1.0 (one draw)."""
    return -1.0 if src.random() < 0.5 else 1.0


class _NoDraws(random.Random):
    """The source handed to kernels that draw nothing: using it is a bug, and says so."""

    def random(self) -> float:
        raise RuntimeError("this augment kernel is deterministic and must not draw")


NO_DRAWS = _NoDraws(0)


def _draw_seed(rng: random.Random | np.random.Generator) -> int:
    if isinstance(rng, random.Random):
        return rng.getrandbits(63)
    return int(rng.integers(_SEED_BOUND))


# Streams whose parent-side state must move on at every fork.
_LIVE_STREAMS: weakref.WeakSet[RngStream] = weakref.WeakSet()


def _advance_live_streams() -> None:
    for stream in list(_LIVE_STREAMS):
        stream.advance()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_parent=_advance_live_streams)


class RngStream:
    """A transform's ``rng``, made safe to carry into ``DataLoader`` worker processes.

    In the process that built it, a seeded stream draws from the user's ``rng`` itself. In any
    other process (a forked or unpickled copy), the first call derives a fresh
    ``random.Random`` from the inherited state and the ``DataLoader`` worker id (the process id
    outside a ``DataLoader``), so workers never repeat each other's draws and a seeded run with
    a fixed number of workers is reproducible.

    Epochs: with ``fork`` workers, the parent's stream moves on at every fork, so each epoch's
    workers start from new states. ``spawn``/``forkserver`` workers unpickle the parent's
    unchanged state every epoch; they also mix in torch's per-epoch worker seed
    (``get_worker_info().seed``), so their run is reproducible given the seeded ``rng`` and
    ``torch.manual_seed`` (or the ``DataLoader``'s ``generator``). ``rng=None`` defers to torch's
    global generator throughout.
    """

    def __init__(self, rng: RngLike) -> None:
        check_rng(rng)
        self.rng = rng
        self._pid = os.getpid()
        self._local: random.Random | None = None
        self._unpickled_in: int | None = None  # the process that unpickled this copy, if any
        if rng is not None:
            _LIVE_STREAMS.add(self)

    def _current(self) -> random.Random | np.random.Generator:
        assert self.rng is not None  # callers check
        return self._local if self._local is not None else self.rng

    def source(self) -> random.Random:
        if self.rng is None:
            return _BlockDraws(_torch_block)
        pid = os.getpid()
        if pid != self._pid:
            # this process's place among its siblings: the DataLoader worker id, else the pid
            info = torch.utils.data.get_worker_info()
            key = f"worker{info.id}" if info is not None else f"pid{pid}"
            if info is not None and self._unpickled_in == pid:
                # a spawn/forkserver worker: the parent's stream did not move on between epochs
                # (no fork hook ran), so torch's per-epoch worker seed tells the epochs apart
                key += f":seed{info.seed}"
            self._local = random.Random(f"augment:{_draw_seed(self._current())}:{key}")
            self._pid = pid
        return call_source(self._current())

    def advance(self) -> None:
        """Move the stream on by one draw (the parent's side of a fork)."""
        if self.rng is not None and self._pid == os.getpid():
            _draw_seed(self._current())

    def __getstate__(self) -> dict[str, Any]:
        return {"rng": self.rng, "_pid": self._pid, "_local": self._local}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._unpickled_in = os.getpid()
        if self.rng is not None:
            _LIVE_STREAMS.add(self)

    def __repr__(self) -> str:
        if self.rng is None:
            return "None"
        if isinstance(self.rng, random.Random):
            return "random.Random(...)"
        return f"numpy.random.Generator({type(self.rng.bit_generator).__name__})"


# Beyond this concentration a Gamma(alpha) draw is alpha within a relative 1/sqrt(alpha) < 1e-8,
# finer than the float32 mix resolves: the Dirichlet and Beta draws are their limits (even
# weights, one half). Python's gammavariate also never returns for alpha near the float maximum
# (2·alpha - 1 overflows to inf and its acceptance test compares NaN).
_ALPHA_LIMIT = 1e16


def dirichlet(src: random.Random, alpha: float, k: int) -> list[float]:
    """``k`` weights from a symmetric Dirichlet(alpha) (normalised Gamma(alpha) draws)."""
    if alpha > _ALPHA_LIMIT:
        return [1.0 / k] * k
    g = [src.gammavariate(alpha, 1.0) for _ in range(k)]
    total = math.fsum(g)
    if total == 0.0:  # every draw underflowed (tiny alpha): the alpha -> 0 limit, one vertex
        w = [0.0] * k
        w[src.randrange(k)] = 1.0
        return w
    return [x / total for x in g]


def beta(src: random.Random, alpha: float) -> float:
    """One draw from the symmetric Beta(alpha, alpha)."""
    if alpha > _ALPHA_LIMIT:
        return 0.5
    x, y = src.gammavariate(alpha, 1.0), src.gammavariate(alpha, 1.0)
    if x + y == 0.0:  # both underflowed: alpha -> 0 limit puts mass 1/2 on each end
        return float(src.random() < 0.5)
    return x / (x + y)
