"""The EMA update :func:`compute_ema`: one multi-tensor kernel per (device, dtype) group of the
paired tensors (a fused lerp, or fused SGD for a 0-d tensor smoothing), integer buffers copied,
low-precision EMA tensors optionally rounded stochastically (:mod:`~functional.ema.rounding`)."""

from __future__ import annotations

from collections.abc import MutableMapping

import torch
from torch import nn

from functional._args import check_bool, check_generator, check_probability
from functional._compat import fused_sgd_is_correct
from functional._numeric import scalar_tensor
from functional._values import check_step_scalar
from functional.ema.pairing import _pairs, _same_dense_layout
from functional.ema.rounding import LOW_PRECISION, _lerp_stochastic_, _warn_round_to_nearest

__all__ = ["compute_ema"]


def _check_smoothing(smoothing: object) -> float | torch.Tensor:
    """A Python number or a 0-d floating tensor in [0, 1] (see ``check_step_scalar``)."""
    return check_step_scalar(
        smoothing, "smoothing", "in [0, 1]", lambda t: t.clamp(0, 1) == t, check_probability
    )


@torch.no_grad()
def compute_ema(
    model: nn.Module,
    ema_model: nn.Module | MutableMapping[str, torch.Tensor],
    smoothing: float | torch.Tensor = 0.99,
    *,
    train_with_ema_weights: bool = False,
    generator: torch.Generator | None = None,
) -> None:
    r"""Move ``ema_model``'s weights towards ``model``'s, in place (exponential moving average).

    For every floating parameter and buffer, matched by name:

    .. math::
        w_\text{ema} \leftarrow s\, w_\text{ema} + (1 - s)\, w_\text{model}

    computed as one fused multi-tensor kernel per (device, dtype) group: ``torch._foreach_lerp_``
    for a number, and for a 0-d tensor (whose value the host never reads) torch's fused SGD
    kernel, which reads its learning rate on the device (see ``_fused_lerp_``). Integer buffers
    (e.g. BatchNorm's ``num_batches_tracked``) are copied. The EMA may be kept in another dtype
    or on another device than the model (e.g. float32 EMA of a bfloat16 model).

    **Low precision.** In a bfloat16 or float16 EMA, an update :math:`(1 - s)(w_\text{model}
    - w_\text{ema})` smaller than half a unit in the last place of :math:`w_\text{ema}` rounds
    away: at :math:`s = 0.999` a bfloat16 EMA does not move at all (a float32 one moves 26% of
    the way in 300 steps), and at :math:`s = 0.99` it stops once the model is within 20-40%
    of it (relative). Two fixes:

    - keep the EMA in float32 (``ema = copy.deepcopy(model).float()``, or a state dict of
      float32 tensors): exact, at twice the memory of a bfloat16 EMA; evaluate by loading it
      (:func:`swap_ema_weights` needs the same dtype on both sides);
    - or pass ``generator=``: each low-precision EMA tensor is then updated in float32 and
      rounded *stochastically* back (to one of its two neighbours, with the probabilities that
      make the rounding unbiased), so the EMA follows the float32 EMA on average, with a noise of
      a few units in the last place; it costs float32 temporaries the size of the largest tensor
      and a few kernels per tensor. Randomness comes only from ``generator``, which must be on
      the EMA's device; save its state with the checkpoint (``generator.get_state()``) to
      resume bit for bit. Dynamo does not trace generators: call it with ``generator=``
      outside ``torch.compile(fullgraph=True)`` regions.

    Without ``generator``, a low-precision EMA is updated with round-to-nearest and a
    ``UserWarning`` names both fixes (Python shows it once per call site).

    The pairing of the two sides is derived on every call from the modules as they are (a
    walk over both module trees, no cache and no hidden state), so a replaced tensor, a
    ``.data`` edit or a model moved with ``.to()`` is always seen; the walk costs a few
    microseconds per module, small next to the update itself.

    ``model`` and ``ema_model`` may be wrapped in ``DistributedDataParallel`` or
    ``torch.compile`` (their inner modules are used) or sharded with FSDP2's ``fully_shard``
    (every rank updates its local shards, no communication). ``ema_model`` may also be a dict
    of tensors, updated in place; non-persistent buffers, which a state dict leaves out, are
    then skipped. Between two modules, a non-persistent buffer is a cache (ALiBi's bias
    tables, built on the first forward): it is averaged where both hold one of the same shape
    and left alone where only one holds it, so an EMA copy made before the first forward
    keeps working. This is the light form of the EMA seed's ``ShadowModel`` (a copy that tracks
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
        generator: stochastic rounding of bfloat16 and float16 EMA tensors (see "Low
            precision" above); float32 and float64 EMA tensors ignore it.

    Raises:
        ValueError: if names or shapes do not match, or ``smoothing`` is out of range.
        TypeError: if ``generator`` is not a ``torch.Generator``.

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
    generator = check_generator(generator)
    pairs = _pairs(model, ema_model, "compute_ema")
    for (device, dtype), (ema_list, model_list, originals) in pairs.groups.items():
        if dtype in LOW_PRECISION and generator is not None:
            _lerp_stochastic_(ema_list, originals, _weight(smoothing, device), generator)
        else:
            if (
                dtype in LOW_PRECISION
                and not _is_end_point(smoothing)
                and not torch.compiler.is_compiling()
            ):
                _warn_round_to_nearest(dtype)
            _lerp_(ema_list, model_list, smoothing, device, dtype)
        if train_with_ema_weights:
            torch._foreach_copy_(originals, ema_list)
    if pairs.copies:
        ema_ints, model_ints = zip(*pairs.copies, strict=True)
        torch._foreach_copy_(list(ema_ints), list(model_ints))


def _is_end_point(smoothing: float | torch.Tensor) -> bool:
    """A number 0 (copy) or 1 (no change): no rounding to warn about."""
    return not isinstance(smoothing, torch.Tensor) and smoothing in (0.0, 1.0)


def _weight(smoothing: float | torch.Tensor, device: torch.device) -> float | torch.Tensor:
    """``1 - smoothing``, a float32 tensor on ``device`` if ``smoothing`` is a tensor."""
    if isinstance(smoothing, torch.Tensor):
        return 1.0 - smoothing.to(device, torch.float32)
    return 1.0 - smoothing


def _lerp_(
    ema_list: list[torch.Tensor],
    model_list: list[torch.Tensor],
    smoothing: float | torch.Tensor,
    device: torch.device,
    dtype: torch.dtype,
) -> None:
    """``ema ← lerp(ema, model, 1 - smoothing)`` over one (device, dtype) group, fused."""
    compiling = torch.compiler.is_compiling()
    if isinstance(smoothing, torch.Tensor):
        if not compiling and _fused_lerp_(ema_list, model_list, smoothing, device, dtype):
            return
        # Under compile inductor fuses the per-tensor weights; eagerly this is the fallback
        # (a kernel per tensor on CUDA).
        weight = (1.0 - smoothing).to(device=device, dtype=dtype)
        torch._foreach_lerp_(ema_list, model_list, [weight] * len(ema_list))
    elif compiling:
        # A float passed as a Scalar argument would be specialised (a recompile per value), and
        # so would Python arithmetic on it with dynamo of torch 2.6: added to a tensor first, it
        # stays a graph input on every release.
        weight = 1.0 - scalar_tensor(smoothing, dtype=dtype, device=device)
        torch._foreach_lerp_(ema_list, model_list, [weight] * len(ema_list))
    else:
        torch._foreach_lerp_(ema_list, model_list, 1.0 - smoothing)


def _fused_lerp_(
    ema_list: list[torch.Tensor],
    model_list: list[torch.Tensor],
    smoothing: torch.Tensor,
    device: torch.device,
    dtype: torch.dtype,
) -> bool:
    r"""The EMA step with a tensor ``smoothing`` as one multi-tensor kernel; False if not taken.

    ``torch._foreach_lerp_`` takes its weight as a host number or as one tensor per tensor
    (``[w] * n`` leaves the multi-tensor fast path: a kernel per tensor). The EMA step is one SGD
    step of learning rate :math:`1 - s` on :math:`\tfrac12\lVert w_\text{ema} -
    w_\text{model}\rVert^2`, and torch's fused SGD reads its learning rate from a device tensor:
    with the model as the "gradient", weight decay -1 and learning rate :math:`s - 1` it computes
    :math:`w_\text{ema} + (1 - s)(w_\text{model} - w_\text{ema})` in one pass, reading both
    sides once and writing the EMA once (float32 arithmetic for bfloat16 and float16, the
    product in double for float32), and writes nothing else. The kernel walks memory, so every
    pair must have the same strides and fill its memory densely, and the release's kernel must
    be right for the dtype (``fused_sgd_is_correct``: not float16/bfloat16 on the CPU before
    torch 2.14).
    """
    if dtype not in (torch.float32, *LOW_PRECISION) or not fused_sgd_is_correct(device, dtype):
        return False
    if not all(map(_same_dense_layout, ema_list, model_list)):
        return False
    lr = smoothing.to(torch.float32)
    lr = (lr if lr.device.type == "cpu" else lr.to(device)) - 1.0
    try:
        torch._fused_sgd_(
            ema_list,
            model_list,
            [],
            weight_decay=-1.0,
            momentum=0.0,
            lr=lr,
            dampening=0.0,
            nesterov=False,
            maximize=False,
            is_first_step=False,
        )
    except NotImplementedError:  # a backend without fused SGD: fails before any work
        return False
    return True
