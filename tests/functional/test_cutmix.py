"""cutmix_batch: the pasted box, and labels weighted by the area actually pasted."""

from __future__ import annotations

import pytest
import torch

import functional as F
from tests.functional import reference


@pytest.mark.parametrize(
    "box",
    [(1, 2, 4, 5), (0, 0, 6, 5), (3, 3, 3, 5), (-2, -1, 2, 3), (4, 3, 9, 9), (0, 0, 0, 0)],
)
@pytest.mark.parametrize("dense", [False, True])
def test_fixed_box_matches_reference(box, dense) -> None:
    x = torch.randn(4, 2, 5, 6, dtype=torch.float64)
    y = torch.tensor([0, 2, 1, 2])
    labels = torch.nn.functional.one_hot(y, 3).double() if dense else y
    perm = torch.tensor([2, 3, 0, 1])
    x_mix, y_mix, used = F.cutmix_batch(x, labels, 3, indices=perm, bbox=box)
    clipped = (max(box[0], 0), max(box[1], 0), min(box[2], 6), min(box[3], 5))
    x_ref, y_ref = reference.cutmix(x, labels, perm.tolist(), clipped, 3)
    assert torch.equal(used, perm)
    assert torch.equal(x_mix, x_ref)
    torch.testing.assert_close(y_mix.double(), y_ref)


def test_box_is_left_top_right_bottom_with_x_along_width() -> None:
    x = torch.zeros(2, 1, 4, 6)
    x[1] = 1.0
    out, _, _ = F.cutmix_batch(
        x, torch.tensor([0, 1]), 2, indices=torch.tensor([1, 0]), bbox=(1, 0, 4, 2)
    )
    expected = torch.zeros(4, 6)
    expected[0:2, 1:4] = 1.0
    assert torch.equal(out[0, 0], expected)


@pytest.mark.parametrize("seed", range(40))
def test_random_box_labels_weighted_by_the_true_pasted_area(seed) -> None:
    # Sample i holds the value i everywhere: the output shows exactly which pixels were pasted.
    height, width = 7, 9
    x = torch.arange(5, dtype=torch.float32).view(5, 1, 1, 1).expand(5, 2, height, width).clone()
    y = torch.arange(5)
    gen = torch.Generator().manual_seed(seed)
    x_mix, y_mix, perm = F.cutmix_batch(x, y, 5, alpha=0.7, generator=gen)
    moved = [i for i in range(5) if perm[i] != i]  # a sample paired with itself shows nothing
    pasted = x_mix[:, 0] != x[:, 0]
    first = pasted[moved[0]]
    fraction = first.float().mean().item()
    # One box for the batch, a rectangle, the same on every channel.
    assert all(torch.equal(first, pasted[i]) for i in moved)
    assert torch.equal(x_mix[:, 0], x_mix[:, 1])
    rows, cols = first.any(1).nonzero(), first.any(0).nonzero()
    if len(rows):
        box = torch.zeros(height, width, dtype=torch.bool)
        box[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1] = True
        assert torch.equal(box, first)
    for i in moved:
        assert y_mix[i, perm[i]].item() == pytest.approx(fraction)
        assert y_mix[i, i].item() == pytest.approx(1 - fraction)
    torch.testing.assert_close(y_mix.sum(1), torch.ones(5))


def test_box_area_follows_beta_before_clipping() -> None:
    # With alpha = 1 the kept fraction λ is uniform: the nominal box covers 1 - λ on average,
    # the clipped one less. The mean pasted fraction must lie between the clipped extremes.
    fractions = []
    x, y = torch.zeros(2, 1, 40, 40), torch.tensor([0, 1])
    x[1] = 1
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        x_mix = F.cutmix_batch(x, y, 2, indices=torch.tensor([1, 0]), generator=gen)[0]
        fractions.append((x_mix[0] != x[0]).float().mean().item())
    mean = sum(fractions) / len(fractions)
    assert 0.2 < mean < 0.5


def test_reproducible_with_generator() -> None:
    x, y = torch.rand(8, 3, 10, 10), torch.arange(8)
    a = F.cutmix_batch(x, y, 8, generator=torch.Generator().manual_seed(3))
    b = F.cutmix_batch(x, y, 8, generator=torch.Generator().manual_seed(3))
    for u, v in zip(a, b, strict=True):
        assert torch.equal(u, v)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"alpha": 0.0}, "alpha must be a finite number > 0"),
        ({"x": torch.rand(4, 5)}, "x must have shape \\(B, ..., H, W\\)"),
        ({"bbox": (3, 0, 1, 2)}, "x1 <= x2"),
        ({"y": torch.arange(5)}, "y must have the batch size"),
        ({"x": torch.rand(4, 3, 0, 4)}, "non-empty images"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match) -> None:
    args = {"x": torch.rand(4, 3, 6, 6), "y": torch.arange(4), "n_classes": 4}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        F.cutmix_batch(**args)


@pytest.mark.parametrize("bbox", [(1, 2, 3), (0.5, 0, 1, 1), "1234"])
def test_bad_bbox_type(bbox) -> None:
    with pytest.raises(TypeError, match="bbox must be a tuple of 4 ints"):
        F.cutmix_batch(torch.rand(2, 1, 4, 4), torch.arange(2), 2, bbox=bbox)


@pytest.mark.parametrize("indices", [[2, 0, 1], [1, 1, 0]])
@pytest.mark.parametrize("box", [(1, 1, 3, 3), (0, 0, 6, 4), (2, 0, 6, 5)])
def test_permutation_and_general_indices_paths(box, indices) -> None:
    x = torch.randn(3, 2, 5, 6, dtype=torch.float64)
    perm = torch.tensor(indices)
    x_mix, _, _ = F.cutmix_batch(x, torch.arange(3), 3, indices=perm, bbox=box)
    assert torch.equal(x_mix, reference.cutmix(x, torch.arange(3), indices, box, 3)[0])
    x.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda t: F.cutmix_batch(t, torch.arange(3), 3, indices=perm, bbox=box)[0], (x,)
    )


