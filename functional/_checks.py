"""Argument checks and small helpers shared by every module of ``functional``.

Every public callable validates at entry with these, so messages read the same everywhere:
the argument's name, the rule, and the value received.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from surgery import NoEffectWarning, replace_module_classes, update_params_in_optimizer
from surgery._types import OptimizerArg, ReplacementFunction

__all__ = [
    "accumulation_dtype",
    "cast_result",
    "check_bool",
    "check_class_indices",
    "check_generator",
    "check_in_range",
    "check_indices",
    "check_int",
    "check_module",
    "check_ndim",
    "check_one_of",
    "check_pair",
    "check_positive",
    "check_probability",
    "check_same_batch",
    "check_step_scalar",
    "check_tensor",
    "check_values",
    "clone_module_as",
    "compute_dtype",
    "dense_labels",
    "foreach_total_norm",
    "gather_rows_cols",
    "group_by_device_and_dtype",
    "int64_range",
    "latent_size",
    "memory_format_of",
    "random_device",
    "random_permutation",
    "replace_chosen",
    "round_half_up",
    "sample_beta",
    "scalar_tensor",
    "settle_new_parameters",
    "sym_floor",
    "warn_no_effect",
]


def check_tensor(x: object, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_ndim(x: torch.Tensor, name: str, ndims: int | Sequence[int], layout: str = "") -> None:
    """Require ``x.ndim`` to be one of ``ndims``; ``layout`` (e.g. "(B, C, H, W)") goes in the message."""
    check_tensor(x, name)
    allowed = (ndims,) if isinstance(ndims, int) else tuple(ndims)
    if x.ndim not in allowed:
        want = " or ".join(str(n) for n in allowed)
        shape = f" {layout}" if layout else ""
        raise ValueError(f"{name} must have {want} dimensions{shape}, got shape {tuple(x.shape)}")


def _real(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    # ``value != value`` rather than ``math.isnan``: the same test, and under torch.compile a
    # Python float is symbolic, where ``math.isnan`` breaks the graph.
    if value != value:
        raise ValueError(f"{name} must not be NaN")
    return value


def check_in_range(
    value: object,
    name: str,
    low: float,
    high: float,
    *,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> float:
    v = _real(value, name)
    ok_low = v >= low if low_inclusive else v > low
    ok_high = v <= high if high_inclusive else v < high
    if not (ok_low and ok_high):
        interval = f"{'[' if low_inclusive else '('}{low}, {high}{']' if high_inclusive else ')'}"
        raise ValueError(f"{name} must be in {interval}, got {value}")
    return v


def check_probability(value: object, name: str) -> float:
    return check_in_range(value, name, 0.0, 1.0)


def check_positive(value: object, name: str, *, allow_zero: bool = False) -> float:
    v = _real(value, name)
    if v < 0 or (v == 0 and not allow_zero) or v == math.inf:  # no isinf: compile-safe
        rule = "a finite number >= 0" if allow_zero else "a finite number > 0"
        raise ValueError(f"{name} must be {rule}, got {value}")
    return v


def check_int(value: object, name: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_bool(value: object, name: str, *, allow_none: bool = False) -> bool | None:
    if not (isinstance(value, bool) or (allow_none and value is None)):
        allowed = "a bool or None" if allow_none else "a bool"
        raise TypeError(f"{name} must be {allowed}, got {type(value).__name__}")
    return value


def check_one_of(value: object, name: str, choices: Sequence[object]) -> None:
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {options}; got {value!r}")


def check_generator(generator: object, name: str = "generator") -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{name} must be a torch.Generator or None, got {type(generator).__name__}")
    return generator


def check_module(model: object, name: str = "model") -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(f"{name} must be an nn.Module, got {type(model).__name__}")
    return model


def warn_no_effect(transform: str, looked_for: str, *, stacklevel: int = 3) -> None:
    """Emit :class:`surgery.NoEffectWarning` for a transform that matched nothing."""
    warnings.warn(
        f"{transform} changed nothing: the model has no {looked_for}",
        NoEffectWarning,
        stacklevel=stacklevel,
    )


# ---------------------------------------------------------------------------------------------
# Numeric helpers shared by the training-state helpers (SAM, gradient clipping, schedules, SWA)
# ---------------------------------------------------------------------------------------------


def round_half_up(value: float) -> int:
    """Nearest integer, halves rounded up (``2.5 -> 3``), robust to ``0.29 * 100 = 28.999...``.

    Python's ``round`` rounds halves to even and ``int`` truncates; lengths of schedules and
    training phases scaled by a ratio want the nearest integer, ties going to the longer phase.
    """
    return math.floor(value + 0.5 + 1e-9)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype reductions and decompositions of ``dtype`` data run in: float64 for float64,
    float32 for everything else (half precisions, integers).

    Compare :func:`compute_dtype`, which keeps every floating dtype (for elementwise ops).
    """
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def group_by_device_and_dtype(
    tensors: Sequence[torch.Tensor], *others: Sequence[torch.Tensor]
) -> dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]]:
    """Split parallel tensor lists into groups that ``torch._foreach_*`` kernels accept.

    The key of each group is the ``(device, dtype)`` of ``tensors[i]``; the value holds one list
    per argument (``tensors`` first, then each of ``others``), in the original order.
    """
    groups: dict[tuple[torch.device, torch.dtype], list[list[torch.Tensor]]] = {}
    for i, t in enumerate(tensors):
        lists = groups.setdefault((t.device, t.dtype), [[] for _ in range(1 + len(others))])
        lists[0].append(t)
        for j, other in enumerate(others, start=1):
            lists[j].append(other[i])
    return groups


