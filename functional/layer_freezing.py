"""Progressive layer freezing (FreezeOut, Brock et al. 2017; Freeze Training, Raghu et al. 2017)."""

from __future__ import annotations

from torch import nn
from torch.nn.modules.batchnorm import _NormBase

from functional._args import check_in_range, check_int, check_module
from functional._policies import warn_no_effect
from surgery import OptimizerArg, as_optimizer_list, update_params_in_optimizer

__all__ = ["freeze_layers"]

_ROUNDING_SLACK = 1e-9


def _freeze_fraction(progress: float, freeze_start: float, freeze_level: float) -> float:
    if progress <= freeze_start or freeze_start >= 1.0:
        return 0.0
    return freeze_level * (progress - freeze_start) / (1.0 - freeze_start)


def _keep_in_eval(module: nn.Module, _args: object) -> None:
    """Forward pre-hook of a frozen normalization layer: run it in eval mode whatever
    ``model.train()`` set, so it normalizes with, and never updates, its running statistics."""
    module.training = False


def _freeze_norm_statistics(module: nn.Module) -> None:
    if not isinstance(module, _NormBase) or not module.track_running_stats:
        return
    module.training = False
    if _keep_in_eval not in module._forward_pre_hooks.values():
        module.register_forward_pre_hook(_keep_in_eval)


def _progress(current_epoch: object, max_epochs: object, current_duration: object) -> float:
    """Training progress from exactly one of the two forms: epochs, or Composer's duration."""
    if current_duration is not None:
        if current_epoch is not None or max_epochs is not None:
            raise TypeError(
                "freeze_layers takes either current_epoch and max_epochs (the epoch form) or "
                "current_duration (Composer's fraction of training), not both; got "
                f"current_epoch={current_epoch!r}, max_epochs={max_epochs!r}, "
                f"current_duration={current_duration!r}"
            )
        return check_in_range(current_duration, "current_duration", 0.0, 1.0)
    if max_epochs is None:
        hint = (
            f"; for a fraction of training pass current_duration={current_epoch!r}"
            if isinstance(current_epoch, float)
            else ""
        )
        raise TypeError(
            "freeze_layers needs current_epoch and max_epochs (ints), or current_duration= "
            f"(a float in [0, 1]); got current_epoch={current_epoch!r}, max_epochs=None{hint}"
        )
    max_epochs = check_int(max_epochs, "max_epochs", minimum=1)
    current_epoch = check_int(current_epoch, "current_epoch", minimum=0)
    if current_epoch > max_epochs:
        raise ValueError(f"current_epoch must be <= max_epochs ({max_epochs}), got {current_epoch}")
    return current_epoch / max_epochs


