"""The project's own count of what a step costs on an accelerator, without one.

The op runs on tensors of torch's ``meta`` device (shapes, dtypes and strides, no values): the
library takes its accelerator branches (``device.type != "cpu"``: device asserts instead of
host reads, no CPU-only kernels), nothing is computed, so realistic shapes cost nothing. A
:class:`~torch.utils._python_dispatch.TorchDispatchMode` sees every aten call and counts:

- **launches**: one per op that does work on the device; views, metadata and allocations
  none; ``_foreach_*`` ops as CUDA's multi-tensor apply groups them (chunks of 65,536
  elements, at most 320 blocks and 110/64/48/36/30 tensors per launch by the number of
  tensor lists) when every list has one dtype and the same dense shapes, one per tensor
  otherwise;
- **syncs**: every value the host waits for: ``.item()`` / ``bool()`` / ``int()``
  (``_local_scalar_dense``), ops whose output shape depends on the values (``nonzero``,
  ``masked_select``, ``unique``, ``bincount``, boolean-mask indexing, ``repeat_interleave``
  without ``output_size``), ``equal``, and copies from the device to the host (a
  non-blocking one is counted apart). The mode answers them with placeholders (``.item()``:
  1), so the run goes on and every sync is counted; copies from the host to the device are
  counted too (``uploads``: a constant built on the host every call);
- **bytes**: device bytes read (tensor inputs, a stride-0 dimension once; gathers only what
  they gather) and written (outputs and in-place arguments).

A lower bound of the real cost (one aten op, one kernel; cuDNN/cuBLAS internals not modelled),
exact for what it counts, and independent of the machine: the launch/sync pin test
(``tests/test_launch_counts.py``) and ``python -m benchmarks device`` use it.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

DEVICE = torch.device("meta")

_SYNC_OPS = frozenset(
    {
        "_local_scalar_dense",
        "nonzero",
        "nonzero_static",
        "masked_select",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "equal",
        "is_nonzero",
        "bincount",
        "argwhere",
    }
)
_FREE_OPS = frozenset(
    {
        "empty",
        "empty_strided",
        "empty_like",
        "new_empty",
        "new_empty_strided",
        "set_",
        "resize_",
        "record_stream",
        "_assert_tensor_metadata",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "detach",
        "lift_fresh",
        "alias",
    }
)
_GATHERS = frozenset({"index", "gather", "index_select", "take", "embedding", "_unsafe_index"})
# Ops that write some entries of their ``self`` (at an index): they read their index and
# source and write as many entries as the source holds (the accumulating ones read them too),
# not the whole ``self``.
_SCATTERS = frozenset({"index_copy_", "index_put_", "_index_put_impl_", "scatter_"})
_ACCUMULATES = frozenset({"index_add_", "scatter_add_", "scatter_reduce_", "index_reduce_"})
_WRITE_ONLY = frozenset(
    {"fill_", "zero_", "copy_", "normal_", "uniform_", "random_", "bernoulli_"}
    | {"_foreach_copy_", "_foreach_zero_", "_foreach_fill_"}
)
_MTA_TENSORS = (110, 64, 48, 36, 30)  # tensors per launch by number of lists
_MTA_BLOCKS = 320
_MTA_CHUNK = 65536


@dataclass
class Counts:
    """What one call cost: launches, syncs (and non-blocking device-to-host copies), bytes,
    and launches per aten op name."""

    launches: int = 0
    syncs: int = 0
    async_copies: int = 0
    uploads: int = 0  # copies from the host to the device (blocking or not)
    read: int = 0
    written: int = 0
    by_op: Counter[str] = field(default_factory=Counter)

    @property
    def bytes(self) -> int:
        return self.read + self.written


def _name(func: Any) -> str:
    return str(func.__name__).split(".")[0]


def _is_view(func: Any) -> bool:
    schema = func._schema
    if schema.is_mutable or not schema.returns:
        return False
    return all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def _on_device(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "meta"


def _distinct_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements of ``t`` (a stride-0 dimension counts once)."""
    n = math.prod(s for s, st in zip(t.shape, t.stride(), strict=True) if st != 0)
    return 0 if t.numel() == 0 else n * t.element_size()