def foreach_total_norm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Global L2 norm of all ``tensors`` taken together, with ``torch._foreach_norm``.

    Accumulates in float32 (float64 when a tensor is float64); returns a 0-d tensor on the first
    tensor's device (CPU and 0.0 for an empty list). Non-finite entries give a non-finite norm.
    """
    if len(tensors) == 0:
        return torch.zeros((), dtype=torch.float32)
    out_device = tensors[0].device
    out_dtype = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
    partial = []
    for (_, dtype), (group,) in group_by_device_and_dtype(tensors).items():
        norms = torch._foreach_norm(group, 2.0, dtype=accumulation_dtype(dtype))
        partial.append(torch.linalg.vector_norm(torch.stack(norms)).to(out_device, out_dtype))
    return partial[0] if len(partial) == 1 else torch.linalg.vector_norm(torch.stack(partial))


# ---------------------------------------------------------------------------------------------
# Helpers shared by the model transforms (replacement policies)
# ---------------------------------------------------------------------------------------------


def clone_module_as(module: nn.Module, cls: type[nn.Module]) -> nn.Module:
    """A new instance of ``cls`` that shares ``module``'s parameters, buffers and submodules.

    The building block of the replacement policies that subclass the layer they replace
    (``BlurConv2d(nn.Conv2d)``, ``GhostBatchNorm2d(nn.BatchNorm2d)``, ...): nothing is
    re-initialised or copied, so the very same ``Parameter`` objects (and with them the
    optimizer state) and the state_dict keys survive, and so do the layer's plain attributes
    (``stride``, ``eps``, ``padding_mode``, ...). Dictionaries and sets of the module's
    internals are copied shallowly, so registering a new tensor or submodule on the clone leaves
    ``module`` untouched. ``cls`` is normally a subclass of ``type(module)`` that only adds
    state; the caller sets that extra state on the clone.
    """
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"cls must be an nn.Module subclass, got {cls!r}")
    clone = cls.__new__(cls)
    state = {}
    for key, value in module.__dict__.items():
        state[key] = value.copy() if isinstance(value, (dict, set)) else value
    clone.__dict__.update(state)
    return clone


def latent_size(value: object, name: str, reference: int) -> int:
    """A layer width given as an int ``>= 1``, or as a fraction in (0, 1) of ``reference``
    (rounded down, at least 1)."""
    rule = "an int >= 1 or a float in (0, 1)"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {rule}, got {type(value).__name__}")
    if 0 < value < 1:
        return max(1, int(value * reference))
    if value >= 1 and float(value).is_integer():
        return int(value)
    raise ValueError(f"{name} must be {rule}, got {value}")


def replace_chosen(
    model: nn.Module,
    transform: str,
    choices: Sequence[tuple[bool, type[nn.Module], ReplacementFunction, str]],
    optimizers: OptimizerArg,
    *,
    none_chosen: str,
    qualifier: str = "",
) -> dict[nn.Module, nn.Module]:
    """Run the policies a transform's switches turned on; warn when nothing was replaced.

    ``choices`` holds ``(switch, layer class, policy, what it looks for)``; the policies of the
    switched-on choices run on exact instances of their classes. When nothing is replaced the
    :class:`surgery.NoEffectWarning` names what the switched-on choices look for, joined by
    "or" and followed by ``qualifier``, or says ``none_chosen`` when every switch is off.
    Returns ``replace_module_classes``'s mapping of old to new modules.
    """
    policies = {cls: policy for on, cls, policy, _ in choices if on}
    replaced = replace_module_classes(model, policies, optimizers=optimizers, exact_type=True)
    if not replaced:
        looked_for = [what for on, _, _, what in choices if on]
        warn_no_effect(
            transform,
            " or ".join(looked_for) + qualifier if looked_for else none_chosen,
            stacklevel=4,
        )
    return replaced


# ---------------------------------------------------------------------------------------------
# Helpers shared by the batch and label ops (mixup, cutmix, cutout, colout, blur, resizing,
# label smoothing, selective backprop).
# ---------------------------------------------------------------------------------------------


def check_pair(value: object, name: str, *, minimum: int = 0) -> tuple[int, int]:
    """An int or a pair of ints (``(h, w)``), each ``>= minimum``, as a pair."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        pair = (int(value), int(value))
    elif (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value)
    ):
        pair = (int(value[0]), int(value[1]))
    else:
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    if min(pair) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return pair


