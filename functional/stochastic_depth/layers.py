"""Stochastic depth (Huang et al. 2016): randomly skip residual branches while training.

The stochastic blocks subclass the blocks they replace (torchvision's ``Bottleneck`` and
``BasicBlock``), so parameters and state_dict keys stay. A kept branch is scaled by
``1 / (1 - p)`` while training (inverted scaling), so evaluation computes exactly what the
unmodified model computes.

In eager mode, ``'block'`` decisions are drawn on the host, from a CPU generator the transform
gives the model, before the branch runs: a dropped branch is not computed at all (that is the
speed-up), and no decision ever waits for the device. Under ``torch.compile`` (or with
``skip_dropped=False``) the decision is a 0-d device tensor multiplying the branch, so the one
compiled graph draws fresh decisions at every step. ``'sample'`` decisions are a per-sample
mask drawn on the activations' device, so no block synchronises with the host either. Under
``DistributedDataParallel``, eager ``'block'`` needs ``find_unused_parameters=True`` (a dropped
branch's parameters get no gradient in that step); the device paths do not.

The drop rate of each block is also held in a 0-d int64 buffer, read by compiled graphs, so
:func:`set_stochastic_depth_drop_rate` (with the schedule :func:`stochastic_depth_drop_rate`,
the seed's ``drop_warmup``) changes it without recompiling.

Other residual blocks plug in through :func:`register_stochastic_block` (and leave through
:func:`unregister_stochastic_block`).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

from functional._args import check_bool, check_int, check_module, check_one_of, check_probability
from functional._policies import clone_module_as, warn_no_effect
from functional._registry import Registry
from surgery import OptimizerArg, replace_module_classes

__all__ = [
    "STOCHASTIC_BLOCKS",
    "StochasticBasicBlock",
    "StochasticBlock",
    "StochasticBottleneck",
    "apply_stochastic_depth",
    "register_stochastic_block",
    "set_stochastic_depth_drop_rate",
    "stochastic_depth_drop_rate",
    "unregister_stochastic_block",
]

_METHODS = ("block", "sample")
_DISTRIBUTIONS = ("uniform", "linear")
_SEED_MASK = (1 << 63) - 1


def _rank() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def _mix(seed: int, rank: int) -> int:
    """A rank-specific seed (SplitMix64 finaliser of seed and rank)."""
    z = (seed + 0x9E3779B97F4A7C15 * (rank + 1)) & ((1 << 64) - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return (z ^ (z >> 31)) & _SEED_MASK


def _agreed_seed(seed: int | None) -> int:
    """``seed``, or one seed shared by every rank: rank 0's, broadcast once when distributed."""
    if seed is None:
        seed = _mix(torch.initial_seed(), 0x5D)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        device = torch.device("cpu")
        if dist.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        box = torch.tensor([seed], dtype=torch.int64, device=device)
        dist.broadcast(box, src=0)
        seed = int(box.item())
    return seed & _SEED_MASK


class _DropGenerators:
    """The generators one stochastic model draws its decisions from, one per device.

    ``shared=True``: seeded with the same seed on every rank, so ranks that run the same blocks
    in the same order draw the same decisions. ``shared=False``: seeded per rank. Block
    decisions come from the host stream :meth:`host`; per-sample decisions always use the
    rank-specific device stream (different samples on every rank), which never disturbs the
    shared one.
    """

    def __init__(self, seed: int, *, shared: bool) -> None:
        self.seed = seed
        self.shared = shared
        self._generators: dict[tuple[str, bool], torch.Generator] = {}
        self._host: random.Random | None = None

    def host(self) -> random.Random:
        """The stream of ``'block'`` decisions, drawn on the host (created lazily, after the
        process group exists, so that the rank is known)."""
        if self._host is None:
            self._host = random.Random(self.seed if self.shared else _mix(self.seed, _rank()))
        return self._host

    def get(self, device: torch.device, *, shared: bool) -> torch.Generator:
        """The generator of ``device``: the shared stream, or this rank's own."""
        key = (str(device), shared)
        generator = self._generators.get(key)
        if generator is None:
            generator = torch.Generator(device=device)
            generator.manual_seed(self.seed if shared else _mix(self.seed, _rank()))
            self._generators[key] = generator
        return generator


