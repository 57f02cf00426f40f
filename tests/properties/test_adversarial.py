"""Adversarial but valid inputs for every public tensor op, schedule and model transform of
``functional``, against the universal contract:

- the only errors are ``ValueError``/``TypeError`` whose message names an argument;
- outputs keep the input's dtype, device and (image ops) memory format;
- inputs are never modified;
- what is a convex combination or a filter with non-negative taps of the input (mixup, cutmix,
  blur, resize, max-pool) stays within the input's range, for integer dtypes too;
- finite inputs give finite outputs.

Inputs: batch sizes 0 and 1 upward, heights and widths 1 to 24 drawn independently, every float
and integer dtype, values at the extremes of the dtype, non-contiguous and channels_last
layouts, ``torch.inference_mode`` and the ``meta`` device; hyper-parameters at the edges of
their ranges (subnormal, 0, 1, huge).

Every defect this file found is fixed; each keeps a deterministic regression case (the
"pinned cases" below) besides the property that found it.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import functional as F
import surgery

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
N_CLASSES = 4

# --------------------------------------------------------------------------- inputs


@st.composite
def images(
    draw: st.DrawFn,
    *,
    dtypes: tuple[torch.dtype, ...] = FLOATS + INTS,
    min_batch: int = 0,
    min_channels: int = 0,
    min_side: int = 1,
    max_side: int = 24,
) -> torch.Tensor:
    """A (B, C, H, W) batch: any dtype, extreme values, any layout, C from 0 upward."""
    b = draw(st.integers(min_batch, 5))
    c = draw(st.integers(min_channels, 4))
    h = draw(st.integers(min_side, max_side))
    w = draw(st.integers(min_side, max_side))
    dtype = draw(st.sampled_from(dtypes))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    kinds = ["uniform", "extreme", "constant-max", "constant-min"]
    kind = draw(st.sampled_from([*kinds, "nonfinite"] if dtype.is_floating_point else kinds))
    if dtype.is_floating_point:
        info = torch.finfo(dtype)
        lo, hi = -1.0, 1.0
        if kind in ("extreme", "constant-max", "constant-min"):
            lo, hi = float(info.min) / 2, float(info.max) / 2  # room for a sum of two
        base = torch.rand((b, c, h, w), generator=gen, dtype=torch.float64) * (hi - lo) + lo
        x = base.to(dtype)
        if kind == "nonfinite":  # a diverged batch: some NaN and infinite pixels
            pick = torch.rand((b, c, h, w), generator=gen)
            x = torch.where(pick < 0.1, float("nan"), x)
            x = torch.where((pick >= 0.1) & (pick < 0.15), float("inf"), x)
            x = torch.where((pick >= 0.15) & (pick < 0.2), float("-inf"), x).to(dtype)
    else:
        info = torch.iinfo(dtype)
        lo, hi = (0, 255) if kind == "uniform" else (info.min, info.max)
        x = torch.randint(
            max(lo, -(2**62)), min(hi, 2**62), (b, c, h, w), generator=gen, dtype=torch.int64
        )
        if kind == "extreme":
            x = torch.where(x % 2 == 0, torch.tensor(info.max), torch.tensor(info.min))
        x = x.to(dtype)
    if kind == "constant-max":
        x = torch.full_like(x, hi if dtype.is_floating_point else info.max)
    elif kind == "constant-min":
        x = torch.full_like(x, lo if dtype.is_floating_point else info.min)
    layout = draw(st.sampled_from(["contiguous", "channels_last", "transposed", "strided"]))
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "transposed":
        x = x.transpose(2, 3).contiguous().transpose(2, 3)  # same values, permuted strides
    elif layout == "strided":
        x = torch.repeat_interleave(x, 2, dim=-1)[..., ::2]
    return x


labels = st.sampled_from(["indices", "dense"])


def make_labels(x: torch.Tensor, kind: str) -> torch.Tensor:
    idx = torch.arange(x.shape[0]) % N_CLASSES
    if kind == "indices":
        return idx
    return nn.functional.one_hot(idx, N_CLASSES).to(torch.float32)


unit = st.one_of(
    st.sampled_from([0.0, 1.0, 5e-324, 1 - 2**-53, 0.5]), st.floats(0.0, 1.0, allow_nan=False)
)

# --------------------------------------------------------------------------- the contract


def snapshot(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-equal (NaNs included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def run_contract(fn: Callable[[], object], argument_names: tuple[str, ...]) -> object | None:
    """Call ``fn``; the only acceptable errors name one of ``argument_names``."""
    try:
        return fn()
    except (ValueError, TypeError) as error:
        message = str(error)
        named = [a for a in argument_names if re.search(rf"\b{re.escape(a)}\b", message)]
        assert named, f"{type(error).__name__} does not name an argument: {message}"
        return None


def assert_image_out(out: torch.Tensor, x: torch.Tensor, *, keep_format: bool = True) -> None:
    assert out.dtype == x.dtype, (out.dtype, x.dtype)
    assert out.device == x.device
    if keep_format and x.dim() == 4 and x.numel() and out.numel():
        cl = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        if cl:
            assert out.is_contiguous(memory_format=torch.channels_last), "channels_last lost"


def assert_within(out: torch.Tensor, x: torch.Tensor, *, with_zero: bool = False) -> None:
    """``out`` lies within [min x, max x] (a convex combination of x), widened to include 0
    for ops that pad with zeros (a blur with non-negative taps summing to 1)."""
    if x.numel() == 0 or out.numel() == 0:
        return
    lo, hi = x.min(), x.max()
    if with_zero:
        lo, hi = torch.clamp(lo, max=0), torch.clamp(hi, min=0)
    if x.is_floating_point():
        if not (torch.isfinite(lo) and torch.isfinite(hi)):
            return
        lo, hi = lo.double(), hi.double()
        # rounding: a few ulps of the largest magnitude involved
        tol = 16 * torch.finfo(x.dtype).eps * torch.maximum(lo.abs(), hi.abs())
        assert out.double().min() >= lo - tol, (out.min(), lo)
        assert out.double().max() <= hi + tol, (out.max(), hi)
        assert torch.isfinite(out).all(), "finite input, non-finite output"
    else:
        assert out.min() >= lo and out.max() <= hi, (out.min(), out.max(), lo, hi)


# --------------------------------------------------------------------------- tensor ops


@dataclass(frozen=True)
class Op:
    name: str
    # (x, draw, generator) -> (callable, argument names, range law: None | "convex" | "zero-padded")
    build: Callable
    dtypes: tuple[torch.dtype, ...] = FLOATS + INTS
    min_side: int = 1
    min_batch: int = 0
    min_channels: int = 0


def _mixup(x, draw, g):
    per_sample = draw(st.booleans())
    lam = (
        torch.tensor(draw(st.lists(unit, min_size=x.shape[0], max_size=x.shape[0])))
        if per_sample
        else draw(unit)
    )
    y = make_labels(x, draw(labels))
    return (
        lambda: F.mixup_batch(x, y, lam, N_CLASSES, generator=g),
        ("x", "y", "interpolation_lambda", "n_classes", "indices"),
        "convex",
    )


def _cutmix(x, draw, g):
    alpha = draw(st.sampled_from([5e-324, 1e-300, 1e-3, 1.0, 1e3, 1e300]))
    y = make_labels(x, draw(labels))
    return (
        lambda: F.cutmix_batch(x, y, N_CLASSES, alpha=alpha, generator=g),
        ("x", "y", "n_classes", "alpha", "bbox", "indices"),
        "convex",
    )


def _cutout(x, draw, g):
    n_holes = draw(st.integers(0, 4))
    length = draw(st.one_of(st.integers(0, 30), st.floats(0.0, 0.999)))
    per_sample = draw(st.booleans())
    return (
        lambda: F.cutout(x, n_holes, length, per_sample=per_sample, generator=g),
        ("X", "n_holes", "length", "per_sample"),
        False,
    )


def _colout_batch(x, draw, g):
    p_row, p_col = draw(unit), draw(unit)
    return (lambda: F.colout_batch(x, p_row, p_col, generator=g), ("X", "p_row", "p_col"), False)


def _colout(x, draw, g):
    p_row, p_col = draw(unit), draw(unit)
    img = x[0]
    return (lambda: F.colout(img, p_row, p_col, generator=g), ("img", "p_row", "p_col"), False)


def _blur(x, draw, g):
    stride = draw(st.sampled_from([1, 2, 3, (1, 2)]))
    kind = draw(st.sampled_from(["default", "2d", "per-channel"]))
    filt = None
    if kind != "default":
        kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
        taps = torch.rand(kh, kw, generator=g, dtype=torch.float64) + 0.01
        taps = (taps / taps.sum()).to(x.dtype if x.is_floating_point() else torch.float32)
        filt = taps if kind == "2d" else taps.expand(x.shape[1], 1, kh, kw).clone()
    return (lambda: F.blur_2d(x, stride, filt), ("input", "stride", "filter"), "zero-padded")


def _blurmax(x, draw, g):
    k = draw(st.integers(1, 4))
    stride = draw(st.sampled_from([None, 1, 2, 3]))
    padding = draw(st.integers(0, k // 2))
    ceil_mode = draw(st.booleans())
    return (
        lambda: F.blurmax_pool2d(x, k, stride, padding, 1, ceil_mode),
        ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "filter"),
        "zero-padded",
    )


def _resize(x, draw, g):
    scale = draw(st.sampled_from([0.01, 0.5, 0.99, 1.0, 1.5, 3.0]))
    mode = draw(st.sampled_from(["resize", "crop"]))
    y = make_labels(x, "indices")
    return (
        lambda: F.resize_inputs(x, y, scale, mode, generator=g)[0],
        ("X", "y", "scale_factor", "mode", "resize_targets"),
        "convex",
    )


def _smooth(x, draw, g):
    logits = x.flatten(1)
    alpha = draw(unit)
    targets = make_labels(x, "indices") % max(1, logits.shape[1])
    return (lambda: F.smooth_labels(logits, targets, alpha), ("logits", "targets", "alpha"), False)


class _Scorer(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.bn(self.conv(x)).relu().mean((2, 3)))


def _select(x, draw, g):
    model = _Scorer(x.shape[1]).to(x.dtype).eval()  # eval: batch 1 at 1x1 is valid
    keep = draw(st.sampled_from([5e-324, 0.25, 0.5, 1.0]))
    scale = draw(st.sampled_from([0.01, 0.5, 1.0]))  # 0.01: 0 pixels, a clear ValueError
    y = make_labels(x, "indices")
    return (
        lambda: F.select_using_loss(
            x, y, model, nn.functional.cross_entropy, keep, scale, generator=g
        )[0],
        ("X", "y", "model", "loss_fun", "keep", "scale_factor"),
        False,
    )


OPS = [
    Op("mixup_batch", _mixup),
    Op("cutmix_batch", _cutmix),
    Op("cutout", _cutout),
    Op("colout_batch", _colout_batch),
    Op("colout", _colout, min_batch=1),
    Op("blur_2d", _blur),
    Op("blurmax_pool2d", _blurmax),
    Op("resize_inputs", _resize),
    Op("smooth_labels", _smooth, dtypes=FLOATS),
    # min_channels=1: the scoring model's convolution needs an input channel (its error, not ours)
    Op(
        "select_using_loss",
        _select,
        dtypes=(torch.float32, torch.float64),
        min_side=2,
        min_channels=1,
    ),
]

MODES = ["eager", "inference_mode"]


def _check_op(op: Op, data: st.DataObject, mode: str) -> None:
    x = data.draw(
        images(
            dtypes=op.dtypes,
            min_side=op.min_side,
            min_batch=op.min_batch,
            min_channels=op.min_channels,
        )
    )
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31 - 1)))
    fn, names, within = op.build(x, data.draw, g)
    before = snapshot(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "inference_mode":
            with torch.inference_mode():
                result = run_contract(fn, names)
        else:
            result = run_contract(fn, names)
    assert same(x, before), "the input was modified"
    if result is None:
        return
    out = result[0] if isinstance(result, tuple) else result
    if op.name == "smooth_labels":
        assert out.dtype == x.dtype
        return
    if op.name == "colout":
        assert out.dtype == x.dtype and out.device == x.device
        return
    assert_image_out(out, x)
    if within:
        assert_within(out, x, with_zero=within == "zero-padded")


@pytest.mark.parametrize(
    ("op", "mode"),
    [pytest.param(op, mode, id=f"{op.name}-{mode}") for op in OPS for mode in MODES],
)
@given(data=st.data())
def test_tensor_op_contract(op: Op, mode: str, data: st.DataObject) -> None:
    _check_op(op, data, mode)


# ----------------------------------------------------------------------- pinned cases
# Deterministic regression cases of the defects the fuzzing above found (all fixed); each states
# the contract it checks.

INT32_MAX = torch.iinfo(torch.int32).max


def _constant_int32_max(shape=(2, 3, 6, 7)) -> torch.Tensor:
    return torch.full(shape, INT32_MAX, dtype=torch.int32)


def _channels_last(shape=(3, 2, 8, 9)) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.rand(shape, generator=gen).contiguous(memory_format=torch.channels_last)


def _defect_mixup_int32_max():
    x = _constant_int32_max()
    out = F.mixup_batch(x, torch.arange(2), 0.3, 2)[0]
    assert out.dtype == torch.int32 and torch.equal(out, x), out.unique()


def _defect_blur_int32_max():
    x = _constant_int32_max()
    assert_within(F.blur_2d(x), x, with_zero=True)


def _defect_blurmax_int32_max():
    x = _constant_int32_max()
    assert_within(F.blurmax_pool2d(x, 2), x, with_zero=True)


def _defect_resize_int32_max():
    x = _constant_int32_max((2, 3, 8, 8))
    out = F.resize_inputs(x, torch.arange(2), 0.5)[0]
    assert torch.equal(out, x[..., :4, :4]), out.unique()


def _defect_cutout_per_sample_channels_last():
    x = _channels_last()
    out = F.cutout(x, 1, 3, per_sample=True, generator=torch.Generator().manual_seed(0))
    assert out.is_contiguous(memory_format=torch.channels_last)


def _defect_colout_batch_channels_last():
    x = _channels_last()
    out = F.colout_batch(x, 0.25, 0.25, generator=torch.Generator().manual_seed(0))
    assert out.is_contiguous(memory_format=torch.channels_last)


def _defect_smooth_labels_channels_last():
    logits = _channels_last()  # (B, C, H, W) dense-prediction logits
    out = F.smooth_labels(logits, torch.zeros(3, 8, 9, dtype=torch.long), 0.1)
    assert out.is_contiguous(memory_format=torch.channels_last)


def _defect_cutmix_subnormal_alpha():
    """alpha=5e-324 draws lambda 0 or 1 (Beta(a, a) as a -> 0): a finite result whose label
    weight on the partner is exactly the fraction of pixels pasted from it."""
    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    y = torch.arange(4)
    for seed in range(8):
        gen = torch.Generator().manual_seed(seed)
        mixed, labels, idx = F.cutmix_batch(x, y, 4, alpha=5e-324, generator=gen)
        assert torch.isfinite(mixed).all() and torch.isfinite(labels).all()
        moved = idx != torch.arange(4)
        pasted = ((mixed == x[idx]) & (mixed != x)).double().mean((1, 2, 3))
        torch.testing.assert_close(labels.sum(1), torch.ones(4))
        weight = labels[torch.arange(4), idx].double()
        torch.testing.assert_close(weight[moved], pasted[moved])


def _defect_lambda_subnormal_alpha():
    for seed in range(4):
        lam = F.gen_interpolation_lambda(5e-324, generator=torch.Generator().manual_seed(seed))
        assert lam in (0.0, 1.0), lam  # Beta(a, a) -> Bernoulli(1/2) on {0, 1} as a -> 0


def _defect_select_scale_to_zero_pixels():
    model = _Scorer(3).eval()
    calls = []
    model.register_forward_hook(lambda m, a, o: calls.append(1))
    x = torch.rand(4, 3, 10, 10)
    with pytest.raises(ValueError, match="scale_factor"):
        F.select_using_loss(x, torch.arange(4), model, nn.functional.cross_entropy, 0.5, 0.01)
    assert not calls, "the check must come before the scoring pass"


def _defect_select_mean_reduction_module():
    """A loss module built with reduction='mean' (nn.CrossEntropyLoss()) scores per sample,
    selects exactly what the functional loss selects, and keeps its own reduction."""
    model = _Scorer(3).eval()
    x, y = torch.rand(8, 3, 6, 6, generator=torch.Generator().manual_seed(0)), torch.arange(8) % 4
    loss = nn.CrossEntropyLoss()
    got = F.select_using_loss(x, y, model, loss, 0.5, generator=torch.Generator().manual_seed(1))
    want = F.select_using_loss(
        x, y, model, nn.functional.cross_entropy, 0.5, generator=torch.Generator().manual_seed(1)
    )
    assert got[0].shape == (4, 3, 6, 6)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert loss.reduction == "mean"


def _defect_resize_huge_scale():
    for scale in (1e6, 1e12):
        with pytest.raises(ValueError, match="scale_factor"):
            F.resize_inputs(torch.rand(1, 1, 4, 4), torch.arange(1), scale)


def _defect_blurmax_zero_channels():
    x = torch.rand(2, 0, 8, 8)
    out = run_contract(lambda: F.blurmax_pool2d(x, 2), ("input",))
    if out is not None:
        assert out.shape == (2, 0, 4, 4)


def _defect_blurmax_bool():
    x = torch.rand(2, 1, 8, 8) > 0.5
    out = run_contract(lambda: F.blurmax_pool2d(x, 2), ("input",))
    if out is not None:
        assert out.dtype == torch.bool


def _defect_blurmax_uint8_channels_last():
    x = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
    x = x.contiguous(memory_format=torch.channels_last)
    out = F.blurmax_pool2d(x, 3, 2, 1)
    assert out.dtype == torch.uint8 and out.shape == (2, 3, 8, 8)


DEFECTS = {
    "mixup_batch-int32-max": _defect_mixup_int32_max,
    "blur_2d-int32-max": _defect_blur_int32_max,
    "blurmax_pool2d-int32-max": _defect_blurmax_int32_max,
    "resize_inputs-int32-max": _defect_resize_int32_max,
    "cutout-per_sample-channels_last": _defect_cutout_per_sample_channels_last,
    "colout_batch-channels_last": _defect_colout_batch_channels_last,
    "smooth_labels-channels_last": _defect_smooth_labels_channels_last,
    "cutmix_batch-subnormal-alpha": _defect_cutmix_subnormal_alpha,
    "gen_interpolation_lambda-subnormal-alpha": _defect_lambda_subnormal_alpha,
    "select_using_loss-scale-to-zero-pixels": _defect_select_scale_to_zero_pixels,
    "select_using_loss-mean-reduction-module": _defect_select_mean_reduction_module,
    "resize_inputs-huge-scale": _defect_resize_huge_scale,
    "blurmax_pool2d-zero-channels": _defect_blurmax_zero_channels,
    "blurmax_pool2d-bool": _defect_blurmax_bool,
    "blurmax_pool2d-uint8-channels_last": _defect_blurmax_uint8_channels_last,
}


@pytest.mark.parametrize("name", list(DEFECTS))
def test_pinned_cases(name: str) -> None:
    DEFECTS[name]()


# ----------------------------------------------------------------------- meta device


META_CALLS = {
    "mixup_batch": lambda x: F.mixup_batch(x, torch.arange(x.shape[0], device="meta"), 0.3, 4),
    "cutmix_batch": lambda x: F.cutmix_batch(x, torch.arange(x.shape[0], device="meta"), 4),
    "cutout": lambda x: F.cutout(x, 2, 3),
    "cutout_per_sample": lambda x: F.cutout(x, 2, 3, per_sample=True),
    "colout_batch": lambda x: F.colout_batch(x, 0.2, 0.3),
    "blur_2d": lambda x: F.blur_2d(x),
    "blurmax_pool2d": lambda x: F.blurmax_pool2d(x, 2),
    "resize_inputs": lambda x: F.resize_inputs(x, torch.arange(x.shape[0], device="meta"), 0.5),
    "smooth_labels": lambda x: F.smooth_labels(
        x.flatten(1), torch.zeros(x.shape[0], dtype=torch.long, device="meta"), 0.1
    ),
}


@pytest.mark.parametrize("name", list(META_CALLS))
def test_tensor_ops_on_the_meta_device(name: str) -> None:
    """Shape-only code (model building, FLOP counting) runs the ops on meta tensors."""
    x = torch.empty(3, 2, 8, 10, device="meta")
    out = META_CALLS[name](x)
    out = out[0] if isinstance(out, tuple) else out
    assert out.device.type == "meta" and out.dtype == x.dtype


# ----------------------------------------------------------------------- scalar functions


@given(alpha=st.one_of(st.sampled_from([1e-300, 1e-30, 1e300]), st.floats(1e-6, 1e6)))
def test_gen_interpolation_lambda_is_a_number_in_the_unit_interval(alpha: float) -> None:
    g = torch.Generator().manual_seed(0)
    lam = run_contract(lambda: F.gen_interpolation_lambda(alpha, generator=g), ("alpha",))
    if lam is not None:
        assert isinstance(lam, float) and 0.0 <= lam <= 1.0, lam
    lams = run_contract(
        lambda: F.gen_interpolation_lambda(alpha, batch_size=3, generator=g),
        ("alpha", "batch_size"),
    )
    if lams is not None:
        assert lams.shape == (3,) and bool(((lams >= 0) & (lams <= 1)).all()), lams


@given(
    progress=unit,
    initial=st.sampled_from([5e-324, 0.01, 0.5, 1.0]),
    finetune=unit,
    half_life=st.sampled_from([5e-324, 1e-3, 1.0, 1e300]),
    interval=st.sampled_from([5e-324, 1.0, 1e6]),
    seq=st.tuples(st.integers(1, 64), st.integers(1, 4096), st.integers(1, 64)),
)
def test_schedules_stay_in_their_ranges(progress, initial, finetune, half_life, interval, seq):
    s = run_contract(
        lambda: F.progressive_resizing_scale(progress, initial, finetune),
        ("progress", "initial_scale", "finetune_fraction"),
    )
    if s is not None:
        assert min(initial, 1.0) <= s <= 1.0 and math.isfinite(s)
    e = run_contract(lambda: F.ema_smoothing(half_life, interval), ("half_life", "update_interval"))
    if e is not None:
        assert 0.0 <= e <= 1.0
    lo, hi, step = seq
    n = run_contract(
        lambda: F.seq_length_warmup_length(progress, 0.3, lo, hi, step),
        ("progress", "duration", "min_seq_length", "max_seq_length", "step_size"),
    )
    if n is not None:
        assert isinstance(n, int) and lo <= n <= hi


@given(
    data=st.data(),
    length=st.integers(1, 40),
    batch=st.integers(0, 4),
    truncate=st.booleans(),
)
def test_seq_length_warmup_keeps_dtypes_and_inputs(data, length, batch, truncate) -> None:
    cur = data.draw(st.integers(1, length + 5))
    ids = torch.arange(batch * length, dtype=torch.int64).reshape(batch, length)
    mask = torch.ones(batch, length, dtype=torch.bool)
    emb = torch.ones(batch, length, 3, dtype=torch.bfloat16)
    inputs = {"input_ids": ids, "attention_mask": mask, "embeds": emb}
    before = {k: v.clone() for k, v in inputs.items()}
    out = run_contract(
        lambda: F.apply_seq_length_warmup(inputs, cur, truncate), ("batch", "curr_seq_len")
    )
    for k in inputs:
        assert torch.equal(inputs[k], before[k])
    if out is not None:
        for k, v in out.items():
            assert v.dtype == inputs[k].dtype and v.shape[1] == min(cur, length)


# ----------------------------------------------------------------------- training state


@given(smoothing=unit, dtype=st.sampled_from(FLOATS), data=st.data())
def test_compute_ema_with_any_smoothing_and_dtype(smoothing, dtype, data) -> None:
    seed = data.draw(st.integers(0, 2**31 - 1))
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)).to(dtype)
    ema = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)).to(dtype)
    model[1].num_batches_tracked.fill_(7)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    old_ema = {k: v.clone() for k, v in ema.state_dict().items()}
    F.compute_ema(model, ema, smoothing)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    for k, v in ema.state_dict().items():
        assert v.dtype == before[k].dtype
        if v.is_floating_point():
            lo = torch.minimum(before[k], old_ema[k]).double()
            hi = torch.maximum(before[k], old_ema[k]).double()
            tol = 4 * torch.finfo(dtype).eps * (lo.abs() + hi.abs())
            assert bool((v.double() >= lo - tol).all() and (v.double() <= hi + tol).all()), k
        else:
            assert torch.equal(v, before[k])


THRESHOLDS = {"subnormal": 5e-324, "small": 1e-3, "one": 1.0, "huge": 1e300}
GRADS = ("normal", "none", "zero", "huge", "empty-param")


def _model_with_odd_gradients(grads: str) -> nn.Module:
    """Two linear layers (and an empty parameter for "empty-param") with the named gradients."""
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    if grads == "empty-param":
        model.register_parameter("empty", nn.Parameter(torch.empty(0, 3)))
    for i, p in enumerate(model.parameters()):
        if grads == "none":
            continue
        g = torch.full_like(p, 0.5 * (i + 1))
        p.grad = {"zero": torch.zeros_like(p), "huge": g * 1e30}.get(grads, g)
    return model


def _assert_within_adaptive_bound(p: nn.Parameter, limit: float, slack: float) -> None:
    """Each output row's gradient norm is at most ``limit`` times its weight norm."""
    rows = p.grad.double().reshape(p.shape[0], -1) if p.ndim > 1 else p.grad.double()[None]
    w = p.detach().double().reshape(rows.shape)
    bound = limit * w.norm(dim=1).clamp_min(1e-3)
    assert (rows.norm(dim=1) <= bound * slack).all()


