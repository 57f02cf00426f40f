# Long file: the StochasticBlock mixin (decisions, replay under checkpointing, saved state) and
# the two torchvision blocks belong together.
"""The stochastic layers: the :class:`StochasticBlock` mixin (how a block decides, on the host or
on the device, and scales or skips its residual branch; its drop rate mirrored in a device
buffer) and the built-in torchvision blocks :class:`StochasticBottleneck` and
:class:`StochasticBasicBlock`."""

from __future__ import annotations

import struct
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

from functional._args import check_bool, check_int, check_one_of, check_probability
from functional._deploy import NotScriptable
from functional.stochastic_depth.generators import _DropGenerators, draw_bits, sample_bits
from functional.stochastic_depth.replay import (
    check_not_compiled_checkpoint,
    forward_region,
    recompute_region,
    recomputing,
)

__all__ = ["StochasticBasicBlock", "StochasticBlock", "StochasticBottleneck"]

_METHODS = ("block", "sample")

# Drop rates are also kept on the device as an integer number of units of 2**-24 (the
# resolution of float32 uniforms), in a 0-d int64 buffer: compiled graphs read the rate from it
# (so a new rate is a new value, not a new graph), and ``model.to(torch.bfloat16)`` leaves it
# exact (dtype conversions touch floating buffers only).
_RATE_BITS = 24
_RATE_ONE = 1 << _RATE_BITS
_BITS_SHIFT = 32 - _RATE_BITS  # a draw's top 24 bits, compared with the rate's units


# The format of the stochastic state in ``state_dict()`` (see StochasticBlock.get_extra_state).
_STATE_VERSION = 2
_STATE_SIZE = 5
_EXTRA_STATE_KEY = "_extra_state"  # torch.nn.modules.module._EXTRA_STATE_KEY_SUFFIX


# The way out torch.jit.script's refusal names (see functional._deploy.NotScriptable).
_SCRIPT_HINT = (
    "script the unconverted model (evaluation computes exactly what it computes) with these "
    "weights: plain.load_state_dict({k: v for k, v in model.state_dict().items() "
    "if not k.endswith('._extra_state')}), then torch.jit.script(plain.eval())"
)


def _rate_units(p: float) -> int:
    return round(p * _RATE_ONE)


def _begin_forward(block: StochasticBlock, args: Any) -> None:
    """Forward pre-hook of every stochastic block: see :meth:`StochasticBlock._begin_forward`."""
    block._begin_forward()