# Drop rates are also kept on the device as an integer number of units of 2**-24 (the
# resolution of float32 uniforms), in a 0-d int64 buffer: compiled graphs read the rate from it
# (so a new rate is a new value, not a new graph), and ``model.to(torch.bfloat16)`` leaves it
# exact (dtype conversions touch floating buffers only).
_RATE_BITS = 24
_RATE_ONE = 1 << _RATE_BITS


def _rate_units(p: float) -> int:
    return round(p * _RATE_ONE)


class StochasticBlock(nn.Module):
    """Mixin for residual blocks with stochastic depth; see :func:`register_stochastic_block`.

    A subclass defines ``forward`` and scales its residual branch with :meth:`drop_branch`
    (or adds it to the shortcut with :meth:`add_branch`). The attributes ``drop_rate`` (in
    [0, 1]) and ``stochastic_method`` (``'block'`` or ``'sample'``) may be changed at any time;
    to warm the rate up from the training loop use :func:`set_stochastic_depth_drop_rate`.

    How a decision is made (see :func:`apply_stochastic_depth` for the trade-offs):

    - eager ``'block'`` with ``skip_dropped=True`` (default): drawn on the host from a CPU
      stream before the branch runs; a dropped branch is never computed. A host decision, not a
      device read: nothing waits for the device.
    - ``'block'`` under ``torch.compile``, or eager with ``skip_dropped=False``: a 0-d device
      tensor ``m`` (0 or ``1/(1-p)``) multiplies the branch, which always runs.
    - ``'sample'``: a ``(B, 1, ...)`` device tensor, drawn on the branch's device.

    Under ``torch.compile`` the rate is read from the 0-d buffer ``drop_rate_units`` (``p`` in
    units of ``2**-24``), so changing ``drop_rate`` never recompiles, and the draws come from
    torch's default generator of the device (dynamo cannot trace a ``torch.Generator``): seed it
    (``torch.manual_seed``) on every rank for reproducible or rank-shared decisions.
    """

    stochastic_method: str
    skip_dropped: bool
    drop_rate_units: torch.Tensor
    _drop_rate: float
    _drop_rate_share: float
    _drop_generators: _DropGenerators | None

    def _init_stochastic(
        self,
        drop_rate: float,
        stochastic_method: str,
        generators: _DropGenerators | None = None,
        *,
        share: float = 1.0,
        skip_dropped: bool = True,
    ) -> None:
        check_one_of(stochastic_method, "stochastic_method", _METHODS)
        check_bool(skip_dropped, "skip_dropped")
        device = next((t.device for t in (*self.parameters(), *self.buffers())), None)
        self.register_buffer(
            "drop_rate_units", torch.zeros((), dtype=torch.int64, device=device), persistent=False
        )
        self.drop_rate = drop_rate
        self.stochastic_method = stochastic_method
        self.skip_dropped = skip_dropped
        self._drop_rate_share = share
        self._drop_generators = generators

    @property
    def drop_rate(self) -> float:
        """This block's drop probability ``p`` in [0, 1]."""
        return self._drop_rate

    @drop_rate.setter
    def drop_rate(self, value: float) -> None:
        self._set_drop_rate(check_probability(value, "drop_rate"))

    def _set_drop_rate(self, p: float) -> None:
        """Store a checked rate: the float, and the device buffer when it changed."""
        if getattr(self, "_drop_rate", None) == p:
            return
        self._drop_rate = p
        units = self._buffers.get("drop_rate_units")
        if units is None:
            return
        if units.is_inference() and not torch.is_inference_mode_enabled():
            self._buffers["drop_rate_units"] = torch.full_like(units, _rate_units(p))
        else:
            with torch.no_grad():
                units.fill_(_rate_units(p))

    def block_scale(self) -> float | None:
        """This forward's eager ``'block'`` decision, drawn on the host: ``0.0`` (dropped) or
        ``1 / (1 - p)`` (kept); ``None`` outside training, at rate 0 or in ``'sample'`` mode."""
        if not self.training or self.stochastic_method != "block":
            return None
        p = self._drop_rate
        if p == 0:
            return None
        gens = self._drop_generators
        draw = gens.host().random() if gens is not None else float(torch.rand(()))
        if draw < p:
            return 0.0
        return 1.0 / (1.0 - p)

    def _generator(self, device: torch.device, *, shared: bool) -> torch.Generator | None:
        gens = self._drop_generators
        if gens is None or device.type == "meta":
            return None
        return gens.get(device, shared=shared and gens.shared)

    def sample_scale(self, branch: torch.Tensor) -> torch.Tensor | None:
        """The ``'sample'`` factors, a (B, 1, ...) tensor of 0 or ``1 / (1 - p)`` drawn on the
        branch's device; ``None`` outside training, at rate 0 or in ``'block'`` mode."""
        if not self.training or self.stochastic_method != "sample":
            return None
        if torch.compiler.is_compiling():
            return self.device_scale(branch)
        p = self._drop_rate
        if p == 0:
            return None
        generator = self._generator(branch.device, shared=False)
        shape = (branch.shape[0],) + (1,) * (branch.ndim - 1)
        keep = (torch.rand(shape, device=branch.device, generator=generator) >= p).to(branch.dtype)
        return keep * (1.0 / (1.0 - p)) if p < 1 else keep

    def device_scale(self, branch: torch.Tensor) -> torch.Tensor:
        """The drop factors as a device tensor, ``0`` or ``1 / (1 - p)`` in ``branch``'s dtype:
        0-d in ``'block'`` mode, ``(B, 1, ...)`` in ``'sample'`` mode.

        Reads ``p`` from the buffer ``drop_rate_units`` (never from the Python float), so a
        compiled graph does not specialise on the rate. Eager calls draw from the model's
        generator of the device; compiled ones from torch's default generator.
        """
        units = self.drop_rate_units.to(branch.device)
        block = self.stochastic_method == "block"
        shape = () if block else (branch.shape[0],) + (1,) * (branch.ndim - 1)
        generator = None
        if not torch.compiler.is_compiling():
            generator = self._generator(branch.device, shared=block)
        draw = torch.rand(shape, device=branch.device, generator=generator)
        keep = draw * _RATE_ONE >= units  # draws are multiples of 2**-24: exact
        scale = torch.where(keep, _RATE_ONE / (_RATE_ONE - units).to(draw.dtype), 0.0)
        return scale.to(branch.dtype)

    def _use_device_decision(self) -> bool:
        return torch.compiler.is_compiling() or (
            self.stochastic_method == "block" and not self.skip_dropped
        )

    def drop_branch(self, branch: torch.Tensor | Callable[[], torch.Tensor]) -> torch.Tensor | None:
        """``branch`` times its drop factor (``branch`` itself outside training).

        ``branch`` may be a zero-argument callable computing it: a block dropped in eager
        ``'block'`` mode then never calls it and returns ``None`` (nothing to add).
        """
        if self.training and self._use_device_decision():
            value = branch() if callable(branch) else branch
            return value * self.device_scale(value)
        block = self.block_scale()
        if block == 0.0:
            return None
        value = branch() if callable(branch) else branch
        if block is not None:
            return value * block
        scale = self.sample_scale(value)
        return value if scale is None else value * scale

    def add_branch(
        self, shortcut: torch.Tensor, branch: torch.Tensor | Callable[[], torch.Tensor]
    ) -> torch.Tensor:
        """``shortcut + factor * branch``, fused into one op while training.

        Pass ``branch`` as a zero-argument callable so that a dropped block skips computing it.
        """
        return self._add(shortcut, branch, in_place=False)

    def _add(
        self,
        shortcut: torch.Tensor,
        branch: torch.Tensor | Callable[[], torch.Tensor],
        *,
        in_place: bool,
    ) -> torch.Tensor:
        if self.training and self._use_device_decision():
            value = branch() if callable(branch) else branch
            return torch.addcmul(shortcut, value, self.device_scale(value))
        block = self.block_scale()
        if block == 0.0:
            return shortcut
        value = branch() if callable(branch) else branch
        scale = block if block is not None else self.sample_scale(value)
        if scale is None:
            if in_place:  # ``value`` is a fresh activation, as in torchvision's blocks
                value += shortcut
                return value
            return value + shortcut
        return (
            torch.add(shortcut, value, alpha=scale)
            if isinstance(scale, float)
            else torch.addcmul(shortcut, value, scale)
        )

    def extra_repr(self) -> str:
        return f"drop_rate={self.drop_rate:.4g}, stochastic_method={self.stochastic_method!r}"


