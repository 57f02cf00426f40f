"""Shared plumbing of the ``augment`` package: image kinds, randomness, argument checks.

Randomness. Every public callable takes ``rng: random.Random | numpy.random.Generator | None``.
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
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import numpy as np
import torch
from PIL import Image

from functional._args import check_in_range, check_int, check_one_of, check_positive

__all__ = [
    "AUGMIX_MIN_SEVERITY",
    "RANDAUGMENT_MIN_SEVERITY",
    "ImageLike",
    "RngLike",
    "RngStream",
    "SetTransform",
    "as_pil",
    "beta",
    "call_source",
    "check_alpha",
    "check_depth",
    "check_rng",
    "check_severity",
    "dirichlet",
    "from_array",
    "from_pil",
    "pixels",
    "resolve_set",
    "set_repr",
]

ImageLike: TypeAlias = Image.Image | torch.Tensor
RngLike: TypeAlias = random.Random | np.random.Generator | None

_MODES = ("RGB", "L")
_SEED_BOUND = 2**63


# ----------------------------------------------------------------------------------- images


class _TensorKind:
    """Remembers where a (C, H, W) tensor came from, to hand back the same kind."""

    __slots__ = ("device",)

    def __init__(self, device: torch.device) -> None:
        self.device = device


def as_pil(img: object, name: str = "img") -> tuple[Image.Image, _TensorKind | None]:
    """The image as a loaded 'RGB' or 'L' PIL image, and how to give the result back.

    A (C, H, W) ``torch.uint8`` tensor with C = 3 becomes 'RGB', with C = 1 'L'.
    """
    if isinstance(img, Image.Image):
        if img.mode not in _MODES:
            raise ValueError(
                f"{name} must be a PIL image of mode 'RGB' or 'L', got mode {img.mode!r}; "
                f"convert it first, e.g. {name}.convert('RGB')"
            )
        if img.width == 0 or img.height == 0:
            raise ValueError(f"{name} must not be empty, got size {img.size}")
        img.load()
        return img, None
    if isinstance(img, torch.Tensor):
        if img.dtype != torch.uint8:
            raise TypeError(
                f"{name} must be a torch.uint8 tensor (values 0..255), got dtype {img.dtype}; "
                "convert with (x * 255).round().to(torch.uint8) for a float image in [0, 1]"
            )
        if img.ndim != 3 or img.shape[0] not in (1, 3):
            raise ValueError(
                f"{name} must be a (C, H, W) tensor with C = 1 or 3, got shape {tuple(img.shape)}"
            )
        if img.shape[1] == 0 or img.shape[2] == 0:
            raise ValueError(f"{name} must not be empty, got shape {tuple(img.shape)}")
        if img.is_meta:
            raise ValueError(
                f"{name} is on the meta device, which holds no pixel values to augment; "
                "pass a tensor with data (CPU or accelerator)"
            )
        arr = img.detach().cpu().permute(1, 2, 0).numpy()
        arr = np.ascontiguousarray(arr[:, :, 0] if img.shape[0] == 1 else arr)
        return Image.fromarray(arr), _TensorKind(img.device)
    raise TypeError(
        f"{name} must be a PIL.Image.Image or a (C, H, W) torch.uint8 tensor, "
        f"got {type(img).__name__}"
    )


def pixels(img: Image.Image) -> np.ndarray:
    """A read-only (H, W) ('L') or (H, W, 3) ('RGB') uint8 view of a copy of the pixels."""
    shape = (img.height, img.width) if img.mode == "L" else (img.height, img.width, 3)
    return np.frombuffer(img.tobytes(), dtype=np.uint8).reshape(shape)


def from_array(arr: np.ndarray, kind: _TensorKind | None) -> Image.Image | torch.Tensor:
    """An (H, W) or (H, W, C) uint8 array we own, as the kind ``as_pil`` recorded."""
    if kind is None:
        h, w = arr.shape[:2]
        return Image.frombytes("L" if arr.ndim == 2 else "RGB", (w, h), arr)
    t = torch.from_numpy(arr)
    t = t.unsqueeze(0) if t.ndim == 2 else t.permute(2, 0, 1).contiguous()
    return t.to(kind.device)


def from_pil(img: Image.Image, kind: _TensorKind | None) -> Image.Image | torch.Tensor:
    """A PIL result, as the kind ``as_pil`` recorded."""
    if kind is None:
        return img
    return from_array(np.array(img), kind)


# ------------------------------------------------------------------------------ randomness


def check_rng(rng: object, name: str = "rng") -> None:
    if rng is not None and not isinstance(rng, (random.Random, np.random.Generator)):
        raise TypeError(
            f"{name} must be a random.Random, a numpy.random.Generator or None, "
            f"got {type(rng).__name__}"
        )


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


# ------------------------------------------------------------------------------ arguments


# The lowest severity of each transform, as the seeds state: AugMix 0, RandAugment 1.
AUGMIX_MIN_SEVERITY = 0.0
RANDAUGMENT_MIN_SEVERITY = 1.0


def check_severity(severity: object, *, minimum: float = AUGMIX_MIN_SEVERITY) -> float:
    """A severity in ``[minimum, 10]`` (see the ``*_MIN_SEVERITY`` constants)."""
    return check_in_range(severity, "severity", minimum, 10.0)


def check_alpha(alpha: object) -> float:
    return check_positive(alpha, "alpha")


def check_depth(depth: object, *, allow_random: bool) -> int:
    if allow_random:
        d = check_int(depth, "depth")
        if d != -1 and d < 1:
            raise ValueError(
                f"depth must be -1 (a random depth in [1, 3] per chain) or an int >= 1, got {depth}"
            )
        return d
    return check_int(depth, "depth", minimum=0)


def resolve_set(
    augmentation_set: object, sets: dict[str, list[Callable[..., Any]]]
) -> tuple[Callable[..., Any], ...]:
    """The operations of ``augmentation_set``: a set name, or a sequence of callables."""
    if isinstance(augmentation_set, str):
        check_one_of(augmentation_set, "augmentation_set", list(sets))
        return tuple(sets[augmentation_set])
    if isinstance(augmentation_set, Sequence):
        ops = tuple(augmentation_set)
        if not ops:
            raise ValueError("augmentation_set must not be empty")
        for op in ops:
            if not callable(op):
                raise TypeError(
                    "augmentation_set must hold callables (img, level) -> img, "
                    f"got an item of type {type(op).__name__}"
                )
        return ops
    raise TypeError(
        "augmentation_set must be a set name (one of "
        + ", ".join(repr(k) for k in sets)
        + f") or a sequence of callables, got {type(augmentation_set).__name__}"
    )


def set_repr(augmentation_set: str | Sequence[Callable[..., Any]]) -> str:
    """A set name as its repr, a sequence of callables as ``[name, ...]``."""
    if isinstance(augmentation_set, str):
        return repr(augmentation_set)
    return "[" + ", ".join(getattr(op, "__name__", repr(op)) for op in augmentation_set) + "]"


# ------------------------------------------------------------------------------ transforms


class SetTransform:
    """What the ``AugMix`` and ``RandAugment`` transforms share: the checked ``severity``,
    ``depth`` and ``augmentation_set`` (compiled to kernels once) and the ``rng`` stream."""

    def __init__(
        self,
        severity: float,
        depth: int,
        augmentation_set: str | Sequence[Callable[..., Any]],
        rng: RngLike,
        *,
        random_depth: bool,
        min_severity: float = AUGMIX_MIN_SEVERITY,
    ) -> None:
        # imported here: augment.primitives itself imports this module
        from augment.primitives import augmentation_sets, kernels_of

        self._ops = resolve_set(augmentation_set, augmentation_sets)
        check_severity(severity, minimum=min_severity)
        self.severity = severity
        self.depth = check_depth(depth, allow_random=random_depth)
        self.augmentation_set = augmentation_set if isinstance(augmentation_set, str) else self._ops
        self._kernels = kernels_of(self._ops)
        self._stream = RngStream(rng)

    @property
    def rng(self) -> RngLike:
        return self._stream.rng