def freeze_layers(
    model: nn.Module,
    optimizers: OptimizerArg,
    current_epoch: int | None = None,
    max_epochs: int | None = None,
    freeze_start: float = 0.5,
    freeze_level: float = 1.0,
    *,
    current_duration: float | None = None,
    logger: object | None = None,
) -> tuple[int, float]:
    """Freeze the first layers of ``model``, more of them as training progresses, in place.

    Progress comes in one of two forms: ``current_epoch / max_epochs`` (the epoch form), or
    ``current_duration``, the fraction of training done (Composer's form,
    ``freeze_layers(model, optimizers, current_duration=0.6)``). Give exactly one form: both,
    or neither, is a ``TypeError`` (so is Composer's positional fraction
    ``freeze_layers(model, opt, 0.6)``: pass it as ``current_duration=0.6``). With that
    ``progress``, the fraction of layers to freeze is

    .. math::
        f = \\begin{cases} 0 & \\text{progress} \\le s \\\\
        \\ell\\,\\frac{\\text{progress} - s}{1 - s} & \\text{otherwise} \\end{cases}

    (``s = freeze_start``, ``ℓ = freeze_level``), and the first ``floor(f · L)`` of the ``L``
    layers are frozen. A *layer* is a module that owns parameters directly
    (``module.parameters(recurse=False)`` is not empty), taken in ``model.modules()``
    (registration) order, so containers never count and a module holding its own parameters
    next to its children (a class token, a position embedding) does.

    Freezing a layer sets ``requires_grad=False`` on its parameters, drops their ``.grad``,
    and removes them from every optimizer together with their state (momentum, Adam moments),
    so weight decay and momentum stop moving them and ``optimizer.state_dict()`` stays
    consistent. A frozen normalization layer that tracks running statistics (BatchNorm,
    InstanceNorm with ``track_running_stats``) is put in eval mode, and a forward pre-hook keeps
    it there even after ``model.train()``: it normalizes with its running statistics and never
    updates them, so the frozen part of the network computes a fixed function. Layers stay
    frozen on later calls; call once per epoch.

    Args:
        model: the model being trained.
        optimizers: the optimizer(s) holding the model's parameters (or ``None``).
        current_epoch: the number of epochs completed, ``0 <= current_epoch <= max_epochs``.
        max_epochs: the total number of epochs (>= 1).
        current_duration: instead of the two above, the fraction of training done, in
            ``[0, 1]`` (Composer's argument).
        freeze_start: the progress in [0, 1] at which freezing begins.
        freeze_level: the fraction in [0, 1] of layers frozen at the end of training.
        logger: accepted for portability from Composer's ``freeze_layers(..., logger)``.
            ``None`` (the default) logs nothing; otherwise any object with a
            ``log_metrics(dict)`` method (Composer's ``Logger``, a small adapter around
            wandb/TensorBoard) receives ``{"layer_freezing/layers_frozen": n_frozen,
            "layer_freezing/percentage_frozen": frozen_fraction}`` once per call. The
            returned ``(n_frozen, frozen_fraction)`` carries the same figures.

    Returns:
        ``(n_frozen, frozen_fraction)``: the number of frozen layers and the scheduled fraction.

    Warns:
        surgery.NoEffectWarning: when the model has no parameters at all.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(4)])
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> freeze_layers(model, opt, current_epoch=3, max_epochs=4, freeze_start=0.5)
        (2, 0.5)
        >>> len(opt.param_groups[0]["params"]), model[0].weight.requires_grad
        (4, False)
        >>> freeze_layers(model, opt, current_duration=1.0, freeze_start=0.5)  # Composer's form
        (4, 1.0)

    Reference:
        Brock, Lim, Ritchie and Weston, "FreezeOut: Accelerate Training by Progressively
        Freezing Layers", arXiv:1706.04983.
    """
    check_module(model)
    opts = as_optimizer_list(optimizers)
    progress = _progress(current_epoch, max_epochs, current_duration)
    freeze_start = check_in_range(freeze_start, "freeze_start", 0.0, 1.0)
    freeze_level = check_in_range(freeze_level, "freeze_level", 0.0, 1.0)
    if logger is not None and not callable(getattr(logger, "log_metrics", None)):
        raise TypeError(
            "logger must be None or have a log_metrics(dict) method (e.g. Composer's Logger), "
            f"got {type(logger).__name__}"
        )

    layers = [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))]
    if not layers:
        warn_no_effect("freeze_layers", "modules with parameters to freeze")
        _log(logger, 0, 0.0)
        return 0, 0.0
    fraction = _freeze_fraction(progress, freeze_start, freeze_level)
    n_frozen = min(len(layers), int(fraction * len(layers) + _ROUNDING_SLACK))
    frozen = []
    for layer in layers[:n_frozen]:
        for param in layer.parameters(recurse=False):
            if param.requires_grad:
                param.requires_grad_(False)
            param.grad = None
            frozen.append(param)
        _freeze_norm_statistics(layer)
    if frozen and opts:
        update_params_in_optimizer(frozen, [], opts)
    _log(logger, n_frozen, fraction)
    return n_frozen, fraction


def _log(logger: object | None, n_frozen: int, fraction: float) -> None:
    if logger is not None:
        logger.log_metrics(  # type: ignore[attr-defined]
            {"layer_freezing/layers_frozen": n_frozen, "layer_freezing/percentage_frozen": fraction}
        )