class _TorchvisionResidual(StochasticBlock):
    """The constructor and forward of the stochastic torchvision ResNet blocks; a subclass,
    mixed in before the torchvision block, computes the residual branch in ``_branch``."""

    # The torchvision blocks' submodules (torchvision ships no type information).
    downsample: nn.Module | None
    relu: nn.Module

    def __init__(
        self,
        *args,
        drop_rate: float = 0.2,
        stochastic_method: str = "block",
        skip_dropped: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._init_stochastic(drop_rate, stochastic_method, skip_dropped=skip_dropped)

    def _branch(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        # not self.relu (in place): a dropped block returns relu(identity), and identity may be x
        return torch.relu(self._add(identity, lambda: self._branch(x), in_place=True))


class StochasticBottleneck(_TorchvisionResidual, Bottleneck):
    """torchvision's ResNet ``Bottleneck`` with stochastic depth on its residual branch.

    Training: ``relu(shortcut(x) + m · branch(x))`` with ``m = 0`` with probability ``p`` and
    ``1/(1-p)`` otherwise, per block (``'block'``) or per sample (``'sample'``); evaluation:
    exactly ``Bottleneck.forward``. See :func:`apply_stochastic_depth`.

    Args:
        *args, **kwargs: the ``Bottleneck`` arguments.
        drop_rate: probability ``p`` of dropping the branch.
        stochastic_method: ``'block'`` or ``'sample'``.
        skip_dropped: in eager ``'block'`` mode, decide on the host and skip a dropped branch
            (``True``) or multiply it by a device decision (``False``).

    Shape:
        - Input: (B, C_in, H, W)
        - Output: as ``Bottleneck``.

    Example:
        >>> block = StochasticBottleneck(64, 16, drop_rate=0.5)
        >>> block(torch.randn(2, 64, 8, 8)).shape
        torch.Size([2, 64, 8, 8])

    Reference:
        Huang, Sun, Liu, Sedra and Weinberger, "Deep Networks with Stochastic Depth", ECCV 2016.
    """

    conv1: nn.Conv2d
    bn1: nn.Module
    conv2: nn.Conv2d
    bn2: nn.Module
    conv3: nn.Conv2d
    bn3: nn.Module

    def _branch(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.bn3(self.conv3(out))


class StochasticBasicBlock(_TorchvisionResidual, BasicBlock):
    """torchvision's ResNet ``BasicBlock`` with stochastic depth on its residual branch.

    See :class:`StochasticBottleneck` and :func:`apply_stochastic_depth`.

    Shape:
        - Input: (B, C_in, H, W)
        - Output: as ``BasicBlock``.

    Example:
        >>> block = StochasticBasicBlock(8, 8, drop_rate=0.1, stochastic_method="sample")
        >>> block(torch.randn(2, 8, 5, 5)).shape
        torch.Size([2, 8, 5, 5])

    Reference:
        Huang, Sun, Liu, Sedra and Weinberger, "Deep Networks with Stochastic Depth", ECCV 2016.
    """

    conv1: nn.Conv2d
    bn1: nn.Module
    conv2: nn.Conv2d
    bn2: nn.Module

    def _branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))


def _check_block_entry(name: str, entry: tuple[type[nn.Module], type[StochasticBlock]]) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    target, stochastic = entry
    if not (isinstance(target, type) and issubclass(target, nn.Module)):
        raise TypeError(f"target must be an nn.Module subclass, got {target!r}")
    if not (
        isinstance(stochastic, type)
        and issubclass(stochastic, StochasticBlock)
        and issubclass(stochastic, target)
    ):
        raise TypeError(
            f"stochastic must subclass both StochasticBlock and {target.__name__}, got {stochastic!r}"
        )


STOCHASTIC_BLOCKS: Registry[str, tuple[type[nn.Module], type[StochasticBlock]]] = Registry(
    "stochastic block", check=_check_block_entry
)
"""``target_layer_name -> (block class, stochastic class)``, read like a dict; extend it with
:func:`register_stochastic_block`, shrink it with :func:`unregister_stochastic_block`."""
STOCHASTIC_BLOCKS.register("ResNetBottleneck", (Bottleneck, StochasticBottleneck))
STOCHASTIC_BLOCKS.register("ResNetBasicBlock", (BasicBlock, StochasticBasicBlock))


def register_stochastic_block(
    name: str, target: type[nn.Module], stochastic: type[StochasticBlock]
) -> None:
    """Make ``apply_stochastic_depth(model, method, name)`` convert ``target`` blocks.

    ``stochastic`` must subclass both :class:`StochasticBlock` and ``target``; the conversion
    shares the block's submodules, parameters and attributes (no copy, same state_dict keys)
    and sets ``drop_rate``/``stochastic_method``. Its ``forward`` scales the residual branch
    with ``self.drop_branch(branch)`` or adds it with ``self.add_branch(shortcut, branch)``;
    passing the branch as a zero-argument callable lets a dropped block skip computing it.
    Registering a name again replaces its entry; :func:`unregister_stochastic_block` removes it.

    Example:
        >>> class Residual(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.body = nn.Linear(4, 4)
        ...     def forward(self, x):
        ...         return x + self.body(x)
        >>> class StochasticResidual(StochasticBlock, Residual):
        ...     def forward(self, x):
        ...         return self.add_branch(x, lambda: self.body(x))
        >>> register_stochastic_block("Residual", Residual, StochasticResidual)
        >>> model = apply_stochastic_depth(nn.Sequential(Residual(), Residual()), "block", "Residual")
        >>> [round(m.drop_rate, 2) for m in model]
        [0.1, 0.2]
        >>> unregister_stochastic_block("Residual")
    """
    STOCHASTIC_BLOCKS.register(name, (target, stochastic), replace=True)


def unregister_stochastic_block(name: str) -> None:
    """Remove the entry ``name`` of :data:`STOCHASTIC_BLOCKS` (built-in ones included).

    Raises:
        ValueError: nothing is registered under ``name`` (the error is also a ``KeyError``).

    Example:
        >>> unregister_stochastic_block("NoSuchBlock")
        Traceback (most recent call last):
        ...
        functional._registry.NotRegisteredError: no stochastic block is registered for 'NoSuchBlock'
    """
    STOCHASTIC_BLOCKS.unregister(name)


def apply_stochastic_depth(
    model: nn.Module,
    stochastic_method: str,
    target_layer_name: str,
    drop_rate: float = 0.2,
    drop_distribution: str = "linear",
    use_same_gpu_seed: bool = True,
    optimizers: OptimizerArg = None,
    *,
    seed: int | None = None,
    skip_dropped: bool = True,
) -> nn.Module:
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

    Randomness: the transform gives the model one generator per device, seeded from ``seed``
    (default: derived from ``torch.initial_seed()``). With ``use_same_gpu_seed=True`` the
    ``'block'`` decisions come from the same seed on every rank (rank 0's seed is broadcast once
    here when ``torch.distributed`` is initialised, so call this on every rank, after
    ``init_process_group``), and every rank drops the same blocks at every step; with ``False``
    each rank's stream is seeded by (seed, rank), so ranks decide independently.
    ``'sample'`` decisions always come from the rank's own stream. Neither mode ever waits
    for the device.

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
    a CPU ResNet in ``benchmarks/models.py``). Compiled draws come from torch's default
    generator of the device (dynamo cannot trace a ``torch.Generator``), not from ``seed``.

    Args:
        model: the model to change in place.
        stochastic_method: ``'block'`` or ``'sample'``.
        target_layer_name: a key of :data:`STOCHASTIC_BLOCKS`: ``'ResNetBottleneck'``,
            ``'ResNetBasicBlock'`` (torchvision) or one added by
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
    check_one_of(stochastic_method, "stochastic_method", _METHODS)
    if not isinstance(target_layer_name, str):
        raise TypeError(f"target_layer_name must be a str, got {type(target_layer_name).__name__}")
    check_one_of(target_layer_name, "target_layer_name", sorted(STOCHASTIC_BLOCKS))
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
        assert isinstance(new, StochasticBlock)
        share = share_of(index)
        new._init_stochastic(
            min(drop_rate * share, 1.0),
            stochastic_method,
            generators,
            share=share,
            skip_dropped=skip_dropped,
        )
        return new

    replace_module_classes(model, {target: convert}, optimizers=optimizers, exact_type=True)
    return model


