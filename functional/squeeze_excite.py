"""Squeeze-and-Excitation (Hu et al. 2018): channel attention after convolutions.

:class:`SqueezeExcite2d` is the block; :class:`SqueezeExciteConv2d` is an ``nn.Conv2d`` followed
by one, keeping the convolution's parameter names so checkpoints keep loading; ``apply_se`` (alias
``apply_squeeze_excite``) adds blocks after the wide convolutions of a model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from functional._args import check_int, check_module
from functional._composition import (
    composite_parts,
    decorate,
    inside_composites,
    layer_kind,
    with_last_part,
)
from functional._policies import (
    ModelT,
    NoEffectReport,
    clone_module_as,
    latent_size,
    settle_new_parameters,
)
from surgery import OptimizerArg, as_optimizer_list, fill_missing_entries, replace_module_classes

__all__ = ["SqueezeExcite2d", "SqueezeExciteConv2d", "apply_se", "apply_squeeze_excite"]


class SqueezeExcite2d(nn.Module):
    """Squeeze-and-Excitation block: rescale each channel by a gate computed from all channels.

    .. math::
        s = \\operatorname{mean}_{h,w} x, \\qquad
        a = \\sigma\\big(W_2\\,\\mathrm{ReLU}(W_1 s + b_1) + b_2\\big), \\qquad
        y_{c,h,w} = a_c\\,x_{c,h,w}

    Args:
        num_features: channels of the input.
        latent_channels: width of the hidden layer; a value below 1 is a fraction of
            ``num_features`` (rounded down, at least 1).

    Shape:
        - Input: (B, C, H, W)
        - Output: (B, C, H, W)

    Example:
        >>> se = SqueezeExcite2d(16, latent_channels=0.25)
        >>> se.fc1.out_features, se(torch.randn(2, 16, 5, 5)).shape
        (4, torch.Size([2, 16, 5, 5]))

    Autocast:
        Under ``torch.autocast`` the two linear layers run in the autocast dtype (as
        ``nn.Linear`` does), the mean over the plane in the input's dtype, and the output has the
        promoted dtype of the input and the gate: the autocast dtype when the input comes from an
        autocast convolution (the usual case), the input's dtype for a float32 input.

    Reference:
        Hu, Shen, Albanie, Sun and Wu, "Squeeze-and-Excitation Networks", CVPR 2018.
    """

    def __init__(
        self, num_features: int, latent_channels: float = 0.125, *, device=None, dtype=None
    ) -> None:
        super().__init__()
        num_features = check_int(num_features, "num_features", minimum=1)
        latent = latent_size(latent_channels, "latent_channels", num_features)
        self.fc1 = nn.Linear(num_features, latent, device=device, dtype=dtype)
        self.fc2 = nn.Linear(latent, num_features, device=device, dtype=dtype)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        squeezed = input.mean(dim=(2, 3))
        gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(squeezed))))
        return input * gate[:, :, None, None]


class SqueezeExciteConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` followed by a :class:`SqueezeExcite2d` on its output.

    A subclass of ``nn.Conv2d``: the convolution's ``weight`` and ``bias`` keep their
    state_dict keys and the block's parameters are added under ``se.*``. A checkpoint of the
    plain convolution loads after :func:`surgery.remap_state_dict` (which fills in the block's
    current values); one saved afterwards loads into the plain model with ``strict=False``.

    Args:
        *args, **kwargs: the ``nn.Conv2d`` arguments (none with ``conv``).
        latent_channels: the block's hidden width (fraction of ``out_channels`` when < 1).
        conv: an existing ``nn.Conv2d`` to put the block after, as in Composer's
            ``SqueezeExciteConv2d(conv=conv)``: its Parameters, buffers and settings are shared,
            not copied (the same as :meth:`from_conv2d`); then pass no other ``nn.Conv2d``
            argument.

    Shape:
        - Input: (B, C_in, H, W)
        - Output: (B, C_out, H_out, W_out), as the plain convolution.

    Autocast:
        The convolution follows autocast's rule for ``conv2d`` (the autocast dtype), then the
        block runs as :class:`SqueezeExcite2d` describes: output in the autocast dtype.

    Example:
        >>> conv = SqueezeExciteConv2d(8, 16, 3, padding=1, latent_channels=4)
        >>> conv(torch.randn(2, 8, 6, 6)).shape
        torch.Size([2, 16, 6, 6])
        >>> plain = nn.Conv2d(8, 16, 3)
        >>> SqueezeExciteConv2d(conv=plain, latent_channels=4).weight is plain.weight
        True

    Reference:
        Hu, Shen, Albanie, Sun and Wu, "Squeeze-and-Excitation Networks", CVPR 2018.
    """

    if TYPE_CHECKING:  # not a runtime annotation: TorchScript cannot read string ones
        se: SqueezeExcite2d

    # A decoration of nn.Conv2d (functional/_composition.py): other transforms see through it;
    # it wraps a blurred convolution, and goes on the last factor when factorized.
    _decorates = nn.Conv2d
    _decoration_rank = 2
    _decoration_side = "output"

    def __init__(
        self, *args, latent_channels: float = 0.125, conv: nn.Conv2d | None = None, **kwargs
    ) -> None:
        if conv is None:
            super().__init__(*args, **kwargs)
        else:
            if not isinstance(conv, nn.Conv2d):
                raise TypeError(f"conv must be an nn.Conv2d or None, got {type(conv).__name__}")
            if args or kwargs:
                given = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
                raise TypeError(
                    "SqueezeExciteConv2d takes either nn.Conv2d arguments or conv=, not both; "
                    f"got conv and {', '.join(given)}"
                )
            self.__dict__.update(clone_module_as(conv, type(self)).__dict__)
        self._init_se(latent_channels)

    def _init_se(self, latent_channels: float) -> None:
        self.se = SqueezeExcite2d(
            self.out_channels,
            latent_channels,
            device=self.weight.device,
            dtype=self.weight.dtype,
        )

    @classmethod
    def from_conv2d(
        cls, conv: nn.Conv2d, module_index: int | None = None, latent_channels: float = 0.125
    ) -> SqueezeExciteConv2d:
        """A ``SqueezeExciteConv2d`` sharing ``conv``'s Parameters; only the block is new.

        A convolution another transform made (blurred, weight-standardized) keeps what that
        transform added: the result is both.
        ``module_index`` is unused: it makes the method a surgery policy ``(module, index)``.
        """
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"conv must be an nn.Conv2d, got {type(conv).__name__}")
        new = decorate(conv, cls)
        new._init_se(latent_channels)
        return new

    @classmethod
    def _carry_onto(cls, source: SqueezeExciteConv2d, conv: nn.Conv2d) -> SqueezeExciteConv2d:
        """``source``'s block (the same module, with its trained parameters) after ``conv``."""
        new = decorate(conv, cls)
        new.se = source.se
        return new

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.se(self._conv_forward(input, self.weight, self.bias))  # scriptable

    def surgery_remap_state_dict(self, state_dict: dict[str, torch.Tensor], prefix: str) -> None:
        """Give a checkpoint of the plain convolution the block's current parameters."""
        if prefix + "weight" in state_dict:
            fill_missing_entries(
                state_dict, self, prefix, [k for k in self.state_dict() if k.startswith("se.")]
            )


