"""Stochastic depth's model transform :func:`apply_stochastic_depth`: converts the registered
blocks in place, spreading the drop rate over them (``'linear'`` or ``'uniform'``) and giving
the model its generators."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from functional._args import check_bool, check_int, check_module, check_one_of, check_probability
from functional._policies import ModelT, clone_module_as, warn_no_effect
from functional.stochastic_depth.generators import _agreed_seed, _DropGenerators
from functional.stochastic_depth.layers import _METHODS
from functional.stochastic_depth.registry import STOCHASTIC_BLOCKS
from surgery import OptimizerArg, replace_module_classes

__all__ = ["apply_stochastic_depth"]

_DISTRIBUTIONS = ("uniform", "linear")


def apply_stochastic_depth(
    model: ModelT,
    stochastic_method: str,
    target_layer_name: str,
    drop_rate: float = 0.2,
    drop_distribution: str = "linear",
    use_same_gpu_seed: bool = True,
    optimizers: OptimizerArg = None,
    *,
    seed: int | None = None,
    skip_dropped: bool = True,
) -> ModelT:
    """Give the residual blocks of ``model`` stochastic depth, in place.

    Every block of the type registered as ``target_layer_name`` (exact type) is converted to
    its stochastic form, sharing its submodules and parameters. While training, block ``l``
    (1-based, in ``model.modules()`` order, of ``L``) drops its residual branch with
    probability

    .. math::
        p_l = p \\cdot \\tfrac{l}{L} \\ (\\texttt{'linear'}), \\qquad
        p_l = p \\ (\\texttt{'uniform'}),

    and scales a kept branch by :math:`1/(1-p_l)`, so the expected output is the deterministic
    one and evaluation computes exactly what the unmodified model computes. ``'block'`` drops
    the whole branch for the batch; ``'sample'`` drops it for each sample independently.

    Randomness: the transform gives the model its own random streams, keyed by ``seed``
    (default: derived from ``torch.initial_seed()``), by the block and by how many decisions
    the block has drawn. With ``use_same_gpu_seed=True`` the ``'block'`` decisions come from
    the same seed on every rank (rank 0's seed is broadcast once here when
    ``torch.distributed`` is initialised, so call this on every rank, after
    ``init_process_group``), and every rank drops the same blocks at every step; with
    ``False`` each rank's streams are keyed by (seed, rank), so ranks decide independently.
    ``'sample'`` decisions always come from the rank's own streams. Neither mode ever waits
    for the device.

    Checkpoints: each converted block saves its drop rate (as last set by
    :func:`set_stochastic_depth_drop_rate`), how many decisions it has drawn (on the host and on
    the device) and the seed in ``model.state_dict()`` (``<block>._extra_state``, a 5-element
    int64 tensor), so a model converted afresh (any ``seed``) that loads the state dict
    continues with exactly the decisions the uninterrupted run would have drawn, eager or
    under ``torch.compile``, on every rank, from a checkpoint saved on rank 0; torch's RNG
    state is not needed. A state dict without that state (of the unconverted model, or saved by an older
    version) still loads with ``strict=True``; the blocks then keep their rate and streams.
    To load a converted model's state dict into an unconverted model, drop the keys ending in
    ``._extra_state`` (or pass ``strict=False``).

    Activation checkpointing (``torch.utils.checkpoint``, reentrant or not, timm's
    ``set_grad_checkpointing()``): in eager mode, a block's recompute in the backward pass
    replays the decisions of the forward it repeats (found by its checkpoint region, so a
    block called several times before one backward, as with two augmented views or R-Drop,
    replays each forward's own), so the gradients equal those without checkpointing and the
    draw counts do not move. Under ``torch.compile`` a training forward inside a checkpointed
    region raises ``RuntimeError`` while tracing: torch's compiled recompute reads the draw
    counter after the forward advanced it, so its gradients would be wrong. Keep the
    checkpointed region eager (``torch.compiler.disable(region)``) or do not checkpoint the
    stochastic blocks of a compiled model.

    Two ways to decide in ``'block'`` mode:

    - eager mode with ``skip_dropped=True`` (default): the decision is drawn on the host (from
      a CPU stream, so no device read) before the branch runs, and a dropped branch is not
      computed at all: the step saves that branch's forward and backward. Wrap the model in
      ``DistributedDataParallel(..., find_unused_parameters=True)`` (a dropped branch's
      parameters get no gradient in that step).
    - under ``torch.compile`` (chosen automatically, ``torch.compiler.is_compiling()``) or
      with ``skip_dropped=False``: the decision is a 0-d device tensor ``m`` (0 or
      ``1/(1-p)``) and the block adds ``m · branch``; every branch runs (no saving), but the
      graph is one graph for every draw and every rate (no break, no recompile), all
      parameters get a (zero) gradient, and nothing depends on host values (CUDA graphs).

    The two paths differ only in what a dropped branch leaves behind: skipped, its BatchNorm
    statistics are not updated and its parameters get no gradient (``None``: momentum and
    weight decay skip them that step); multiplied by 0, its statistics are updated and its
    gradients are zero. A host decision cannot be traced: compiled, it would be drawn once and
    replayed at every step. Use the default in eager training (the saving grows with ``drop_rate``); under
    ``torch.compile`` the device decision is used whatever ``skip_dropped`` says (measured on
    a CPU ResNet in ``benchmarks/models.py``). Device decisions, eager or compiled, use no
    ``torch.Generator`` and none of torch's random state: they hash the block's keys and its
    count of device draws (a 0-d buffer the forward increments) with integer tensor
    operations, so they are the same eager and compiled, and the host decisions hash the same
    keys (a fresh eager run and a fresh compiled run drop the same blocks).

    timm: the blocks of timm's ResNets (``'TimmResNetBasicBlock'``, ``'TimmResNetBottleneck'``),
    ConvNeXt (``'TimmConvNeXtBlock'``), ViT and DeiT (``'TimmViTBlock'``: its two residual
    branches decide independently, at the block's rate), EfficientNet
    (``'TimmInvertedResidual'``, ``'TimmDepthwiseSeparableConv'``, ``'TimmEdgeResidual'``) and
    RegNet (``'TimmRegNetBottleneck'``) are built-in entries of :data:`STOCHASTIC_BLOCKS` once
    ``timm`` is imported. Their ``drop_path`` modules (timm's own ``DropPath`` at the rate the
    model was built with, or ``Identity``) are replaced by ones that apply this transform's
    decisions; everything above holds for them, except that timm computes a branch before its
    ``drop_path`` runs, so a dropped branch saves its backward only.

    Deployment: in evaluation mode the transformed model exports with
    ``torch.export.export`` (outputs equal eager), and with torchvision's blocks it scripts
    with ``torch.jit.script(model.eval())`` (the scripted model is the evaluation forward;
    scripting in training mode is refused). timm's and registered blocks refuse scripting
    with a ``TypeError`` naming ``torch.export`` and the unconverted model loaded with these
    weights (evaluation computes the same).

    Args:
        model: the model to change in place.
        stochastic_method: ``'block'`` or ``'sample'``.
        target_layer_name: a key of :data:`STOCHASTIC_BLOCKS`: ``'ResNetBottleneck'``,
            ``'ResNetBasicBlock'`` (torchvision), a timm block (above) or one added by
            :func:`register_stochastic_block`.
        drop_rate: the base drop probability ``p`` in [0, 1] (at 1 the branch never
            contributes while training).
        drop_distribution: ``'linear'`` or ``'uniform'``.
        use_same_gpu_seed: same block decisions on every rank (``True``) or independent ones.
        optimizers: accepted for uniformity; every parameter is kept, so they need no change.
        seed: the seed of the drop decisions (keyword only).
        skip_dropped: eager ``'block'`` mode skips dropped branches (``True``) or multiplies
            them by a device decision (``False``) (keyword only; see above).

    Returns:
        ``model``, changed in place.

    Warns:
        surgery.NoEffectWarning: when the model has no block of that type.

    Example:
        >>> from torchvision.models import resnet50
        >>> model = apply_stochastic_depth(resnet50(), "block", "ResNetBottleneck", drop_rate=0.2)
        >>> round(model.layer4[-1].drop_rate, 3), round(model.layer1[0].drop_rate, 4)
        (0.2, 0.0125)

    Reference:
        Huang, Sun, Liu, Sedra and Weinberger, "Deep Networks with Stochastic Depth", ECCV 2016.
    """
    check_module(model)
    if (
        isinstance(stochastic_method, str)
        and stochastic_method in STOCHASTIC_BLOCKS
        and target_layer_name in _METHODS
    ):
        raise ValueError(
            f"stochastic_method must be one of {', '.join(map(repr, _METHODS))}; got "
            f"{stochastic_method!r} and target_layer_name={target_layer_name!r}: the two look "
            "swapped. Composer's order is (model, target_layer_name, stochastic_method), this "
            "one's (model, stochastic_method, target_layer_name): pass both by keyword"
        )
    check_one_of(stochastic_method, "stochastic_method", _METHODS)
    if not isinstance(target_layer_name, str):
        raise TypeError(f"target_layer_name must be a str, got {type(target_layer_name).__name__}")
    if target_layer_name not in STOCHASTIC_BLOCKS:
        options = ", ".join(repr(name) for name in sorted(STOCHASTIC_BLOCKS))
        raise ValueError(
            f"target_layer_name must be one of {options}; got {target_layer_name!r}. To convert "
            "another residual block, register it first: F.register_stochastic_block(name, "
            "BlockClass, StochasticBlockClass), where StochasticBlockClass subclasses "
            "F.StochasticBlock and BlockClass and scales its branch with self.drop_branch"
        )
    drop_rate = check_probability(drop_rate, "drop_rate")
    check_one_of(drop_distribution, "drop_distribution", _DISTRIBUTIONS)
    check_bool(use_same_gpu_seed, "use_same_gpu_seed")
    check_bool(skip_dropped, "skip_dropped")
    if seed is not None:
        seed = check_int(seed, "seed", minimum=0)

    target, stochastic = STOCHASTIC_BLOCKS[target_layer_name]
    count = sum(1 for m in model.modules() if type(m) is target)
    if count == 0:
        warn_no_effect(
            "apply_stochastic_depth", f"{target.__module__}.{target.__qualname__} blocks"
        )
        return model
    generators = _DropGenerators(_agreed_seed(seed), shared=use_same_gpu_seed)
    share_of: Callable[[int], float]
    if drop_distribution == "linear":
        share_of = lambda index: (index + 1) / count  # noqa: E731
    else:
        share_of = lambda index: 1.0  # noqa: E731

    def convert(block: nn.Module, index: int) -> nn.Module:
        new = clone_module_as(block, stochastic)
        share = share_of(index)
        new._init_stochastic(
            min(drop_rate * share, 1.0),
            stochastic_method,
            generators,
            share=share,
            skip_dropped=skip_dropped,
            index=index,
        )
        return new

    replace_module_classes(model, {target: convert}, optimizers=optimizers, exact_type=True)
    return model