def stochastic_depth_drop_rate(
    progress: float, drop_rate: float = 0.2, drop_warmup: float = 0.0
) -> float:
    r"""The base drop rate of stochastic depth at a point of training (the seed's ``drop_warmup``).

    Rises linearly from 0 to ``drop_rate`` over the first ``drop_warmup`` fraction of
    training, then stays at ``drop_rate``:

    .. math::
        p(t) = p \cdot \min\!\Bigl(1, \frac{t}{w}\Bigr) \quad (w > 0), \qquad
        p(t) = p \quad (w = 0)

    Pass the result to :func:`set_stochastic_depth_drop_rate` from the training loop; the
    per-block distribution chosen in :func:`apply_stochastic_depth` is kept.

    Args:
        progress: fraction of training done, in ``[0, 1]``.
        drop_rate: the base drop rate after warm-up, in ``[0, 1]``.
        drop_warmup: fraction of training over which the rate warms up, in ``[0, 1]``
            (0: no warm-up).

    Returns:
        The base drop rate, in ``[0, drop_rate]``, non-decreasing in ``progress``.

    Example:
        >>> import functional as F
        >>> [F.stochastic_depth_drop_rate(t, 0.2, drop_warmup=0.5) for t in (0.0, 0.25, 0.5, 1.0)]
        [0.0, 0.1, 0.2, 0.2]
    """
    progress = check_probability(progress, "progress")
    drop_rate = check_probability(drop_rate, "drop_rate")
    drop_warmup = check_probability(drop_warmup, "drop_warmup")
    if drop_warmup == 0 or progress >= drop_warmup:
        return drop_rate
    return drop_rate * progress / drop_warmup