@pytest.mark.parametrize(
    ("shape", "channels_last"),
    [
        ((6, 3, 9, 11), False),
        ((6, 3, 9, 11), True),
        ((5, 1, 7, 7), False),
        ((4, 2, 3, 8, 10), False),
    ],
)
def test_the_device_gather_pastes_what_the_select_pastes(shape, channels_last) -> None:
    """Accelerators paste with one gather through an int32 per-pixel index (the partner batch
    never copied whole); the same pixels as the CPU select, in the input's memory format."""
    from functional import cutmix as CM

    g = torch.Generator().manual_seed(0)
    x = torch.rand(shape, generator=g)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    h, w = shape[-2:]
    for _ in range(20):
        perm = torch.randperm(shape[0], generator=g)
        y1, y2 = sorted(torch.randint(0, h + 1, (2,), generator=g).tolist())
        x1, x2 = sorted(torch.randint(0, w + 1, (2,), generator=g).tolist())
        box = torch.tensor([x1, y1, x2, y2])
        got = CM._paste_gathered(x, perm, box)
        assert torch.equal(got, CM._paste(x, perm, box))
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        assert got.is_contiguous(memory_format=fmt)


def test_on_a_device_cutmix_moves_little_more_than_the_batch() -> None:
    """Counted on meta tensors (the accelerator branch): no sync, and bytes at most 1.5x the
    minimum (read the batch, write the result; it was 2.5-3x with a full-batch gather and a
    full-image select)."""
    from benchmarks import device as D

    _, syncs, ratio = D.measure(D.ours()["cutmix_batch"])
    assert syncs == 0 and ratio <= 1.5


# Composer's length and uniform_sampling.


def _pasted(x_mix: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (x_mix != x)[0, 0]


@pytest.mark.parametrize("length,h,w", [(0.5, 10, 12), (0.3, 9, 20), (1.0, 5, 6)])
def test_length_fixes_the_box_sides_and_labels_follow_the_clipped_area(length, h, w) -> None:
    x = torch.arange(2 * h * w, dtype=torch.float32).view(2, 1, h, w)
    y = torch.tensor([0, 1])
    perm = torch.tensor([1, 0])
    cut_h, cut_w = int(length * h), int(length * w)
    seen_full = False
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        x_mix, y_mix, _ = F.cutmix_batch(x, y, 2, indices=perm, length=length, generator=g)
        plane = _pasted(x_mix, x)
        rows, cols = int(plane.any(1).sum()), int(plane.any(0).sum())
        assert int(plane.sum()) == rows * cols and rows <= cut_h and cols <= cut_w
        seen_full |= (rows, cols) == (cut_h, cut_w)
        area = rows * cols / (h * w)
        torch.testing.assert_close(y_mix[0], torch.tensor([1 - area, area]))
    assert seen_full


@pytest.mark.parametrize("length", [None, 0.5])
def test_uniform_sampling_pastes_every_pixel_equally_often(length) -> None:
    import importlib

    cutmix_module = importlib.import_module("functional.cutmix")
    h, w, n = 5, 6, 3000
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(h, w, dtype=torch.float64)
    for _ in range(n):  # the box drawing alone (the paste is tested above): fast
        if length is None:
            sides = cutmix_module._sides_from_alpha(h, w, 1.0, g)
        else:
            sides = cutmix_module._sides_from_length(h, w, length, g)
        box = cutmix_module._draw_bbox(h, w, sides, True, g)
        counts += cutmix_module._box_mask(box, h, w, torch.device("cpu"))
    freq = counts / n
    assert float(freq.max() - freq.min()) < 0.07  # every pixel equally likely
    if length is not None:  # side 2 x 3: probability 2/(5+1) * 3/(6+2) per pixel
        expected = torch.tensor(2 / 6 * 3 / 8, dtype=torch.float64)
        torch.testing.assert_close(freq.mean(), expected, atol=0.02, rtol=0)
    x = torch.zeros(2, 1, h, w)
    x[1] = 1.0
    x_mix, y_mix, _ = F.cutmix_batch(
        x,
        torch.tensor([0, 1]),
        2,
        indices=torch.tensor([1, 0]),
        length=length,
        uniform_sampling=True,
        generator=torch.Generator().manual_seed(3),
    )
    torch.testing.assert_close(y_mix[0, 1], x_mix[0, 0].mean())  # labels follow the area


def test_default_sampling_pastes_the_border_less_often() -> None:
    x = torch.zeros(2, 1, 8, 8)
    x[1] = 1.0
    g = torch.Generator().manual_seed(0)
    counts = sum(
        F.cutmix_batch(
            x, torch.tensor([0, 1]), 2, indices=torch.tensor([1, 0]), length=0.5, generator=g
        )[0][0, 0]
        for _ in range(600)
    )
    assert counts[0, 0] < counts[4, 4] * 0.6


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"length": 0.5, "bbox": (0, 0, 2, 2)}, ValueError, "not both"),
        ({"length": 1.5}, ValueError, "length must be in"),
        ({"length": "0.5"}, TypeError, "length"),
        ({"uniform_sampling": "yes"}, TypeError, "uniform_sampling must be a bool"),
    ],
)
def test_length_and_uniform_sampling_refusals(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        F.cutmix_batch(torch.rand(2, 3, 4, 4), torch.tensor([0, 1]), 2, **kwargs)