def _dense_alike(lists: list[list[torch.Tensor]]) -> bool:
    ref = lists[0]
    for lst in lists:
        if len(lst) != len(ref):
            return False
        for t, r in zip(lst, ref, strict=True):
            if t.dtype != ref[0].dtype or t.shape != r.shape or t.stride() != r.stride():
                return False
            if not (t.is_contiguous() or t.is_contiguous(memory_format=torch.channels_last)):
                return False
    return True


def _multi_tensor_launches(numels: list[int], lists: int) -> int:
    """Launches of a multi-tensor apply over tensors of these sizes with ``lists`` lists."""
    cap = _MTA_TENSORS[min(max(lists, 1), len(_MTA_TENSORS)) - 1]
    launches = tensors = blocks = 0
    sizes = [n for n in numels if n > 0]
    for i, n in enumerate(sizes):
        tensors += 1
        chunks = -(-n // _MTA_CHUNK)
        for c in range(chunks):
            blocks += 1
            last_chunk = c == chunks - 1
            if (
                (tensors == cap and last_chunk)
                or blocks == _MTA_BLOCKS
                or (i == len(sizes) - 1 and last_chunk)
            ):
                launches += 1
                blocks = 0
                tensors = 0 if last_chunk else 1
    return launches


def _foreach_launches(name: str, args: tuple[Any, ...], has_out: bool) -> int:
    lists = [
        list(a)
        for a in args
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)
    ]
    if not lists:
        return 0
    numels = [t.numel() for t in lists[0]]
    if not _dense_alike(lists):
        return sum(1 for n in numels if n > 0)
    depth = len(lists) + (1 if has_out and not name.endswith("_") else 0)
    return _multi_tensor_launches(numels, depth) + (1 if name.startswith("_foreach_norm") else 0)