@pytest.mark.parametrize("grads", GRADS)
@pytest.mark.parametrize("threshold", THRESHOLDS)
@pytest.mark.parametrize("clipping_type", ["norm", "value", "adaptive"])
def test_gradient_clipping_on_odd_gradients(clipping_type, threshold, grads) -> None:
    """No gradients yet (first step, frozen model), zero or huge gradients (whose float32 norm
    overflows), an empty parameter; thresholds from subnormal to beyond float32. No error;
    clipped gradients stay finite and within the bound; a zero gradient stays zero; a
    threshold beyond float32 (inf there) clips nothing, even when the norm overflowed."""
    model = _model_with_odd_gradients(grads)
    before = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    limit = THRESHOLDS[threshold]
    norm = F.apply_gradient_clipping(model.parameters(), clipping_type, limit)
    if clipping_type == "value":
        assert norm is None
    elif grads in ("none", "zero"):
        assert norm == 0
    slack = 1 + 1e-5
    for p, g in zip(model.parameters(), before, strict=True):
        if g is None:
            assert p.grad is None
            continue
        assert torch.isfinite(p.grad).all(), p.grad
        if threshold == "huge" or grads == "zero":
            assert torch.equal(p.grad, g), "nothing to clip"
        if clipping_type == "value":
            assert p.grad.abs().max() <= limit if p.numel() else True
        if clipping_type == "adaptive" and p.numel():
            _assert_within_adaptive_bound(p, limit, slack)
    norms = [p.grad.double().norm() for p in model.parameters() if p.grad is not None]
    if clipping_type == "norm" and norms:
        assert torch.stack(norms).norm() <= limit * slack


