"""Device-readiness checks that run on a machine without a GPU.

Two tools the per-step tests share:

- :func:`no_host_reads`: a block inside which reading a tensor's value on the host fails.
  On a GPU each such read (``.item()``, ``bool(t)``, ``int(t)``, ``.tolist()``, ``.cpu()``,
  ``torch.equal``, a data-dependent shape from ``nonzero`` ...) stalls the pipeline until the
  device catches up; on a CPU it costs nothing and so slips in unseen. Wrapping each per-step
  call in this block makes a new synchronisation fail a test on any machine.
  The one allowed read is the eager check of tensor contents on CPU tensors in
  ``functional._values.check_values`` and its copy ``augment._args.check_values`` (on
  accelerators each becomes a device-side assert).
- :func:`compile_counter` / :func:`assert_compiles_once`: run a function under
  ``torch.compile(fullgraph=True)`` (any graph break raises) and count the graphs dynamo built,
  so a recompile when a random draw or a scalar argument changes is caught.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch._dynamo
import torch._dynamo.testing

import augment._args as _augment_args
import functional._values as _values

__all__ = ["HostReadError", "assert_compiles_once", "compile_counter", "no_host_reads"]


class HostReadError(AssertionError):
    """A tensor value was read on the host inside :func:`no_host_reads`."""


# Methods of torch.Tensor that hand a tensor's value (or its data) to the host.
_TENSOR_READS = (
    "item",
    "tolist",
    "cpu",
    "numpy",
    "nonzero",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
    "__complex__",
)
# torch functions that return host values or data-dependent shapes.
_TORCH_READS = ("equal", "allclose", "nonzero", "argwhere", "unique", "masked_select")

# Code objects inside which a host read is the documented, CPU-only exception.
_ALLOWED = frozenset({_values.check_values.__code__, _augment_args.check_values.__code__})


def _allowed(frame: Any) -> bool:
    while frame is not None:
        if frame.f_code in _ALLOWED:
            return True
        frame = frame.f_back
    return False


def _guard(owner: Any, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if not _allowed(sys._getframe(1)):
            where = "Tensor." if owner is torch.Tensor else "torch."
            raise HostReadError(
                f"{where}{name} reads a tensor value on the host inside per-step code; "
                "on an accelerator this synchronises with the device every step"
            )
        return original(*args, **kwargs)

    guarded.__name__ = name
    return guarded


@contextlib.contextmanager
def no_host_reads() -> Iterator[None]:
    """Inside this block, any host read of a tensor value raises :class:`HostReadError`.

    Only Python-level reads are seen (method calls and conversions made from Python, including
    torch's own Python code); reads inside C++ kernels are not, which is what the CUDA lane's
    ``torch.cuda.set_sync_debug_mode("error")`` covers on a GPU machine.
    """
    saved: list[tuple[Any, str, Any]] = []
    try:
        for name in _TENSOR_READS:
            original = getattr(torch.Tensor, name)
            saved.append((torch.Tensor, name, original))
            setattr(torch.Tensor, name, _guard(torch.Tensor, name, original))
        for name in _TORCH_READS:
            original = getattr(torch, name)
            saved.append((torch, name, original))
            setattr(torch, name, _guard(torch, name, original))
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def compile_counter(
    fn: Callable[..., Any], *, backend: str = "aot_eager"
) -> tuple[Callable[..., Any], torch._dynamo.testing.CompileCounterWithBackend]:
    """``fn`` compiled with ``fullgraph=True`` (a graph break raises) and a counter of graphs.

    ``backend="aot_eager"`` traces forward and backward as inductor would but skips code
    generation, so the suite stays fast; pass ``"inductor"`` to compare generated kernels.
    Call ``torch._dynamo.reset()`` before, so no earlier cache entry hides a compile.
    """
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    return torch.compile(fn, backend=counter, fullgraph=True), counter


def assert_compiles_once(
    fn: Callable[..., Any],
    calls: Sequence[tuple[Sequence[Any], dict[str, Any]]],
    *,
    backend: str = "aot_eager",
) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` compiled for each call; require one graph and no recompile.

    Returns the compiled results, to be compared with eager ones by the caller.
    """
    torch._dynamo.reset()
    compiled, counter = compile_counter(fn, backend=backend)
    results = [compiled(*args, **kwargs) for args, kwargs in calls]
    if counter.frame_count != 1:
        raise AssertionError(
            f"{getattr(fn, '__name__', fn)} compiled {counter.frame_count} graphs over "
            f"{len(calls)} calls; expected 1 (a recompile when values changed)"
        )
    return results
