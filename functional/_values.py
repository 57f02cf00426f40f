"""Checks of tensor *contents* that never make the host wait for a device value.

:func:`check_values` is the single place where per-step code checks what a tensor holds
(class labels, batch positions, per-step scalars given as 0-d tensors): eagerly on the CPU, as
a device-side assert on accelerators, skipped under ``torch.compile``. The batch and label ops
and the training-state helpers use these; the test-suite's host-read detector
(``tests/devicecheck.py``) allows the read :func:`check_values` makes on CPU tensors, and no
other.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from functional._args import check_tensor

__all__ = [
    "check_class_indices",
    "check_indices",
    "check_step_scalar",
    "check_values",
]


def check_values(
    ok: torch.Tensor,
    rule: str,
    got: Callable[[], str] | None = None,
    *,
    error: type[Exception] = ValueError,
) -> None:
    """Require the 0-d bool tensor ``ok`` (a check on the contents of a tensor) to be true.

    The single place where a check of tensor *contents* runs, so that per-step code never
    synchronises with a device:

    - CPU tensors, eager: checked at once; on failure ``error(f"{rule}, got {got()}")``
      (``got`` describes the offending values and runs only on failure, so it may read them).
    - accelerator tensors, eager: queued on the device with ``torch._assert_async(ok, rule)``;
      a failure surfaces at the next synchronisation, and the host never waits for the value.
    - under ``torch.compile``: skipped (the contract allows it), so the graph does not break.

    The test-suite's host-read detector (``tests/devicecheck.py``) allows the read made here on
    CPU tensors, and no other.
    """
    if torch.compiler.is_compiling():
        return
    if ok.device.type == "cpu":
        if not bool(ok):
            raise error(rule if got is None else f"{rule}, got {got()}")
    else:
        torch._assert_async(ok, rule)


def check_step_scalar(
    value: object,
    name: str,
    rule: str,
    tensor_ok: Callable[[torch.Tensor], torch.Tensor],
    check_number: Callable[[object, str], float],
) -> float | torch.Tensor:
    """A scalar that may change every step: a Python number, or a 0-d floating tensor.

    A tensor's value is checked with :func:`check_values` (``tensor_ok(value)`` must hold: on
    the device, never read on the host); a Python number with ``check_number(value, name)``,
    except under ``torch.compile``, where comparing it would turn a changing value into a guard
    (a recompile per value) instead of a graph input. ``rule`` ends the messages
    (``"{name} must be {rule}"``).
    """
    if isinstance(value, torch.Tensor):
        if value.ndim != 0 or not value.is_floating_point():
            raise ValueError(
                f"{name} must be a number or a 0-d floating tensor, got a tensor of shape "
                f"{tuple(value.shape)} and dtype {value.dtype}"
            )
        check_values(tensor_ok(value), f"{name} must be {rule}", lambda: f"{value.item()}")
        return value
    if torch.compiler.is_compiling():
        return value  # type: ignore[return-value]
    return check_number(value, name)


def check_class_indices(y: torch.Tensor, n_classes: int, name: str = "y") -> None:
    """Require integer labels in ``[0, n_classes)``.

    Checked eagerly on the CPU; on an accelerator the check is queued on the device
    (``torch._assert_async``) so that it does not synchronise the host.
    """
    if y.numel() == 0:
        return

    def got() -> str:
        low, high = (int(v) for v in torch.aminmax(y))
        return f"values in [{low}, {high}]"

    check_values(
        ((y >= 0) & (y < n_classes)).all(),
        f"{name} must hold class indices in [0, {n_classes}) (n_classes={n_classes})",
        got,
    )


def check_indices(indices: object, batch: int, name: str = "indices") -> torch.Tensor:
    """Require ``(B,)`` integer batch positions in ``[0, B)`` (a content check: see check_values)."""
    indices = check_tensor(indices, name)
    if indices.shape != (batch,):
        raise ValueError(f"{name} must have shape (B,) = ({batch},), got {tuple(indices.shape)}")
    if indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got dtype {indices.dtype}")
    if batch:

        def got() -> str:
            return f"values in [{int(indices.min())}, {int(indices.max())}]"

        check_values(
            ((indices >= 0) & (indices < batch)).all(),
            f"{name} must hold batch positions in [0, {batch})",
            got,
        )
    return indices.long()
