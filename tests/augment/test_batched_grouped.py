"""The grouped CPU path of the batched chains (augment.batched.grouped): several layers with
sorting and restoring of the rows, and the exactness of the shared table formulas."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import augment
from augment.batched import grouped as G
from augment.batched import ops as B
from augment.batched import stages as S
from augment.batched import transforms as AB
from tests.augment.test_batched import _batch


@pytest.mark.parametrize("augmentation_set", ["all", "original"])
@pytest.mark.parametrize("seed", [0, 1])
def test_layers_equal_one_apply_plan_per_layer(augmentation_set, seed) -> None:
    """Four layers at once (each sorts the rows by operation; the order is restored once at
    the end) against the all-families stages applied layer by layer."""
    kinds = AB._kinds(augmentation_set)
    g = torch.Generator().manual_seed(seed)
    n, layers = 40, 4
    x = _batch(np.random.default_rng(seed), n, 3, 11, 14)
    op = torch.randint(-1, len(kinds), (layers, n), generator=g)  # -1: unchanged
    level = torch.rand(layers, n, generator=g, dtype=torch.float64) * 10
    sign = torch.where(torch.rand(layers, n, generator=g) < 0.5, -1.0, 1.0)
    want = B.to_levels(x)
    for k in range(layers):
        want = B.apply_plan(want, B.plan_ops(op[k], level[k], sign[k], kinds, 11, 14), kinds)
    plan = B.plan_ops(op, level, sign, kinds, 11, 14, only=G.NOT_LUT)
    got = G.apply_layers(x.clone(), (op, level, sign), plan, kinds)
    assert got.dtype == torch.uint8
    assert torch.equal(got.float(), want)


@pytest.mark.parametrize("layers", [0, 1, 3])
def test_copies_are_made_by_the_first_sort(layers) -> None:
    """``copies=3`` (AugMix's chains) equals the layers on three stacked copies of the batch."""
    kinds = AB._kinds("all")
    g = torch.Generator().manual_seed(layers)
    x = _batch(np.random.default_rng(layers), 5, 3, 9, 7)
    n = 3 * x.shape[0]
    op = torch.randint(-1, len(kinds), (layers, n), generator=g)
    level = torch.rand(layers, n, generator=g, dtype=torch.float64) * 10
    sign = torch.where(torch.rand(layers, n, generator=g) < 0.5, -1.0, 1.0)
    plan = B.plan_ops(op, level, sign, kinds, 9, 7, only=G.NOT_LUT)
    want = G.apply_layers(x.repeat(3, 1, 1, 1), (op, level, sign), plan, kinds)
    before = x.clone()
    got = G.apply_layers(x, (op, level, sign), plan, kinds, copies=3)
    assert torch.equal(got, want)
    assert torch.equal(x, before)


def test_layers_leave_their_input_order_and_odd_row_sizes() -> None:
    """Rows whose size is not a multiple of 8 bytes (sorted byte by byte) and a layer where
    nobody does anything."""
    kinds = AB._kinds("all")
    x = _batch(np.random.default_rng(3), 9, 1, 3, 5)  # 15 bytes a row
    op = torch.tensor([[-1] * 9, [0, 1, 2, 3, 4, 5, 6, -1, 12]])
    level = torch.full((2, 9), 7.0, dtype=torch.float64)
    sign = torch.ones(2, 9)
    plan = B.plan_ops(op, level, sign, kinds, 3, 5, only=G.NOT_LUT)
    got = G.apply_layers(x.clone(), (op, level, sign), plan, kinds)
    want = B.apply_plan(B.to_levels(x), B.plan_ops(op[1], level[1], sign[1], kinds, 3, 5), kinds)
    assert torch.equal(got.float(), want)
    assert torch.equal(got[7], x[7])


def test_autocontrast_tables_in_float32_equal_pillows_integer_formula() -> None:
    """Every pair of lowest and highest levels: the float32 division with floor equals the
    integer floor division of Pillow's formula (and one level only is the identity)."""
    lo, hi = torch.meshgrid(torch.arange(256), torch.arange(256), indexing="ij")
    keep = lo <= hi
    lo, hi = lo[keep], hi[keep]
    v = torch.stack([lo, hi], dim=-1).view(-1, 1, 1, 2).to(torch.uint8)  # two pixels each
    got = S.autocontrast_tables(v).view(-1, 256).to(torch.int64)
    ramp = torch.arange(256)
    span = (hi - lo).clamp(min=1).view(-1, 1)
    want = torch.div((ramp - lo.view(-1, 1)) * 510 + span, 2 * span, rounding_mode="floor")
    want = torch.where((hi > lo).view(-1, 1), want.clamp(0, 255), ramp)
    assert torch.equal(got, want)


@pytest.mark.parametrize("kind", B.KINDS)
def test_each_operation_on_its_slice_equals_the_all_families_stage(kind) -> None:
    """The grouped path's own formulas (most tables' formulas on the levels themselves, shifts
    of whole rows or planes as window copies) against the all-families stages: every level
    present (0..255 on a 12 x 24 image, and reversed), the ends of the level range (solarize's
    thresholds 256 and 0: nowhere and everywhere; the longest shifts) both ways and between,
    and one-level images (autocontrast's identity)."""
    kinds = (kind,)
    ramp = (torch.arange(12 * 24) % 256).to(torch.uint8).view(1, 1, 12, 24)
    x = torch.cat(
        [
            ramp.expand(1, 3, 12, 24),
            ramp.flip(-1).flip(-2).expand(1, 3, 12, 24),
            torch.randint(
                0,
                256,
                (6, 3, 12, 24),
                generator=torch.Generator().manual_seed(0),
                dtype=torch.uint8,
            ),
            torch.full((2, 3, 12, 24), 77, dtype=torch.uint8),
        ]
    )
    x[2, 1] //= 3  # planes of one sample with different ranges
    n = x.shape[0]
    level = torch.tensor(
        [0.0, 10.0, 0.05, 9.96, 3.3, 5.0, 7.77, 10.0, 10.0, 0.0], dtype=torch.float64
    )
    sign = torch.tensor([1.0, -1.0] * (n // 2))
    op = torch.zeros(n, dtype=torch.int64)
    got = B.apply_grouped(x, op, level, sign, kinds)
    want = B.apply_plan(B.to_levels(x), B.plan_ops(op, level, sign, kinds, 12, 24), kinds)
    assert torch.equal(got.float(), want)


def test_to_uint8_truncates_like_the_direct_conversion() -> None:
    v = torch.linspace(0.0, 255.999, 100_003)
    assert torch.equal(S.to_uint8(v), v.to(torch.uint8))


def test_a_set_that_names_an_operation_twice_applies_it_whichever_copy_was_drawn(
    monkeypatch,
) -> None:
    """Both copies of rotate rotate (the first copy's samples were left unchanged before),
    on both paths, with equal values."""
    from augment.batched import paths as BP

    x = _batch(np.random.default_rng(5), 64, 3, 8, 8)
    ops = [augment.rotate, augment.rotate]
    outs = []
    for grouped in (True, False):
        monkeypatch.setattr(BP, "GROUPED", grouped)
        g = torch.Generator().manual_seed(0)
        outs.append(augment.batch_randaugment(x, 9, 1, augmentation_set=ops, generator=g))
    assert torch.equal(outs[0], outs[1])
    assert not (outs[0] == x).flatten(1).all(1).any()


def test_the_input_is_left_as_it_is() -> None:
    kinds = AB._kinds("all")
    n = 2 * (len(kinds) + 1)
    x = _batch(np.random.default_rng(2), n, 3, 8, 8)
    before = x.clone()
    op = torch.arange(-1, len(kinds)).repeat(2)
    out = B.apply_grouped(x, op, torch.full((n,), 5.0, dtype=torch.float64), torch.ones(n), kinds)
    assert torch.equal(x, before) and not torch.equal(out, x)
    for fn in (augment.batch_augment_and_mix, augment.batch_randaugment):
        fn(x, generator=torch.Generator().manual_seed(1))
        assert torch.equal(x, before), fn.__name__


def test_apply_grouped_checks_its_arguments() -> None:
    kinds = AB._kinds("all")
    u = torch.zeros(4, 3, 8, 8, dtype=torch.uint8)
    op, level, sign = torch.zeros(4, dtype=torch.int64), torch.ones(4), torch.ones(4)
    with pytest.raises(TypeError, match="u must be"):
        B.apply_grouped(u.float(), op, level, sign, kinds)
    with pytest.raises(ValueError, match="op, level and sign must"):
        B.apply_grouped(u, op[:3], level, sign, kinds)
    with pytest.raises(ValueError, match="op, level and sign must"):
        B.apply_grouped(u, op, level, sign.view(2, 2), kinds)