def apply_se(
    model: ModelT,
    latent_channels: float = 64,
    min_channels: int = 128,
    optimizers: OptimizerArg = None,
) -> ModelT:
    """Add a Squeeze-and-Excitation block after every wide ``nn.Conv2d`` of ``model``, in place.

    Each ``nn.Conv2d`` with ``min(in_channels, out_channels) >= min_channels`` becomes a
    :class:`SqueezeExciteConv2d` that shares the convolution's Parameters (pretrained weights,
    optimizer state and state_dict keys are kept); only the block's two linear layers are new,
    with PyTorch's default initialisation, and they join the optimizer param group of the
    convolution's weight. Convolutions other transforms made are converted too and stay what
    they were (a blurred or weight-standardized convolution gets a block as well); a factorized
    convolution is one convolution here: the block follows its last factor when the whole layer
    is wide enough. Subclasses of ``nn.Conv2d`` with a forward of their own are left alone and
    named in a ``NoEffectWarning``. Convolutions that already have a block are left as they
    are, so the transform is idempotent.

    Frozen and partly optimized models (fine-tuning a frozen backbone): the new block of a
    convolution takes the frozen state of the convolution's ``weight``. After a frozen
    convolution (``requires_grad=False``) the block is frozen too and joins no optimizer, so the
    frozen part stays frozen (and ``requires_grad``-filtered optimizers built afterwards skip it);
    as the block starts random, a ``UserWarning`` names those layers and says how to train their
    blocks instead. When ``optimizers`` are passed and none of them holds a trainable
    convolution's parameters, its block could join no param group: a ``UserWarning`` names it
    (its parameters stay trainable, for an optimizer you add them to). Convolutions of a frozen
    backbone are often narrow enough to skip with ``min_channels``.

    Deployment: in evaluation mode the transformed model exports with
    ``torch.export.export`` and scripts with ``torch.jit.script``, with the outputs of eager.

    Args:
        model: the model to change in place.
        latent_channels: hidden width of each block; below 1, a fraction of the convolution's
            output channels.
        min_channels: only convolutions at least this wide in both directions get a block
            (deeper, narrower-in-space layers, where the block is cheap).
        optimizers: optimizers holding ``model``'s parameters; the new parameters are added.

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when no convolution is wide enough.

    Example:
        >>> from torchvision.models import resnet18
        >>> model = apply_se(resnet18(), latent_channels=0.25, min_channels=256)
        >>> sum(isinstance(m, SqueezeExciteConv2d) for m in model.modules())
        8

    Reference:
        Hu, Shen, Albanie, Sun and Wu, "Squeeze-and-Excitation Networks", CVPR 2018.
    """
    check_module(model)
    latent_size(latent_channels, "latent_channels", 1)  # validates the value
    min_channels = check_int(min_channels, "min_channels", minimum=0)

    names = {id(m): name for name, m in model.named_modules()}
    inside = inside_composites(model)
    skipped: list[str] = []
    already: list[str] = []

    def wide(conv: Any) -> bool:  # an nn.Conv2d, or a composite with the same two sizes
        return min(int(conv.in_channels), int(conv.out_channels)) >= min_channels

    def convert(module: nn.Module, _index: int) -> nn.Module | None:
        parts = composite_parts(module)
        if parts is not None and isinstance(parts[1], nn.Conv2d):
            # a factorized convolution: the block goes after its last part
            if isinstance(parts[1], SqueezeExciteConv2d):
                already.append(names[id(module)])
            elif layer_kind(parts[1], nn.Conv2d) and wide(module):
                block = SqueezeExciteConv2d.from_conv2d(parts[1], latent_channels=latent_channels)
                return with_last_part(module, block)
            return None
        if not isinstance(module, nn.Conv2d) or id(module) in inside:
            return None
        if isinstance(module, SqueezeExciteConv2d):
            already.append(names[id(module)])
        elif not layer_kind(module, nn.Conv2d):
            skipped.append(f"{names[id(module)]} ({type(module).__name__})")
        elif wide(module):
            return SqueezeExciteConv2d.from_conv2d(module, latent_channels=latent_channels)
        return None

    opts = as_optimizer_list(optimizers)
    replaced = replace_module_classes(model, {nn.Module: convert}, optimizers=opts)
    settle_new_parameters(names, replaced, opts, "apply_se", new_function=True)
    report = NoEffectReport(
        "apply_se",
        f"nn.Conv2d with min(in_channels, out_channels) >= {min_channels}",
        skipped=(
            "changed nothing: it left these convolutions unchanged, subclasses of nn.Conv2d "
            "with a forward of their own that no transform of this library made: {names}"
        ),
    )
    report.warn(
        changed=bool(replaced),
        skipped=() if replaced else skipped,
        already=(
            f"its {len(already)} wide convolution(s) already have a squeeze-excite block"
            if already
            else None
        ),
    )
    return model


apply_squeeze_excite = apply_se
