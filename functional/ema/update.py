"""The EMA update :func:`compute_ema`: one fused lerp per (device, dtype) group of the paired
tensors, integer buffers copied, ``smoothing`` as a number or a 0-d tensor."""

from __future__ import annotations

from collections.abc import MutableMapping

import torch
from torch import nn

from functional._args import check_bool, check_probability
from functional._values import check_step_scalar
from functional.ema.pairing import _pairs

__all__ = ["compute_ema"]


def _check_smoothing(smoothing: object) -> float | torch.Tensor:
    """A Python number or a 0-d floating tensor in [0, 1] (see ``check_step_scalar``)."""
    return check_step_scalar(
        smoothing, "smoothing", "in [0, 1]", lambda t: (t >= 0) & (t <= 1), check_probability
    )


@torch.no_grad()
def compute_ema(
    model: nn.Module,
    ema_model: nn.Module | MutableMapping[str, torch.Tensor],
    smoothing: float | torch.Tensor = 0.99,
    *,
    train_with_ema_weights: bool = False,
) -> None:
    r"""Move ``ema_model``'s weights towards ``model``'s, in place (exponential moving average).

    For every floating parameter and buffer, matched by name:

    .. math::
        w_\text{ema} \leftarrow s\, w_\text{ema} + (1 - s)\, w_\text{model}

    computed as one fused ``torch._foreach_lerp_`` per (device, dtype) group. Integer buffers
    (e.g. BatchNorm's ``num_batches_tracked``) are copied. The EMA may be kept in another dtype
    or on another device than the model (e.g. float32 EMA of a bfloat16 model).

    The pairing of the two sides is derived on every call from the modules as they are (a
    walk over both module trees, no cache and no hidden state), so a replaced tensor, a
    ``.data`` edit or a model moved with ``.to()`` is always seen; the walk costs a few
    microseconds per module, small next to the update itself.

    ``model`` and ``ema_model`` may be wrapped in ``DistributedDataParallel`` or
    ``torch.compile`` (their inner modules are used) or sharded with FSDP2's ``fully_shard``
    (every rank updates its local shards, no communication). ``ema_model`` may also be a dict
    of tensors, updated in place; non-persistent buffers, which a state dict leaves out, are
    then skipped. This is the light form of the EMA seed's ``ShadowModel`` (a copy that tracks
    the parameters and buffers of a source model): no second module, only its tensors::

        ema_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        F.compute_ema(model, ema_state, smoothing)          # every step
        model.load_state_dict(ema_state)                    # or F.use_ema_weights(model, ema_state)

    Under ``torch.compile(fullgraph=True)`` it traces without a graph break and a
    ``smoothing`` that changes between calls does not recompile from step to step (a 0-d
    tensor never recompiles; a Python float once, dynamo's automatic-dynamic step); it
    reads no tensor value on the host (a tensor ``smoothing`` is range-checked on the CPU
    eagerly, by a device-side assert on accelerators; under compile neither form is
    range-checked).

    Args:
        model: the trained model.
        ema_model: the averaged copy (same architecture), or a name → tensor mapping.
        smoothing: :math:`s` in ``[0, 1]``, a number or a 0-d tensor; see
            :func:`ema_smoothing`. (The EMA seed states the open interval (0, 1); the end
            points are allowed here: 0 copies the model, 1 leaves the EMA unchanged.)
        train_with_ema_weights: the EMA seed's option: after the update, copy the EMA's
            weights back into ``model``, so that training continues from the averaged
            weights (optimizer state is left as it is).

    Raises:
        ValueError: if names or shapes do not match, or ``smoothing`` is out of range.

    Example:
        >>> import copy, torch, functional as F
        >>> model = torch.nn.Linear(3, 1)
        >>> ema = copy.deepcopy(model)
        >>> with torch.no_grad():
        ...     _ = model.weight.add_(1.0)
        >>> F.compute_ema(model, ema, smoothing=0.9)
        >>> torch.allclose(ema.weight, 0.9 * (model.weight - 1) + 0.1 * model.weight)
        True
        >>> state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        >>> F.compute_ema(model, state, smoothing=0.5)   # a state dict as the EMA
    """
    smoothing = _check_smoothing(smoothing)
    check_bool(train_with_ema_weights, "train_with_ema_weights")
    pairs = _pairs(model, ema_model, "compute_ema")
    for (device, dtype), (ema_list, model_list, originals) in pairs.groups.items():
        if isinstance(smoothing, torch.Tensor):
            weight = (1.0 - smoothing).to(device=device, dtype=dtype)
            torch._foreach_lerp_(ema_list, model_list, [weight] * len(ema_list))
        elif torch.compiler.is_compiling():
            # A float passed as a Scalar argument would be specialised (a recompile per value);
            # as a factor of a tensor it stays a graph input.
            weight = torch.ones((), device=device, dtype=dtype) * (1.0 - smoothing)
            torch._foreach_lerp_(ema_list, model_list, [weight] * len(ema_list))
        else:
            torch._foreach_lerp_(ema_list, model_list, 1.0 - smoothing)
        if train_with_ema_weights:
            torch._foreach_copy_(originals, ema_list)
    if pairs.copies:
        ema_ints, model_ints = zip(*pairs.copies, strict=True)
        torch._foreach_copy_(list(ema_ints), list(model_ints))
