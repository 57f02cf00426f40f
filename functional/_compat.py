"""Every place where this library's behaviour depends on the torch release, in one module.

The supported range is torch 2.6 to 2.15 (``pyproject.toml``; the compatibility lane of
``.ci/run`` tests its two ends). Code elsewhere never compares versions: it asks a question
here, and each answer says which releases were measured and why they differ. When the floor
rises past a gate's last affected release, the gate and its callers' fallback go.
"""

from __future__ import annotations

import re

import torch

__all__ = ["TORCH_RELEASE", "fused_sgd_is_correct"]


def _release(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a torch version string (``"2.6.0+cu124"``, ``"2.15.0a0+git..."``).

    A pre-release counts as its release: nightlies of 2.14 already hold 2.14's fixes.
    """
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise ValueError(f"torch.__version__ must start with MAJOR.MINOR, got {version!r}")
    return int(found.group(1)), int(found.group(2))


TORCH_RELEASE: tuple[int, int] = _release(torch.__version__)
"""The ``(major, minor)`` release of the torch this process imported."""


def fused_sgd_is_correct(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``torch._fused_sgd_`` updates tensors of ``dtype`` on ``device`` correctly.

    On the CPU before torch 2.14 the float16 and bfloat16 kernel updates only the elements
    after the last full vector of 16: a tensor of 16 elements is left unchanged, one of 17 gets
    only its last element, and nothing says so (measured on 2.6.0 and 2.13.0: wrong; 2.14.1
    and 2.15.0: right; float32 and float64 right everywhere; CUDA not affected). The EMA step
    and SAM's perturbation take their per-tensor path there instead.
    """
    if device.type == "cpu" and dtype in (torch.float16, torch.bfloat16):
        return TORCH_RELEASE >= (2, 14)
    return True