def set_stochastic_depth_drop_rate(model: nn.Module, drop_rate: float) -> int:
    """Set the base drop rate of a model converted by :func:`apply_stochastic_depth`, in place.

    Each stochastic block gets ``min(drop_rate · share, 1)``, where ``share`` is its place in
    the distribution chosen at conversion (``l / L`` for ``'linear'``, 1 for ``'uniform'``; 1
    for a block built directly). Meant to be called every step (for instance with
    :func:`stochastic_depth_drop_rate`): an unchanged rate costs a comparison per block, a new
    one a ``fill_`` of each block's 0-d buffer ``drop_rate_units``. A compiled model reads the
    rate from those buffers, so it does not recompile when the rate changes.

    Args:
        model: a model (or a single block) converted by :func:`apply_stochastic_depth`.
        drop_rate: the new base drop rate, in ``[0, 1]``.

    Returns:
        The number of blocks updated.

    Raises:
        ValueError: when ``model`` has no stochastic block (a loop calling this on an
            unconverted model would silently train without stochastic depth).

    Example:
        >>> from torchvision.models import resnet50
        >>> model = apply_stochastic_depth(resnet50(), "block", "ResNetBottleneck", drop_rate=0.2)
        >>> set_stochastic_depth_drop_rate(model, 0.1)
        16
        >>> round(model.layer4[-1].drop_rate, 3), round(model.layer1[0].drop_rate, 5)
        (0.1, 0.00625)
    """
    check_module(model)
    drop_rate = check_probability(drop_rate, "drop_rate")
    count = 0
    for block in model.modules():
        if isinstance(block, StochasticBlock):
            block._set_drop_rate(min(drop_rate * block._drop_rate_share, 1.0))
            count += 1
    if count == 0:
        raise ValueError(
            "model must contain stochastic blocks (convert it with apply_stochastic_depth "
            f"first), got a {type(model).__name__} without any"
        )
    return count