def check_same_batch(x: torch.Tensor, y: torch.Tensor, x_name: str, y_name: str) -> None:
    """Require ``x`` and ``y`` to have the same size along dim 0 (the batch)."""
    if y.ndim == 0 or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"{y_name} must have the batch size of {x_name} ({x.shape[0]}) along dim 0, "
            f"got shape {tuple(y.shape)}"
        )


def random_device(generator: torch.Generator | None) -> torch.device:
    """The device random parameters are drawn on: the generator's, or the CPU for torch's global RNG.

    Drawing on the generator's device (not the data's) makes a seeded CPU generator give the
    same parameters whatever device the data lives on. Moving the draws to the data with
    ``.to(device, non_blocking=True)`` never reads them on the host.
    """
    return torch.device("cpu") if generator is None else generator.device


def random_permutation(
    n: int, generator: torch.Generator | None, device: torch.device | str
) -> torch.Tensor:
    """A uniformly random permutation of ``range(n)`` (int64) on ``device``."""
    perm = torch.randperm(n, generator=generator, device=random_device(generator))
    return perm.to(device, non_blocking=True)


def sym_floor(value: float) -> int:
    """``math.floor(value)`` for a non-negative Python number, without specialising under compile.

    Eagerly this is ``math.floor``. Under ``torch.compile`` a Python float argument is symbolic,
    and ``int()``/``math.floor`` of it makes dynamo recompile for every new value; the same
    integer found by comparisons (an exponential then a binary search) leaves guards of the form
    ``v >= k``/``v < k`` only, which every value with the same floor passes. Shapes derived from
    a scale or a keep fraction therefore recompile only when the shape itself changes.
    """
    if not torch.compiler.is_compiling():
        return math.floor(value)
    low, high = 0, 1
    while value >= high:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        if value >= mid:
            low = mid
        else:
            high = mid
    return low


def scalar_tensor(
    value: float | torch.Tensor, *, dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """A Python number or a 0-d tensor as a 0-d tensor of ``dtype`` on ``device``.

    Built as ``zeros + value`` on purpose: under ``torch.compile`` a symbolic Python float
    becomes a graph input this way, where ``torch.tensor(value)``/``torch.full`` would
    specialise on it (a recompile per value).
    """
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=dtype, non_blocking=True)
    return torch.zeros((), dtype=dtype, device=device) + value


# Below this, Beta(alpha, alpha) is a fair coin on {0, 1} to float64 precision; clamping keeps
# 1 / alpha finite (a subnormal alpha would give inf and then NaN).
_TINY_ALPHA = 1e-300


def sample_beta(
    alpha: float, size: tuple[int, ...], generator: torch.Generator | None
) -> torch.Tensor:
    r"""Samples of Beta(alpha, alpha) as float64 on the generator's device, robust for tiny ``alpha``.

    ``Beta(a, a) = G1 / (G1 + G2) = sigmoid(log G1 - log G2)`` with ``G ~ Gamma(a)``; for small
    ``a`` the gammas underflow to 0, so the logs are taken with Marsaglia and Tsang's boost
    ``log G = log G' + log(U) / a``, ``G' ~ Gamma(a + 1)``, ``U ~ Uniform(0, 1)``, and the
    difference is formed before dividing by ``a``: finite terms, so the result is never NaN
    (a difference of two infinities) and always lies in ``[0, 1]``, whatever ``a > 0``.
    ``alpha`` may be a symbolic float under ``torch.compile`` (no recompile when it changes).
    """
    alpha = max(alpha, _TINY_ALPHA)
    device = random_device(generator)
    shape = (2, *size)
    conc = torch.zeros(shape, dtype=torch.float64, device=device) + (alpha + 1.0)
    gamma = torch._standard_gamma(conc, generator=generator)
    uniform = torch.rand(shape, dtype=torch.float64, device=device, generator=generator)
    log_gamma = gamma.clamp_min(1e-300).log()
    log_uniform = torch.log1p(-uniform)  # 1 - U lies in (0, 1]: finite
    logit = (log_gamma[0] - log_gamma[1]) + (log_uniform[0] - log_uniform[1]) * (1.0 / alpha)
    return torch.sigmoid(logit)