# ----------------------------------------------------------------------- model transforms


def conv_model() -> nn.Sequential:
    """A small CNN with every kind of layer the vision transforms look for, at widths that
    pass their default thresholds."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 128, 3, padding=1),
        nn.BatchNorm2d(128),
        nn.ReLU(),
        nn.Conv2d(128, 512, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.LayerNorm(512),
        nn.Linear(512, 512),
        nn.ReLU(),
        nn.Linear(512, 10),
    )


TRANSFORMS = {
    "apply_blurpool": lambda m, opt: F.apply_blurpool(m, optimizers=opt),
    "apply_se": lambda m, opt: F.apply_se(m, optimizers=opt),
    "apply_ghost_batchnorm": lambda m, opt: F.apply_ghost_batchnorm(m, 2, optimizers=opt),
    "apply_factorization": lambda m, opt: F.apply_factorization(m, optimizers=opt),
    "apply_low_precision_layernorm": lambda m, opt: F.apply_low_precision_layernorm(
        m, torch.bfloat16, optimizers=opt
    ),
    "apply_channels_last": lambda m, opt: F.apply_channels_last(m),
    "apply_weight_standardization": lambda m, opt: F.apply_weight_standardization(m),
}


def _transform_case(name: str, situation: str, *, with_situation: bool = True):
    values = (name, situation) if with_situation else (name,)
    return pytest.param(*values, id=f"{name}-{situation}")


@pytest.mark.parametrize(
    ("name", "situation"),
    [_transform_case(n, s) for n in TRANSFORMS for s in ("frozen", "partial-optimizer")],
)
def test_transforms_never_create_orphan_or_unfrozen_parameters(name: str, situation: str):
    """A frozen backbone, or a backbone no optimizer holds (only the head is optimised):
    parameters the transform creates either are held by the optimizer, or stay frozen, or a
    warning says so (issue 13 points 3 and 4: never a silent orphan)."""
    torch.manual_seed(0)
    model = conv_model()
    head = list(model[13:].parameters())  # the last Linear; the rest is the backbone
    if situation == "frozen":
        for p in model[:13].parameters():
            p.requires_grad_(False)
    opt = torch.optim.SGD(head, lr=0.1, momentum=0.9)
    existing = {id(p) for p in model.parameters()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        TRANSFORMS[name](model, opt)
    told = [w for w in caught if not issubclass(w.category, surgery.NoEffectWarning)]
    held = {id(p) for g in opt.param_groups for p in g["params"]}
    orphans = [
        n
        for n, p in model.named_parameters()
        if p.requires_grad and id(p) not in held and id(p) not in existing
    ]
    assert not orphans or told, f"new trainable parameters no optimizer updates: {orphans}"
    if situation == "frozen":
        frozen_now = [
            n
            for n, p in model.named_parameters()
            if id(p) in held and n.startswith(tuple(f"{i}." for i in range(13)))
        ]
        assert not frozen_now, f"parameters of frozen layers joined the optimizer: {frozen_now}"
    model.eval()
    out = model(torch.rand(2, 3, 8, 8))
    assert out.shape == (2, 10) and torch.isfinite(out).all()


@pytest.mark.parametrize(
    "name", [_transform_case(n, "meta", with_situation=False) for n in TRANSFORMS]
)
def test_transforms_on_the_meta_device(name: str) -> None:
    """Shape-only model building: transform a meta model and run its forward."""
    model = conv_model().to("meta")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        TRANSFORMS[name](model, None)
    model.train()
    out = model(torch.empty(2, 3, 8, 8, device="meta"))
    assert out.shape == (2, 10) and out.device.type == "meta"


@pytest.mark.parametrize(
    "name", [_transform_case(n, "inference", with_situation=False) for n in TRANSFORMS]
)
def test_transforms_of_a_model_built_in_inference_mode(name: str) -> None:
    """Deployment code: build, transform and run the model under torch.inference_mode, on
    images large enough for every kernel path (64x64)."""
    with torch.inference_mode():
        torch.manual_seed(0)
        model = conv_model().eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            TRANSFORMS[name](model, None)
        out = model(torch.rand(2, 3, 64, 64))
    assert out.shape == (2, 10) and torch.isfinite(out).all()


@pytest.mark.parametrize(
    "name", [_transform_case(n, "converted", with_situation=False) for n in TRANSFORMS]
)
def test_transforms_then_dtype_conversion_in_inference_mode(name: str) -> None:
    """Transform, convert with .double(), evaluate under inference_mode on 64x64 images."""
    torch.manual_seed(0)
    model = conv_model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        TRANSFORMS[name](model, None)
    model = model.double().eval()
    with torch.inference_mode():
        out = model(torch.rand(2, 3, 64, 64, dtype=torch.float64))
    assert out.dtype == torch.float64 and torch.isfinite(out).all()


def test_every_tensor_op_is_fuzzed() -> None:
    """Adding a public tensor op means adding it here."""
    fuzzed = {op.name for op in OPS}
    tensor_ops = {
        "mixup_batch", "cutmix_batch", "cutout", "colout", "colout_batch", "blur_2d",
        "blurmax_pool2d", "resize_inputs", "smooth_labels", "select_using_loss",
    }  # fmt: skip
    assert tensor_ops <= fuzzed
    assert all(hasattr(F, name) for name in fuzzed)
