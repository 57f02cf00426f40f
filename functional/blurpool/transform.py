"""BlurPool's model transform :func:`apply_blurpool`: which convolutions and max-pools it converts
and how it reports what it found."""

from __future__ import annotations

from torch import nn

from functional._args import check_bool, check_int, check_module
from functional._composition import layer_kind
from functional._policies import ModelT, replace_chosen
from functional.blurpool.layers import BlurConv2d, BlurMaxPool2d
from surgery import OptimizerArg

__all__ = ["apply_blurpool"]


def _is_strided(stride: int | tuple[int, ...]) -> bool:
    return (max(stride) if isinstance(stride, tuple) else stride) > 1


def apply_blurpool(
    model: ModelT,
    replace_convs: bool = True,
    replace_maxpools: bool = True,
    blur_first: bool = True,
    min_channels: int = 16,
    optimizers: OptimizerArg = None,
) -> ModelT:
    """Add anti-aliasing filters to the strided convolutions and max-pools of ``model``, in place.

    Every ``nn.Conv2d`` with a stride above 1 and at least ``min_channels`` input channels
    becomes a :class:`BlurConv2d` and every ``nn.MaxPool2d`` with a stride above 1 becomes a
    :class:`BlurMaxPool2d`. The replacements reuse the original ``Parameter`` objects, so
    pretrained weights, optimizer state and state_dict keys are all kept. Plain
    ``nn.Conv2d``/``nn.MaxPool2d`` layers are converted, and so are the convolutions other
    transforms made, which stay what they were as well (a squeeze-excited or
    weight-standardized convolution becomes a blurred one too; the kernel factor of a
    factorized convolution, which holds the stride, is blurred); subclasses with a forward of
    their own are left alone and named in a ``NoEffectWarning``. Layers already blurred are
    left as they are, which makes the transform idempotent. Max-pools with ``return_indices=True`` are skipped
    (a blurred max has no indices); ``ceil_mode=True`` pools are converted, and keep their
    output size exactly (see :func:`blurmax_pool2d`).

    Deployment: in evaluation mode the transformed model exports with
    ``torch.export.export`` (outputs equal eager); ``torch.jit.script`` cannot compile
    its new layers and raises a ``TypeError`` naming ``torch.export``.

    Args:
        model: the model to change in place.
        replace_convs: convert strided convolutions.
        replace_maxpools: convert strided max-pools.
        blur_first: for convolutions, blur before (cheap) or after (the paper's order, about
            ``stride²`` times the convolution's cost) the convolution; see :class:`BlurConv2d`.
        min_channels: convolutions with fewer input channels are skipped (by default the RGB
            stem, where blurring the raw image mostly costs time).
        optimizers: optimizers holding ``model``'s parameters (kept consistent; nothing is added
            or removed, since every parameter survives).

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when no eligible convolution or max-pool was found.

    Example:
        >>> from torchvision.models import resnet18
        >>> model = apply_blurpool(resnet18())
        >>> sum(isinstance(m, BlurConv2d) for m in model.modules())
        6

    Reference:
        Zhang, "Making Convolutional Networks Shift-Invariant Again", ICML 2019.
    """
    check_module(model)
    check_bool(replace_convs, "replace_convs")
    check_bool(replace_maxpools, "replace_maxpools")
    check_bool(blur_first, "blur_first")
    min_channels = check_int(min_channels, "min_channels", minimum=0)

    names = {id(m): name for name, m in model.named_modules()}
    skipped: list[str] = []

    def convert_conv(conv: nn.Module, _index: int) -> nn.Module | None:
        assert isinstance(conv, nn.Conv2d)
        if isinstance(conv, BlurConv2d) or not _is_strided(conv.stride):
            return None
        if not layer_kind(conv, nn.Conv2d):
            skipped.append(f"{names[id(conv)]} ({type(conv).__name__})")
            return None
        if conv.in_channels < min_channels:
            return None
        return BlurConv2d.from_conv2d(conv, blur_first=blur_first)

    def convert_pool(pool: nn.Module, _index: int) -> nn.Module | None:
        assert isinstance(pool, nn.MaxPool2d)
        if isinstance(pool, BlurMaxPool2d) or pool.return_indices or not _is_strided(pool.stride):
            return None
        if not layer_kind(pool, nn.MaxPool2d):
            skipped.append(f"{names[id(pool)]} ({type(pool).__name__})")
            return None
        return BlurMaxPool2d.from_maxpool2d(pool)

    replace_chosen(
        model,
        "apply_blurpool",
        [
            (
                replace_convs,
                nn.Conv2d,
                convert_conv,
                f"strided nn.Conv2d with in_channels >= {min_channels}",
            ),
            (
                replace_maxpools,
                nn.MaxPool2d,
                convert_pool,
                "strided nn.MaxPool2d (return_indices=False)",
            ),
        ],
        optimizers,
        none_chosen="layer to convert (replace_convs and replace_maxpools are both False)",
        skipped=skipped,
    )
    return model