def memory_format_of(x: torch.Tensor) -> torch.memory_format:
    """``torch.channels_last`` (or ``channels_last_3d``) for such an input, else contiguous."""
    if x.ndim == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    if (
        x.ndim == 5
        and not x.is_contiguous()
        and x.is_contiguous(memory_format=torch.channels_last_3d)
    ):
        return torch.channels_last_3d
    return torch.contiguous_format


def gather_rows_cols(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """``x[..., rows, :][..., cols]`` (dims -2 and -1) in one gather, keeping channels_last.

    ``rows``/``cols`` are int64 index tensors (moved to ``x``'s device without a host read).
    A channels_last ``(B, C, H, W)`` input is gathered as its ``(B, H, W, C)`` view, so the
    result comes out channels_last with no extra copy.
    """
    rows = rows.to(x.device, non_blocking=True)
    cols = cols.to(x.device, non_blocking=True)
    if memory_format_of(x) == torch.channels_last:
        return x.permute(0, 2, 3, 1)[:, rows[:, None], cols].permute(0, 3, 1, 2)
    # One gather over both dims: on the CPU it is several times faster than two index_selects.
    return x[..., rows[:, None], cols]


def dense_labels(
    y: torch.Tensor, n_classes: int, name: str = "y", *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``y`` as dense float labels ``(B, n_classes)``: class indices ``(B,)`` become one-hot.

    Index labels must be integers in ``[0, n_classes)``; dense labels must have ``n_classes``
    columns. Floating dense labels keep their dtype unless ``dtype`` is given; everything else
    becomes ``dtype`` or the default float dtype.
    """
    check_tensor(y, name)
    if y.ndim == 1:
        if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
            raise TypeError(
                f"{name} with shape (B,) must hold integer class indices, got dtype {y.dtype}"
            )
        check_class_indices(y, n_classes, name)
        out_dtype = dtype or torch.get_default_dtype()
        # A comparison with arange, not F.one_hot: one_hot reads the labels' range on the host.
        classes = torch.arange(n_classes, device=y.device)
        return (y.unsqueeze(-1) == classes).to(out_dtype)
    if y.ndim == 2:
        if y.shape[1] != n_classes:
            raise ValueError(
                f"{name} with shape (B, n_classes) must have n_classes={n_classes} columns, "
                f"got shape {tuple(y.shape)}"
            )
        out_dtype = dtype or (y.dtype if y.is_floating_point() else torch.get_default_dtype())
        return y.to(out_dtype)
    raise ValueError(
        f"{name} must be class indices (B,) or dense labels (B, n_classes), "
        f"got shape {tuple(y.shape)}"
    )


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


# Integer dtypes whose values float32 cannot hold exactly: mixed and resized in float64.
_WIDE_INTEGERS = frozenset(
    {
        torch.int32,
        torch.int64,
        getattr(torch, "uint32", torch.int64),
        getattr(torch, "uint64", torch.int64),
    }
)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The floating dtype an op computes in for data of ``dtype``.

    Floating and complex dtypes are kept; 8- and 16-bit integers compute in float32 (exact); 32- and 64-bit
    integers in float64 (exact for int32; int64 beyond 2**53 is rounded to float64's precision).
    Compare :func:`accumulation_dtype`, which also lifts half precisions to float32.
    """
    if dtype.is_floating_point or dtype.is_complex:
        return dtype
    return torch.float64 if dtype in _WIDE_INTEGERS else torch.float32


def _float_bounds(dtype: torch.dtype, float_dtype: torch.dtype) -> tuple[float, float]:
    """The integer range of ``dtype`` as values ``float_dtype`` holds exactly (rounded inwards).

    ``float32(2**31 - 1)`` is ``2**31``: clamping to it and casting wraps round to the minimum.
    """
    info = torch.iinfo(dtype)
    np_float = np.float64 if float_dtype == torch.float64 else np.float32
    high = np_float(info.max)
    while int(high) > info.max:
        high = np.nextafter(high, np_float(0))
    return float(info.min), float(high)  # powers of two (or 0): the minimum is exact


_BOUNDS = {
    (d, f): _float_bounds(d, f)
    for d in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    for f in (torch.float32, torch.float64)
}


def cast_result(
    result: torch.Tensor,
    dtype: torch.dtype,
    *,
    within: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``result`` (computed in a floating dtype) back in ``dtype``; integers rounded and clamped.

    The clamp bounds are the integer range rounded inwards to values the floating dtype holds,
    so a result near an integer dtype's maximum never wraps round to its minimum. ``within``
    (from :func:`int64_range`) further clamps an int64 result to the range of the values it
    was computed from: float64 rounds int64 values beyond 2**53, and a convex combination
    must stay within its inputs.
    """
    if result.dtype == dtype:
        return result
    if dtype.is_floating_point:
        return result.to(dtype)
    if dtype == torch.bool:
        return result.round() != 0
    if result.dtype not in (torch.float32, torch.float64):
        result = result.float()
    key = (dtype, result.dtype)
    low, high = _BOUNDS[key] if key in _BOUNDS else _float_bounds(dtype, result.dtype)
    out = result.round().clamp_(low, high).to(dtype)
    return out if within is None else torch.clamp(out, *within)


def int64_range(
    x: torch.Tensor, *, with_zero: bool = False
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(min, max)`` of a non-empty int64 ``x`` as 0-d tensors on its device (widened to hold 0
    when ``with_zero``: zero padding), for :func:`cast_result`'s ``within``; ``None`` for any
    other dtype (exact in float64 or float32) or an empty ``x``. No value is read on the host."""
    if x.dtype != torch.int64 or x.numel() == 0:
        return None
    low, high = torch.aminmax(x)
    if with_zero:
        low, high = low.clamp(max=0), high.clamp(min=0)
    return low, high


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


# ---------------------------------------------------------------------------------------------
# New parameters added by model transforms (SE, GLU, factorization): frozen state and optimizers
# ---------------------------------------------------------------------------------------------


def settle_new_parameters(
    names: dict[int, str],
    replaced: dict[nn.Module, nn.Module],
    optimizers: Sequence[torch.optim.Optimizer],
    transform: str,
    *,
    new_function: bool,
) -> None:
    """Apply the rule for parameters a transform created (see each ``apply_*``'s docstring).

    ``replaced`` maps each replaced module to its replacement; ``names`` maps ``id(module)`` to
    its name in the model (taken before surgery). A replacement's parameters that the replaced
    module did not hold are *new*. Each new parameter inherits the frozen state of the replaced
    module's ``weight``: the new parameters of a frozen layer get ``requires_grad=False`` and
    leave every optimizer (the surgery engine added them to the group of a parameter the
    optimizer held, such as a trainable bias). Then a ``UserWarning`` names

    - with ``new_function`` (the new parameters start at a random value, so the layer computes
      something new): the frozen layers, whose new parameters stay at that random value;
    - when ``optimizers`` were passed: the trainable layers whose new parameters joined none of
      them (the optimizers held none of the layer's parameters), so nothing would train them.

    Both warnings say how to train the new parameters instead.
    """
    frozen: list[str] = []
    orphans: list[str] = []
    held = {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}
    for old, new in replaced.items():
        old_ids = {id(p) for p in old.parameters()}
        added = [p for p in new.parameters() if id(p) not in old_ids]
        if not added:
            continue
        weight = getattr(old, "weight", None)
        trainable = weight.requires_grad if isinstance(weight, torch.Tensor) else True
        name = names.get(id(old), type(old).__name__)
        if not trainable:
            for p in added:
                p.requires_grad_(False)
            if held.intersection(id(p) for p in added):
                update_params_in_optimizer(added, [], list(optimizers))
            frozen.append(name)
        elif optimizers and not held.intersection(id(p) for p in added):
            orphans.append(name)
    if frozen and new_function:
        warnings.warn(
            f"{transform}: these layers are frozen (weight.requires_grad=False), so their new "
            f"parameters are frozen too and keep their random initial values: "
            f"{', '.join(frozen)}; to train them, call requires_grad_(True) on the new "
            "parameters and add them to an optimizer (opt.add_param_group({'params': ...}))",
            UserWarning,
            stacklevel=3,
        )
    if orphans:
        warnings.warn(
            f"{transform}: no optimizer passed holds these layers, so their new trainable "
            f"parameters joined none and would never be updated: {', '.join(orphans)}; add "
            "them to an optimizer (opt.add_param_group) or pass the optimizer that trains "
            "these layers",
            UserWarning,
            stacklevel=3,
        )