def _mutated(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The device tensors an op writes in place (its ``self``, ``out=`` and the like)."""
    out: list[torch.Tensor] = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        out += [t for t in tree_flatten(value)[0] if _on_device(t)]
    return out


def _scalar(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    t = args[0]
    if name == "equal" or t.dtype == torch.bool:
        return True
    return 1.0 if t.is_floating_point() else 1


def _empty_rows(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """No rows selected: ``nonzero`` and the like, a boolean-mask index."""
    x = args[0]
    if name == "masked_select":
        return x.new_empty((0,))
    if name == "index":
        covered = sum(i.dim() if i is not None else 1 for i in args[1])
        return x.new_empty((0, *x.shape[covered:]))
    return torch.empty((0, x.dim()), dtype=torch.int64, device=x.device)


_PLACEHOLDERS: dict[str, Callable[[str, tuple[Any, ...], dict[str, Any]], Any]] = {
    "_local_scalar_dense": _scalar,
    "is_nonzero": _scalar,
    "equal": _scalar,
    # to the host: zeros of the right shape
    "_to_copy": lambda n, a, k: torch.zeros(a[0].shape, dtype=k.get("dtype") or a[0].dtype),
    "copy_": lambda n, a, k: a[0],
    "nonzero": _empty_rows,
    "argwhere": _empty_rows,
    "nonzero_static": _empty_rows,
    "masked_select": _empty_rows,
    "index": _empty_rows,
    "bincount": lambda n, a, k: a[0].new_zeros((k.get("minlength", 0),)),
    "index_put_": lambda n, a, k: a[0],
    "_index_put_impl_": lambda n, a, k: a[0],
    "index_put": lambda n, a, k: a[0].clone(),
}


# Random ops without a meta kernel: one launch, an output shaped like their first argument.
_RANDOM_LIKE = frozenset({"_sample_dirichlet", "_standard_gamma", "poisson", "binomial"})


def _placeholder(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What the mode returns for a value the host would wait for, so the run goes on (None:
    run the op: ``unique`` and the like may have meta kernels)."""
    make = _PLACEHOLDERS.get(name)
    return None if make is None else make(name, args, kwargs)


class CountingMode(TorchDispatchMode):
    """Counts every aten call into ``counts`` while active (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts = Counts()
        self._paused = 0

    @contextlib.contextmanager
    def uncounted(self) -> Iterator[None]:
        """Run the block without counting it (a SAM closure, a base optimizer's step)."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        name = _name(func)
        flat = tree_flatten((args, kwargs))[0]
        on_device = any(_on_device(t) for t in flat)
        counts = self.counts
        if self._paused:  # counted into a scratch record (the placeholders still answer)
            self.counts = Counts()
        try:
            return self._dispatch(func, name, args, kwargs, flat, on_device)
        finally:
            self.counts = counts

    def _dispatch(
        self,
        func: Any,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        flat: list[Any],
        on_device: bool,
    ) -> Any:
        if name.startswith("_fused_sgd_") and any(
            isinstance(t, torch.Tensor) and t.is_meta for t in flat
        ):
            self._fused_sgd(args, kwargs)
            return None
        sync = self._sync(name, args, kwargs, on_device)
        if sync:
            placeholder = _placeholder(name, args, kwargs)
            if placeholder is not None:
                return placeholder
        if name in _RANDOM_LIKE and _on_device(args[0]):
            out = torch.empty_like(args[0])
        else:
            out = func(*args, **kwargs)
        if not sync:
            self._record(func, name, args, kwargs, flat, out, on_device)
        return out

    def _fused_sgd(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Count torch's fused SGD (no Meta kernel): a multi-tensor apply over the parameters,
        gradients and momenta; it reads them all, writes the parameters and momenta, and writes
        the gradients only when it unscales them (``grad_scale``)."""
        params, grads, momenta = (list(a) for a in args[:3])
        lists = [lst for lst in (params, grads, momenta) if lst]
        launches = _multi_tensor_launches([t.numel() for t in params], len(lists))
        self.counts.launches += launches
        self.counts.by_op["_fused_sgd_"] += launches
        size = sum(_distinct_bytes(t) for t in params)
        self.counts.read += size * len(lists)
        written = 1 + (1 if momenta else 0) + (1 if kwargs.get("grad_scale") is not None else 0)
        self.counts.written += size * written

    def _sync(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], dev: bool) -> bool:
        if name in ("_to_copy", "copy_"):
            return self._copy(name, args, kwargs)
        if not dev:
            return False
        masked = name in ("index", "index_put_", "_index_put_impl_", "index_put") and any(
            isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
            for i in (args[1] if len(args) > 1 else kwargs.get("indices", ())) or ()
        )
        unsized = (
            name == "repeat_interleave"
            and kwargs.get("output_size") is None
            and (len(args) < 4 or args[3] is None)
            and any(_on_device(a) and not a.is_floating_point() for a in args[:2])
        )
        if name in _SYNC_OPS or masked or unsized:
            self.counts.syncs += 1
            self.counts.by_op[f"sync:{name}"] += 1
            return True
        return False

    def _copy(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Count a copy between the host and the device: a blocking one to the host is a sync
        (answered with a placeholder: returns True), a blocking one of more than a scalar from
        the host waits for the stream too (a sync; the copy itself runs)."""
        c = self.counts
        src, dst_on_device = (
            (args[1], _on_device(args[0]))
            if name == "copy_"
            else (
                args[0],
                _on_device(args[0])
                if kwargs.get("device") is None
                else torch.device(kwargs["device"]) == DEVICE,
            )
        )
        blocking = not (
            kwargs.get("non_blocking") or (name == "copy_" and len(args) > 2 and args[2])
        )
        if _on_device(src) and not dst_on_device:
            c.syncs += int(blocking)
            c.async_copies += int(not blocking)
            c.by_op[f"sync:{name} to host"] += int(blocking)
            return True
        if not _on_device(src) and dst_on_device and isinstance(src, torch.Tensor):
            c.uploads += 1
        if not _on_device(src) and dst_on_device and blocking and src.dim() > 0:
            c.syncs += 1
            c.by_op[f"sync:{name} from host"] += 1
        return False

    def _record(
        self,
        func: Any,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        flat: list[Any],
        out: Any,
        on_device: bool,
    ) -> None:
        outs = [t for t in tree_flatten(out)[0] if _on_device(t)]
        if not (on_device or outs) or name in _FREE_OPS or _is_view(func):
            return
        if name in ("_to_copy", "copy_") and not all(
            _on_device(t) or not isinstance(t, torch.Tensor) or t.dim() == 0 for t in flat
        ):
            return  # a host-to-device copy: no kernel
        c = self.counts
        launches = _foreach_launches(name, args, bool(outs)) if name.startswith("_foreach_") else 1
        c.launches += launches
        c.by_op[name] += launches
        inputs = [t for t in flat if _on_device(t)]
        if name in _SCATTERS or name in _ACCUMULATES:
            self._record_scatter(name, args, kwargs, inputs)
            return
        mutated = _mutated(func, args, kwargs)
        outs = mutated + [t for t in outs if all(t is not m for m in mutated)]
        written_ids = {id(t) for t in outs}
        read = 0
        for i, t in enumerate(inputs):
            if name in _GATHERS and i == 0:
                continue  # only the gathered entries (the output's size) are read
            if id(t) in written_ids and name in _WRITE_ONLY:
                continue
            read += _distinct_bytes(t)
        if name in _GATHERS:
            read += sum(_distinct_bytes(t) for t in outs)
        c.read += read
        c.written += sum(_distinct_bytes(t) for t in outs)

    def _record_scatter(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], inputs: list[Any]
    ) -> None:
        """Bytes of an op that writes entries of ``self`` at an index: the index and source
        read, the entries written (read too when accumulated), at most all of ``self``."""
        target = args[0]
        others = [t for t in inputs if t is not target]
        read = sum(_distinct_bytes(t) for t in others)
        source = max(
            (t for t in others if t.dtype == target.dtype), key=torch.Tensor.numel, default=None
        )
        entries = target.numel() if source is None else min(target.numel(), source.numel())
        touched = entries * target.element_size()
        accumulate = name in _ACCUMULATES or bool(
            kwargs.get("accumulate", len(args) > 3 and args[3] is True)
        )
        self.counts.read += read + (touched if accumulate else 0)
        self.counts.written += touched


@contextlib.contextmanager
def _storage_addresses() -> Iterator[None]:
    """``data_ptr()`` of a meta tensor is 0 for all of them, which makes code that tells tied
    tensors apart by address (``swap_ema_weights``) see one tensor: inside this block a meta
    tensor's address is its storage's identity plus its offset."""
    original = torch.Tensor.data_ptr

    def data_ptr(self: torch.Tensor) -> int:
        if self.device.type != "meta":
            return original(self)
        storage = self.untyped_storage()._cdata
        return int(storage) + self.storage_offset() * self.element_size()

    torch.Tensor.data_ptr = data_ptr  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.data_ptr = original  # type: ignore[method-assign]


def count(fn: Callable[[CountingMode], object], *, warmup: bool = True) -> Counts:
    """The cost of one call of ``fn(mode)`` (after one uncounted call that builds lazy
    state); ``fn`` may leave parts of itself out with ``mode.uncounted()``."""
    mode = CountingMode()
    with _storage_addresses():
        if warmup:
            with mode, mode.uncounted():
                fn(mode)
        with mode:
            fn(mode)
    return mode.counts