class StochasticBlock(NotScriptable, nn.Module):
    """Mixin for residual blocks with stochastic depth; see :func:`register_stochastic_block`.

    A subclass defines ``forward`` and scales its residual branch with :meth:`drop_branch`
    (or adds it to the shortcut with :meth:`add_branch`). The attributes ``drop_rate`` (in
    [0, 1]) and ``stochastic_method`` (``'block'`` or ``'sample'``) may be changed at any time;
    to warm the rate up from the training loop use :func:`set_stochastic_depth_drop_rate`.

    How a decision is made (see :func:`apply_stochastic_depth` for the trade-offs):

    - eager ``'block'`` with ``skip_dropped=True`` (default): drawn on the host (integer
      arithmetic on Python ints) before the branch runs; a dropped branch is never computed. A
      host decision, not a device read: nothing waits for the device.
    - ``'block'`` under ``torch.compile``, or eager with ``skip_dropped=False``: a 0-d device
      tensor ``m`` (0 or ``1/(1-p)``) multiplies the branch, which always runs.
    - ``'sample'``: a ``(B, 1, ...)`` device tensor, drawn on the branch's device.

    The device decisions read the rate from the 0-d buffer ``drop_rate_units`` (``p`` in units
    of ``2**-24``), so changing ``drop_rate`` never recompiles, and hash the block's stream keys
    (buffer ``drop_stream_keys``) with its count of device draws (0-d buffer ``drop_draws``,
    incremented in place by every training forward) using int64 tensor operations: no
    generator, no global random state, no host read, the same draws eager and compiled. The
    host decisions hash the same keys with their own count, so a fresh eager run and a fresh
    compiled run drop the same blocks. A block given no streams (built directly, not by
    :func:`apply_stochastic_depth`) draws from torch's default generator instead.

    Saved state: :meth:`get_extra_state` puts the rate, the numbers of decisions drawn and the
    model's seed in ``state_dict()``; loading restores them (a state dict without them loads
    too, ``strict=True`` included, and leaves them as they are).
    """

    script_hint = _SCRIPT_HINT
    stochastic_method: str
    skip_dropped: bool
    drop_rate_units: torch.Tensor
    drop_draws: torch.Tensor
    drop_stream_keys: torch.Tensor
    _drop_rate: float
    _drop_units: int
    _drop_rate_share: float
    _drop_generators: _DropGenerators | None
    # Class-level defaults: blocks built directly (or pickled before these existed) have them.
    _stream_index: int = 0  # which of the model's streams this block draws from
    _draws: int = 0  # how many host decisions it has drawn (the position in its stream)
    _stream_keys: tuple[int, int, int, int] = (0, 0, 0, 0)  # see _DropGenerators.keys
    # How many host and device draws the last forward made: a recompute rewinds by them.
    _forward_draws: int = 0
    _forward_device_draws: int = 0
    _replaying: bool = False  # this forward is a recompute: draws replay from the cursors
    _replay_draw: int = 0
    _replay_device_draws: torch.Tensor
    # checkpoint region -> the host and device draw numbers its forward started from
    _replay_starts: weakref.WeakKeyDictionary[object, tuple[int, torch.Tensor]] | None = None
    _begins_in_forward: bool = False  # True: forward calls _begin_forward (else a pre-hook)
    __jit_unused_properties__ = ("drop_rate",)  # Python-side state: not for TorchScript

    def _init_stochastic(
        self,
        drop_rate: float,
        stochastic_method: str,
        generators: _DropGenerators | None = None,
        *,
        share: float = 1.0,
        skip_dropped: bool = True,
        index: int = 0,
    ) -> None:
        check_one_of(stochastic_method, "stochastic_method", _METHODS)
        check_bool(skip_dropped, "skip_dropped")
        tensors = [*self.parameters(), *self.buffers()]
        device = tensors[0].device if tensors else None
        self._register_stochastic_buffers(device)
        self.drop_rate = drop_rate
        self.stochastic_method = stochastic_method
        self.skip_dropped = skip_dropped
        self._drop_rate_share = share
        self._draws = 0
        self._attach_streams(generators, index)
        self._hook_begin_forward()

    def _hook_begin_forward(self) -> None:
        if self._begins_in_forward:
            return  # the forward calls _begin_forward itself (no hook: TorchScript compiles hooks)
        if _begin_forward not in self._forward_pre_hooks.values():
            self.register_forward_pre_hook(_begin_forward)

    def _begin_forward(self) -> None:
        """Start a forward. An ordinary one counts its draws from zero and, inside a checkpoint
        region, remembers where its draws start. A recompute of activation checkpointing (a
        forward run inside the backward pass, reentrant or not) replays: it draws again the
        draw numbers of the forward it repeats (that of its region, or else the last one) and
        leaves the counts as they are (it may stop early, as non-reentrant checkpointing does)."""
        if not self.training or self._drop_generators is None or torch.compiler.is_compiling():
            return  # compiled: no Python state (a mutation inside checkpoint's region breaks it)
        replaying = recomputing()
        object.__setattr__(self, "_replaying", replaying)
        if replaying:
            draw, device_draw = self._replay_start()
            object.__setattr__(self, "_replay_draw", draw)
            object.__setattr__(self, "_replay_device_draws", device_draw)
            return
        object.__setattr__(self, "_forward_draws", 0)
        object.__setattr__(self, "_forward_device_draws", 0)
        region = forward_region()
        if region is not None:
            starts = self._replay_starts
            if starts is None:
                starts = weakref.WeakKeyDictionary()
                object.__setattr__(self, "_replay_starts", starts)
            starts[region] = (self._draws, self.drop_draws.clone())

    def _replay_start(self) -> tuple[int, torch.Tensor]:
        """The host and device draw numbers of the forward this recompute repeats: those its
        region remembered, or (region unknown) those of the block's last forward."""
        region = recompute_region()
        starts = self._replay_starts
        start = None if region is None or starts is None else starts.get(region)
        if start is not None:
            return start
        return self._draws - self._forward_draws, self.drop_draws - self._forward_device_draws

    def _next_device_draw(self) -> torch.Tensor:
        """The draw number (a 0-d int64 tensor) of this device decision; counts it."""
        if self._replaying and not torch.compiler.is_compiling():
            draws = self._replay_device_draws
            object.__setattr__(self, "_replay_device_draws", draws + 1)
            return draws
        draws = self.drop_draws
        if torch.compiler.is_compiling():
            return draws
        object.__setattr__(self, "_forward_device_draws", self._forward_device_draws + 1)
        return draws

    def _register_stochastic_buffers(self, device: torch.device | None) -> None:
        # Non-persistent (get_extra_state saves them); integer: ``model.to(dtype)`` keeps them.
        for name, shape in (
            ("drop_rate_units", ()),
            ("drop_draws", ()),
            ("drop_stream_keys", (2,)),
        ):
            zeros = torch.zeros(shape, dtype=torch.int64, device=device)
            self.register_buffer(name, zeros, persistent=False)

    def _attach_streams(self, generators: _DropGenerators | None, index: int) -> None:
        """Draw from block ``index``'s streams of ``generators`` (``None``: from torch's default
        generator), keeping the draw counts; the keys follow the generators' current seed."""
        self._drop_generators = generators
        self._stream_index = index
        self._stream_keys = (0, 0, 0, 0) if generators is None else generators.keys(index)
        self._fill_buffer("drop_stream_keys", self._stream_keys[:2])

    def _fill_buffer(self, name: str, value: int | tuple[int, ...]) -> None:
        """Set an integer buffer outside the forward (an inference tensor made under
        ``torch.inference_mode`` is replaced rather than written)."""
        buffer = self._buffers.get(name)
        if buffer is None:
            return
        if buffer.is_inference() and not torch.is_inference_mode_enabled():
            self._buffers[name] = buffer = torch.empty_like(buffer)
        with torch.no_grad():
            buffer.fill_(value) if isinstance(value, int) else buffer.copy_(torch.tensor(value))

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
        self._drop_units = _rate_units(p)
        self._fill_buffer("drop_rate_units", self._drop_units)

    def block_scale(self) -> float | None:
        """This forward's eager ``'block'`` decision, drawn on the host: ``0.0`` (dropped) or
        ``1 / (1 - p)`` (kept); ``None`` outside training, at rate 0 or in ``'sample'`` mode.

        Every call in training counts as a draw, at rate 0 too, as the compiled graph's do.
        """
        if not self.training or self.stochastic_method != "block":
            return None
        p = self._drop_rate
        if self._drop_generators is None:
            if p == 0:
                return None
            dropped = float(torch.rand(())) < p
        else:
            if self._replaying:
                draw = self._replay_draw
                object.__setattr__(self, "_replay_draw", draw + 1)
            else:  # plain ints: skip Module.__setattr__
                draw = self._draws
                object.__setattr__(self, "_draws", draw + 1)
                object.__setattr__(self, "_forward_draws", self._forward_draws + 1)
            if p == 0:
                return None
            key_a, key_b, salt, _ = self._stream_keys
            dropped = draw_bits(draw, key_a, key_b ^ salt) >> _BITS_SHIFT < self._drop_units
        if dropped:
            return 0.0
        return 1.0 / (1.0 - p)

    def sample_scale(self, branch: torch.Tensor) -> torch.Tensor | None:
        """The ``'sample'`` factors, a (B, 1, ...) tensor of 0 or ``1 / (1 - p)`` drawn on the
        branch's device; ``None`` outside training, at rate 0 (eager) or in ``'block'`` mode."""
        if not self.training or self.stochastic_method != "sample":
            return None
        if torch.compiler.is_compiling() or self._drop_rate != 0:
            return self.device_scale(branch)
        if self._drop_generators is not None:  # the draw a compiled graph makes: stay aligned
            if not self._replaying:
                self._next_device_draw().add_(1)
        return None

    def device_scale(self, branch: torch.Tensor) -> torch.Tensor:
        """The drop factors as a device tensor, ``0`` or ``1 / (1 - p)`` in ``branch``'s dtype:
        0-d in ``'block'`` mode, ``(B, 1, ...)`` in ``'sample'`` mode.

        Reads ``p`` from the buffer ``drop_rate_units`` (never from the Python float), so a
        compiled graph does not specialise on the rate, and draws by hashing the buffers
        ``drop_stream_keys`` and ``drop_draws`` (then increments ``drop_draws``): the same
        draws eager and compiled, and none of torch's random state. A block without streams
        draws from torch's default generator.
        """
        if torch.compiler.is_compiling():
            check_not_compiled_checkpoint(type(self).__name__)
        units = self.drop_rate_units.to(branch.device)
        block = self.stochastic_method == "block"
        shape = () if block else (branch.shape[0],) + (1,) * (branch.ndim - 1)
        if self._drop_generators is None:
            keep = torch.rand(shape, device=branch.device) * _RATE_ONE >= units
        else:
            draws, keys = self._next_device_draw(), self.drop_stream_keys
            salt = self._stream_keys[2 if block else 3]  # this rank's: a constant, not a buffer
            key_b = keys[1] ^ salt if salt else keys[1]
            if block:
                bits = draw_bits(draws, keys[0], key_b)
            else:
                bits = sample_bits(draws, keys[0], key_b, branch.shape[0]).view(shape)
            if not self._replaying:
                draws.add_(1)
            keep = bits.to(branch.device) >> _BITS_SHIFT >= units
        denominator = (_RATE_ONE - units).to(torch.get_default_dtype())
        scale = torch.where(keep, _RATE_ONE / denominator, 0.0)
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

    # -- checkpointing ----------------------------------------------------------------------

    def get_extra_state(self) -> torch.Tensor:
        """What resuming needs, saved in ``state_dict()`` under ``<block>._extra_state``.

        A CPU int64 tensor ``[2, bits of drop_rate, host draws, seed, device draws]``: the format
        version, the drop rate as the bits of its float64 (exact: the rate set last with
        :func:`set_stochastic_depth_drop_rate`), how many host and device decisions the block
        has drawn, and the model's seed (``-1`` for a block without streams, which draws from
        torch's default generator). A tensor, so that ``torch.load(..., weights_only=True)``,
        distributed checkpoints and EMA state dicts take it as they take any integer buffer.
        Reads the device draw count (one device-to-host copy, at save time only).
        """
        gens = self._drop_generators
        seed = -1 if gens is None else gens.seed
        bits = struct.unpack("<q", struct.pack("<d", self._drop_rate))[0]
        draws = self._buffers.get("drop_draws")
        device_draws = 0 if draws is None or draws.is_meta else int(draws)
        state = [_STATE_VERSION, bits, self._draws, seed, device_draws]
        return torch.tensor(state, dtype=torch.int64)

    def set_extra_state(self, state: Any) -> None:
        """Restore what :meth:`get_extra_state` saved: the drop rate, the block's positions in
        its streams and the model's seed (kept when the saved block had no streams)."""
        if not (
            isinstance(state, torch.Tensor)
            and state.dtype == torch.int64
            and state.shape == (_STATE_SIZE,)
            and int(state[0]) == _STATE_VERSION
        ):
            raise ValueError(
                f"the stochastic depth state of a {type(self).__name__} must be an int64 tensor "
                f"[{_STATE_VERSION}, rate bits, host draws, seed, device draws] as saved by "
                f"get_extra_state, got {state!r}"
            )
        _, bits, draws, seed, device_draws = (int(v) for v in state.tolist())
        rate = struct.unpack("<d", struct.pack("<q", bits))[0]
        self._set_drop_rate(check_probability(rate, "the saved drop_rate"))
        self._draws = check_int(draws, "the saved host draw count", minimum=0)
        self._fill_buffer(
            "drop_draws", check_int(device_draws, "the saved device draw count", minimum=0)
        )
        gens = self._drop_generators
        if seed >= 0 and gens is not None:
            gens.seed = seed
            self._attach_streams(gens, self._stream_index)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle (and deep-copy) without the forward pre-hook and the replay cursors: unpickling
        adds the hook back, so a pickle names no private function of this module."""
        state = super().__getstate__()
        for name in ("_replaying", "_replay_draw", "_replay_device_draws", "_replay_starts"):
            state.pop(name, None)
        hooks = state.get("_forward_pre_hooks")
        if hooks is not None and _begin_forward in hooks.values():
            state["_forward_pre_hooks"] = type(hooks)(
                (k, v) for k, v in hooks.items() if v is not _begin_forward
            )
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle; a block pickled before it counted device draws gets a counter at 0."""
        super().__setstate__(state)
        if "drop_rate_units" in self._buffers:  # a block set up by _init_stochastic
            self._hook_begin_forward()
        units = self._buffers.get("drop_rate_units")
        if units is not None and "drop_draws" not in self._buffers:
            self._register_stochastic_buffers(units.device)
            self._fill_buffer("drop_rate_units", _rate_units(self._drop_rate))
            object.__setattr__(self, "_drop_units", _rate_units(self._drop_rate))
            self._attach_streams(self._drop_generators, self._stream_index)

    def _load_from_state_dict(
        self,
        state_dict: Mapping[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """A state dict without this block's stochastic state (one of the unconverted model,
        or saved before the state was saved) loads, ``strict=True`` included: the block keeps
        its rate and its stream position."""
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        key = prefix + _EXTRA_STATE_KEY
        if key not in state_dict and key in missing_keys:
            missing_keys.remove(key)

    def extra_repr(self) -> str:
        return f"drop_rate={self.drop_rate:.4g}, stochastic_method={self.stochastic_method!r}"


_Positions = list[tuple[StochasticBlock, int, int, int]]


def stream_positions(model: nn.Module) -> _Positions:
    """The host draw counts of ``model``'s stochastic blocks, for
    :func:`restore_stream_positions` after a pass that must not advance their streams (such
    as ``select_using_loss``'s scoring; the device count is a buffer, restored with the
    others). Host ints only, no device read; empty while compiling (compiled forwards count
    on the device only)."""
    if torch.compiler.is_compiling():
        return []
    return [
        (m, m._draws, m._forward_draws, m._forward_device_draws)
        for m in model.modules()
        if isinstance(m, StochasticBlock)
    ]


def restore_stream_positions(positions: _Positions) -> None:
    """Put back the counts that :func:`stream_positions` returned."""
    for block, draws, forward_draws, forward_device_draws in positions:
        object.__setattr__(block, "_draws", draws)
        object.__setattr__(block, "_forward_draws", forward_draws)
        object.__setattr__(block, "_forward_device_draws", forward_device_draws)


class _TorchvisionResidual(StochasticBlock):
    """The constructor and forward of the stochastic torchvision ResNet blocks; a subclass,
    mixed in before the torchvision block, computes the residual branch in ``_branch``. In
    evaluation the forward is TorchScript's: ``torch.jit.script(model.eval())`` compiles it."""

    _begins_in_forward = True

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
        if self.training:
            return self._forward_training(x)
        # Evaluation: exactly the torchvision block, in TorchScript's subset of Python.
        identity = x
        if self.downsample is not None:
            identity = self.downsample(x)
        return torch.relu(self._branch(x) + identity)

    @torch.jit.unused
    def _forward_training(self, x: torch.Tensor) -> torch.Tensor:
        self._begin_forward()
        identity = x if self.downsample is None else self.downsample(x)
        # not self.relu (in place): a dropped block returns relu(identity), and identity may be x
        return torch.relu(self._add(identity, lambda: self._branch(x), in_place=True))

    def __prepare_scriptable__(self) -> _TorchvisionResidual:
        """``torch.jit.script`` compiles the evaluation forward only: refused in training."""
        if self.training:
            raise TypeError(
                f"torch.jit.script compiles a {type(self).__name__} in evaluation mode only (a "
                "scripted model has no stochastic depth): script model.eval(), or export the "
                "model with torch.export.export"
            )
        return self


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


# TorchScript reads the first class annotations in the MRO, and ours are strings (postponed
# evaluation) that it cannot resolve: it gets the torchvision blocks' own instead.
StochasticBottleneck.__annotations__ = dict(Bottleneck.__annotations__)
StochasticBasicBlock.__annotations__ = dict(BasicBlock.__annotations__)
# TorchScript reads the signature of an unused method too: the types, not their strings.
_TorchvisionResidual._forward_training.__annotations__ = {"x": torch.Tensor, "return": torch.Tensor}
